"""RL fine-tuning from an XE model file (stage 6): one loop, ``rl_algo`` picks the objective.

| rl_algo | objective | paper |
|---|---|---|
| ``scst`` | 1 sample, greedy baseline | Rennie et al. 2017; seed 000 |
| ``reinforce_plus`` | ``rl_conf`` ``num_samples`` samples, greedy or leave-one-out mean baseline | seed 004 |
| ``sle`` | precision term + sequence-level exploration (diversity) term, leave-one-out diversity baseline | seed 001 eq. 15-16 |
| ``ac`` | actor-critic, value network on prefixes trained by MSE; reward: the ``reward`` spec (A2C with CIDEr-D) or ``rl_conf: {reward_type: embedding}`` (the paper's) | seed 002 |
| ``mc_pg`` | Monte-Carlo rollouts for Q(s_t, w_t), learned MLP baseline (reward spider in the paper) | seed 003 |
| ``multitask`` | REINFORCE+ plus attribute prediction (BCE) on the time-pooled CNN features | seed 004 |
| ``ppo`` | clipped surrogate, ``ppo_epochs`` steps per batch of samples, k3 KL to the frozen XE model | Schulman et al. 2017 |
| ``grpo`` | ``num_samples`` per clip, group-normalised advantages, k3 KL to the frozen XE model | Shao et al. 2024 |
| ``dpo`` | online DPO: best vs worst of the samples, against the frozen XE model | Rafailov et al. 2023 |
"""  # noqa: E501 -- rows of a Markdown table cannot be wrapped

import dataclasses
import logging
import math

from captionlib.data.datasets import AudioRefsDataset, collate_clips
from captionlib.decode.search import CUDA_GRAPH_MODES
from captionlib.models.captioner import load_model_file
from captionlib.rl import check_rl_options
from captionlib.rl.options import RLOptions
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.fit import fingerprint, fit, log_model, run_inputs, write_config
from captionlib.train.trainer import set_seed
from captionlib.train.validation import best_criteria, clip_validation
from captionlib.train.xe import EncoderTraining, encoder_freezer, frozen_epochs
from captionlib.utils.distributed import init_distributed


def warn_cuda_graphs_with_loop_gradients(opts: RLOptions, conf) -> None:
    """Warn when ``decode_compile`` replays CUDA graphs while the samples carry gradients through
    every step of the sampling loop (``rl_conf`` ``sample_logprobs: loop``, or an objective whose
    ``rl_conf`` has no ``sample_logprobs``): CUDA graph trees (``reduce-overhead``, ``max-autotune``)
    then take their slow path, and on an H100 SCST and REINFORCE+ updates were 9-11x slower than
    with eager sampling (bench/README.md, "Speed"); ``cuda-graph`` draws such samples eagerly."""
    if getattr(conf, "sample_logprobs", "loop") != "loop":
        return
    if opts.decode_compile in CUDA_GRAPH_MODES:
        logging.warning("decode_compile %s with gradients through the sampling loop (rl_algo %s, sample_logprobs "
                        "loop): CUDA graph trees take their slow path, 9-11x slower than eager sampling on an H100; "
                        "use --rl_conf sample_logprobs=recompute (where rl_algo has it) or --decode_compile none",
                        opts.decode_compile, opts.rl_algo)
    elif opts.decode_compile == "cuda-graph":
        logging.warning("decode_compile cuda-graph replays the passes without gradients only: the samples of rl_algo "
                        "%s (sample_logprobs loop) are drawn eagerly; use --rl_conf sample_logprobs=recompute (where "
                        "rl_algo has it)", opts.rl_algo)


