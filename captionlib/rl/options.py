"""The options of RL fine-tuning (stage 6), each written once; see :mod:`captionlib.train.options`.

These are the options every objective shares; an objective's own options are the keys of its
``rl_conf`` block, declared by its class (``Conf``, see :mod:`captionlib.rl`). Imports no
torch, so ``--help`` stays fast.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

from captionlib.data import UNITS
from captionlib.rl import RL_OBJECTIVES
from captionlib.train.options import DATA, OPTIM, TrainOptions, freeze_encoder_option, option

PG = "policy gradient"


@dataclass
class RLOptions(TrainOptions):
    """Options of RL fine-tuning from an XE model file; see :func:`captionlib.rl.train.train_rl`.

    ``rl_algo`` is a key of :data:`captionlib.rl.RL_OBJECTIVES`; the command line offers the
    built-in ones (:data:`captionlib.rl.RL_ALGOS`), :func:`captionlib.rl.register_objective`
    adds others for library use.
    """

    lr: float = option(5e-5, "peak learning rate", OPTIM, valid="> 0")  # seed 000: 5e-5 for RL (XE: 5e-4)
    # the live registry: an objective added by register_objective is a valid choice too
    rl_algo: str = option("scst", "the RL objective (see captionlib.rl.train)", PG, RL_OBJECTIVES)
    rl_conf: Dict[str, Any] = option(
        {}, "the options of --rl_algo's objective (YAML mapping, or key=value items, as encoder_conf); "
            "--rl_algo X --help lists X's keys", PG)
    temperature: float = option(1.0, "sampling temperature", PG, valid="> 0")
    init_param: Optional[str] = option(None, "XE model file to start from", DATA, required=True)
    cider_df: Optional[str] = option(None, "CIDEr-D document frequencies of the train refs (stage 4)", DATA,
                                     required=True)
    trust_pickle: bool = option(
        False, "read an old pickled --cider_df (cider_df.pkl; only numpy arrays and numbers allowed, nothing in it "
               "run): for files you made yourself (better: convert it once with caption_convert_model)", DATA)
    reward: str = option("cider_d:1.0", "metric:weight[,metric:weight] (cider_d, cider_d_batch, bleu_1..4, rouge_l, "
                                        "spice, spider)", PG)
    spice_lib_dir: Optional[str] = option(None, "CoreNLP jars for spice/spider rewards", PG)
    fluency_penalty: float = option(
        0.0, "multiply a caption's reward by (1 - p) when it is flagged as disfluent, as SPIDEr-FL penalises a "
             "score (SPIDEr-FL: 0.9; 0: off)", PG, valid="[0, 1]")
    fluency_model: Optional[str] = option(
        None, "--fluency_penalty: the fluency error detector that flags captions (caption_train_fluency); "
              "without one, the rule checks flag them (an unfinished ending, a word repeated at once, a repeated "
              "3-gram)", DATA)
    rl_unit: str = option(
        "clip", "an epoch iterates clips, or (clip, caption) pairs like the seed 000 authors' code (each clip once "
                "per reference: 5x the updates on Clotho)", PG, UNITS)
    freeze_encoder: Union[bool, int] = freeze_encoder_option()


#: ``{old top-level key: ("rl_conf", its key there)}``: the objective options that were flat keys
#: before the ``rl_conf`` blocks; ``caption_rl_train`` refuses them with where they go now
#: (:meth:`captionlib.utils.cli.ArgumentParser.moved_message`), and a ``config.yaml`` of an
#: older run is read with them moved (:func:`captionlib.rl.objective_paper`).
MOVED_TO_RL_CONF = {
    **{k: ("rl_conf", k) for k in (
        "num_samples", "baseline", "baseline_encoding", "sample_logprobs", "entropy_weight", "alpha",
        "num_rollouts", "critic_warmup_steps", "value_encoder", "embedding_size", "embedding_margin", "critic_lr",
        "num_attributes", "attribute_selection", "attribute_input")},
    "ac_reward": ("rl_conf", "reward_type"),
    "sle_distance": ("rl_conf", "distance"),
    "sle_diversity_baseline": ("rl_conf", "diversity_baseline"),
}

#: The default options: what the objective classes take when a library caller leaves an option
#: out (their signatures refer to these fields, so each default is written once, above).
DEFAULTS = RLOptions()
