"""The options of RL fine-tuning (stage 6), each written once; see :mod:`captionlib.train.options`.

The objective-specific fields keep their flat YAML keys (``num_samples``, ``alpha``,
``sle_distance``, ...); each objective's ``from_options`` reads and validates the ones it
uses (:data:`captionlib.rl.RL_OBJECTIVES`). Imports no torch, so ``--help`` stays fast.
"""

from dataclasses import dataclass
from typing import Optional

from captionlib.data import UNITS
from captionlib.rl import (
    AC_REWARDS,
    AC_VALUE_ENCODERS,
    ATTRIBUTE_INPUTS,
    ATTRIBUTE_SELECTIONS,
    RL_OBJECTIVES,
    SAMPLE_LOGPROBS,
    SLE_DISTANCES,
    SLE_DIVERSITY_BASELINES,
)
from captionlib.train.options import DATA, OPTIM, TrainOptions, option

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
    init_param: Optional[str] = option(None, "XE model file to start from", DATA, required=True)
    cider_df: Optional[str] = option(None, "CIDEr-D document frequencies of the train refs (stage 4)", DATA,
                                     required=True)
    trust_pickle: bool = option(
        False, "read an old pickled --cider_df (cider_df.pkl; only numpy arrays and numbers allowed, nothing in it "
               "run): for files you made yourself (better: convert it once with caption_convert_model)", DATA)
    token_list: Optional[str] = option(None, "ignored if given: the token list comes from the model file", DATA)
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
    num_samples: int = option(1, "samples per clip (reinforce_plus, sle, multitask)", PG, valid=">= 1")
    baseline: str = option("greedy", "reinforce_plus, multitask", PG, ("greedy", "mean"))
    baseline_encoding: str = option(
        "shared", "greedy baseline: decode from the sampling pass's encoding (shared, the seed authors' code) or "
                  "re-encode in eval mode (separate)", PG, ("shared", "separate"))
    temperature: float = option(1.0, "sampling temperature", PG, valid="> 0")
    sample_logprobs: str = option(
        "loop", "scst, reinforce_plus, sle, ac, multitask: the samples' log-probabilities from the sampling loop "
                "(loop: a backward pass through every decoding step) or recomputed by one teacher-forced decoder "
                "pass over the samples drawn without gradients (recompute: one pass and one backward, as XE's; the "
                "same samples, but decoder dropout draws other masks for the gradient; on a GPU a greedy baseline is "
                "decoded in the samples' pass where the decoder's only training-mode behaviour is dropout)", PG,
        SAMPLE_LOGPROBS)
    entropy_weight: float = option(
        0.0, "scst, reinforce_plus: weight of the maximum-entropy regularization, SLL-ME (seed 001, table 2: 0.01; "
             "0: off)", PG, valid=">= 0")
    alpha: Optional[float] = option(None, "weight of the RL term (sle 0.75, multitask 0.95)", PG, valid="[0, 1]")
    num_rollouts: int = option(3, "mc_pg: Monte-Carlo rollouts per step", PG, valid=">= 1")
    critic_warmup_steps: int = option(100, "ac: steps training the critic only", PG, valid=">= 0")
    ac_reward: str = option(
        "metric", "ac: the --reward metrics (metric: A2C with a CIDEr-D reward by default) or seed 002's reward, the "
                  "cosine of clip and caption in a jointly trained embedding (embedding)", PG, AC_REWARDS)
    value_encoder: str = option(
        "shared", "ac: the critic reads the captioner's detached audio embedding (shared) or has its own audio "
                  "encoder (separate, seed 002)", PG, AC_VALUE_ENCODERS)
    embedding_size: int = option(256, "ac --ac_reward embedding: embedding space size", PG, valid=">= 1")
    embedding_margin: float = option(
        0.2, "ac --ac_reward embedding: margin of the bidirectional hinge ranking loss (seed 002 eq. 5)", PG,
        valid=">= 0")
    critic_lr: float = option(1e-3, "lr of the critic/baseline/attribute networks", PG, valid="> 0")
    sle_distance: str = option(
        "bleu34_sum", "sle: d(y, y') = 2 - BLEU-3 - BLEU-4 (bleu34_sum, seed 001 sec. 4.3) or 1 - (BLEU-3 + BLEU-4) "
                      "/ 2 (bleu34_mean: half the diversity weight)", PG, SLE_DISTANCES)
    sle_diversity_baseline: str = option(
        "leave_one_out", "sle: diversity baseline = mean distance between the other samples (leave_one_out, "
                         "unbiased) or of all pairs (all_pairs, seed 001 sec. 4.3: scales the diversity gradient by "
                         "(s-1)(s-2)/s^2, 0.48 at s=5)", PG, SLE_DIVERSITY_BASELINES)
    num_attributes: int = option(400, "multitask: attribute words", PG, valid=">= 1")
    attribute_selection: str = option(
        "pos", "multitask: attributes are the most frequent nouns, verbs and adjectives (pos, seed 004) or words "
               "outside a stop-word list (stopwords)", PG, ATTRIBUTE_SELECTIONS)
    attribute_input: str = option(
        "cnn", "multitask: the attribute head reads the time-pooled CNN features (cnn, seed 004) or the audio "
               "embedding (embedding)", PG, ATTRIBUTE_INPUTS)
    rl_unit: str = option(
        "clip", "an epoch iterates clips, or (clip, caption) pairs like the seed 000 authors' code (each clip once "
                "per reference: 5x the updates on Clotho)", PG, UNITS)
    freeze_encoder: bool = option(False, "keep the audio encoder fixed", PG)


#: The options that only some objectives read: each objective class names those it reads in its
#: ``options_read``, and ``train_rl`` warns about the others when they are set (they are ignored).
OBJECTIVE_OPTIONS = (
    "num_samples", "baseline", "baseline_encoding", "sample_logprobs", "entropy_weight", "alpha", "num_rollouts",
    "critic_warmup_steps", "ac_reward", "value_encoder", "embedding_size", "embedding_margin", "critic_lr",
    "sle_distance", "sle_diversity_baseline", "num_attributes", "attribute_selection", "attribute_input",
)

#: The default options: what the objective classes take when a library caller leaves an option
#: out (their signatures refer to these fields, so each default is written once, above).
DEFAULTS = RLOptions()