def train_rl(opts: RLOptions) -> None:
    """Fine-tune a captioner with a sequence-level reward.

    Args:
        opts: the options (:class:`captionlib.rl.options.RLOptions`), among them:
            ``rl_algo``, a key of :data:`captionlib.rl.RL_OBJECTIVES` (see the module table), and
            ``rl_conf``, its options (the keys of its class's ``Conf``, checked by
            :func:`captionlib.rl.check_rl_options`; ``config.yaml`` gets them all); ``init_param``, the
            XE model file (self-describing, see ``load_model_file``); ``train_data_dir``,
            ``valid_data_dir`` (dump directories; RL iterates clips, spk2utt); ``cider_df``, the
            train-set CIDEr-D document frequencies (stage 4); ``reward``, e.g. ``cider_d:1.0`` (see
            :mod:`captionlib.rl.rewards`); the objective's own networks (critic, baseline, attribute
            branch, embedding) train at its ``rl_conf`` ``critic_lr`` (``lr`` without one);
            ``freeze_encoder`` keeps the encoder fixed, for good or the first N epochs, as in XE;
            ``batch_size`` clips per batch and ``lr`` (seed 000: 5e-5, 25 epochs);
            ``best_model_criterion``: ``cider_d`` or ``bleu_4`` of greedy validation captions (seed 000:
            CIDEr), both get a ``valid.<metric>.best.pth``; ``ngpu``, ``amp`` as in
            :func:`captionlib.train.xe.train_xe` (``torchrun`` runs it data-parallel; SCST and
            REINFORCE+ then equal one process on the global batch, the other objectives train
            data-parallel without that guarantee, see :mod:`captionlib.utils.distributed`); ``rl_unit``:
            what an epoch iterates, ``clip`` (each clip once; seeds 001-004) or ``caption`` ((clip,
            caption) pairs, each clip once per reference caption, as the seed 000 authors' code does: 5x
            the updates per epoch on Clotho); the reward scores against all references of the clip
            either way; ``check_only`` checks the options and returns, loading nothing.

    Raises:
        ValueError: an option outside its choices or range, or a combination the objective
            cannot train with (:func:`captionlib.rl.check_rl_options`; one line naming it).
    """
    cls, conf = check_rl_options(opts)
    if opts.check_only:
        return
    opts = dataclasses.replace(opts, rl_conf=dataclasses.asdict(conf))  # config.yaml holds every key of the block
    warn_cuda_graphs_with_loop_gradients(opts, conf)
    criteria = best_criteria(opts.best_model_criterion, ("cider_d", "bleu_4"))
    set_seed(opts.seed)
    device = init_distributed(opts.ngpu)
    model, obj = load_model_file(opts.init_param)
    model.to(device)
    tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
    logging.info("initialised from %s", opts.init_param)
    frozen = frozen_epochs(opts.freeze_encoder)
    if frozen == math.inf:  # for good: before the optimizer is made, as always
        model.set_encoder_frozen(True)  # also keeps its BatchNorm statistics and dropout fixed
        logging.info("the encoder is frozen")
    log_model(model)
    write_config(opts)
    if opts.dry_run:
        return
    train_set = AudioRefsDataset(opts.train_data_dir, unit=opts.rl_unit)
    valid_set = AudioRefsDataset(opts.valid_data_dir)
    reward = Reward(opts.reward, train_set.refs, opts.cider_df, opts.spice_lib_dir, f"{opts.output_dir}/spice_cache",
                    trust_pickle=opts.trust_pickle, fluency_penalty=opts.fluency_penalty,
                    fluency_model=opts.fluency_model)
    objective = cls.from_options(opts, conf, model, reward, tokenizer, train_set).to(device)
    own = [p for p in objective.parameters() if p.requires_grad]
    own_lr = getattr(conf, "critic_lr", opts.lr)
    if own:
        logging.info("%s has %d parameters of its own (lr %g)", opts.rl_algo, sum(p.numel() for p in own), own_lr)
    validate = clip_validation(valid_set, tokenizer, device, opts.batch_size, opts.max_len)
    info = {"model_conf": obj["model_conf"], "token_list": obj["token_list"], "bpe_proto": obj.get("bpe_proto"),
            "rl_algo": opts.rl_algo, "init_param": opts.init_param}
    inputs = run_inputs(opts.train_data_dir, obj["model_conf"], init_param=opts.init_param, cider_df=opts.cider_df)
    epoch_start = None
    if 0 < frozen < math.inf:  # the first N epochs: a resumed run must keep N
        inputs["encoder_training"] = fingerprint([frozen])
        epoch_start = encoder_freezer(model, EncoderTraining(frozen_epochs=frozen))
    fit(opts, model, objective, train_set, collate_clips, validate, criteria, device, info, own, own_lr, inputs,
        epoch_start=epoch_start)
