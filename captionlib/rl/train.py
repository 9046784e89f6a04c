"""RL fine-tuning from an XE model file (stage 6): one loop, ``rl_algo`` picks the objective.

| rl_algo | objective | paper |
|---|---|---|
| ``scst`` | 1 sample, greedy baseline | Rennie et al. 2017; seed 000 |
| ``reinforce_plus`` | ``num_samples`` samples, greedy or leave-one-out mean baseline | seed 004 |
| ``sle`` | precision term + sequence-level exploration (diversity) term, leave-one-out diversity baseline | seed 001 eq. 15-16 |
| ``ac`` | actor-critic, value network on prefixes trained by MSE; reward: the ``reward`` spec (A2C with CIDEr-D) or ``ac_reward: embedding`` (the paper's) | seed 002 |
| ``mc_pg`` | Monte-Carlo rollouts for Q(s_t, w_t), learned MLP baseline (reward spider in the paper) | seed 003 |
| ``multitask`` | REINFORCE+ plus attribute prediction (BCE) on the time-pooled CNN features | seed 004 |
"""

import logging
from typing import Any, Dict, Optional

import torch
from torch import nn

from captionlib.data.datasets import AudioRefsDataset, collate_clips
from captionlib.models.captioner import load_model_file
from captionlib.rl import RL_ALGOS
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.common import best_criteria, clip_validation, epoch_loader, log_model, write_config
from captionlib.train.trainer import Trainer, set_seed
from captionlib.utils.distributed import init_distributed



def build_objective(
    rl_algo: str,
    model,
    reward: Reward,
    tokenizer: Tokenizer,
    train_set: AudioRefsDataset,
    max_len: int = 30,
    num_samples: int = 1,
    baseline: str = "greedy",
    temperature: float = 1.0,
    alpha: Optional[float] = None,
    num_rollouts: int = 3,
    critic_warmup_steps: int = 100,
    num_attributes: int = 400,
    baseline_encoding: str = "shared",
    sle_distance: str = "bleu34_sum",
    sle_diversity_baseline: str = "leave_one_out",
    attribute_selection: str = "pos",
    attribute_input: str = "cnn",
    ac_reward: str = "metric",
    value_encoder: str = "shared",
    embedding_size: int = 256,
    embedding_margin: float = 0.2,
) -> nn.Module:
    """The objective module ``(model, batch) -> (loss, stats)`` of ``rl_algo``.

    Args:
        rl_algo: one of :data:`RL_ALGOS` (see the module table).
        model: the captioner being fine-tuned; reward: the sequence reward; tokenizer:
            token ids -> words; train_set: the train clips (multitask attribute targets).
        max_len: max caption tokens when sampling (eos included).
        num_samples, baseline, temperature: sampling (reinforce_plus, sle, multitask, ac).
        baseline_encoding: the greedy baseline decodes from the sampling pass's embedding
            (``shared``, the seed authors' code) or re-encodes in eval mode (``separate``).
        alpha: weight of the RL term (sle: 0.75, multitask: 0.95 when ``None``).
        num_rollouts: Monte-Carlo rollouts per step (mc_pg).
        critic_warmup_steps: steps training only the critic (ac).
        num_attributes: attribute words predicted by the multitask branch.
        sle_distance, sle_diversity_baseline: the SLE diversity distance and baseline (see
            :class:`captionlib.rl.sle.SLE`).
        attribute_selection, attribute_input: the multitask attribute words (``pos``: nouns,
            verbs, adjectives; ``stopwords``) and the attribute head's input (``cnn``:
            time-pooled CNN features; ``embedding``), see :class:`captionlib.rl.multitask.MultiTask`.
        ac_reward, value_encoder, embedding_size, embedding_margin: actor-critic reward
            (``metric``: the ``reward`` spec, A2C with a CIDEr-D reward by default;
            ``embedding``: seed 002's cosine in a jointly trained audio-caption embedding of
            ``embedding_size`` with a ranking-loss margin) and the critic's audio encoder
            (``shared``: the captioner's detached embedding; ``separate``: its own), see
            :class:`captionlib.rl.actor_critic.ActorCritic`.

    Raises:
        ValueError: unknown ``rl_algo`` or bad options.
    """
    kw = {"max_len": max_len, "temperature": temperature}
    if rl_algo in ("scst", "reinforce_plus"):
        from captionlib.rl.policy_gradient import PolicyGradient

        if rl_algo == "scst" and (num_samples != 1 or baseline != "greedy"):
            logging.warning("scst uses 1 sample and the greedy baseline; ignoring num_samples/baseline")
            num_samples, baseline = 1, "greedy"
        return PolicyGradient(reward, tokenizer, num_samples, baseline, baseline_encoding=baseline_encoding, **kw)
    if rl_algo == "sle":
        from captionlib.rl.sle import SLE

        return SLE(
            reward, tokenizer, num_samples=num_samples, alpha=0.75 if alpha is None else alpha,
            baseline_encoding=baseline_encoding, distance=sle_distance,
            diversity_baseline=sle_diversity_baseline, **kw,
        )
    if rl_algo == "ac":
        from captionlib.rl.actor_critic import ActorCritic

        return ActorCritic(
            reward, tokenizer, vocab_size=model.vocab_size, embed_size=model.encoder.output_size,
            warmup_steps=critic_warmup_steps, num_samples=num_samples, reward_type=ac_reward,
            value_encoder=value_encoder, n_mels=model.feats_mean.numel(), embedding_size=embedding_size,
            embedding_margin=embedding_margin, **kw,
        )
    if rl_algo == "mc_pg":
        from captionlib.rl.mc_pg import MonteCarloPG

        return MonteCarloPG(
            reward, tokenizer, hidden_size=model.decoder.hidden_size, num_rollouts=num_rollouts, **kw
        )
    if rl_algo == "multitask":
        from captionlib.rl.multitask import MultiTask

        return MultiTask(
            reward, tokenizer, train_set.refs, embed_size=model.encoder.output_size,
            num_attributes=num_attributes, alpha=0.95 if alpha is None else alpha,
            attribute_selection=attribute_selection, attribute_input=attribute_input,
            cnn_size=model.encoder.cnn_output_size,
            num_samples=num_samples, baseline=baseline, baseline_encoding=baseline_encoding, **kw,
        )
    raise ValueError(f"unknown rl_algo {rl_algo!r}; choose from {', '.join(RL_ALGOS)}")


def train_rl(
    rl_algo: str,
    init_param: str,
    train_data_dir: str,
    valid_data_dir: str,
    cider_df: str,
    output_dir: str,
    reward: str = "cider_d:1.0",
    critic_lr: float = 1e-3,
    freeze_encoder: bool = False,
    spice_lib_dir: Optional[str] = None,
    batch_size: int = 32,
    max_epoch: int = 25,
    lr: float = 5e-5,
    weight_decay: float = 0.0,
    grad_clip: float = 0.0,
    num_iters_per_epoch: Optional[int] = None,
    batch_type: str = "random",
    bucket_pool: int = 32,
    keep_nbest: int = 5,
    best_model_criterion: str = "cider_d",
    rl_unit: str = "clip",
    log_interval: int = 50,
    max_len: int = 30,
    num_workers: int = 0,
    ngpu: int = 0,
    amp: str = "none",
    seed: int = 0,
    dry_run: bool = False,
    config: Optional[Dict[str, Any]] = None,
    **objective_options: Any,
) -> None:
    """Fine-tune a captioner with a sequence-level reward.

    Args:
        rl_algo: one of :data:`RL_ALGOS` (see the module table).
        init_param: XE model file (self-describing, see ``load_model_file``).
        train_data_dir, valid_data_dir: dump directories; RL iterates clips (spk2utt).
        cider_df: train-set CIDEr-D document frequencies (stage 4).
        reward: reward spec, e.g. ``cider_d:1.0`` (see :mod:`captionlib.rl.rewards`).
        critic_lr: Adam learning rate of the objective's own networks (critic, baseline,
            attribute branch, embedding).
        objective_options: the options of :func:`build_objective` (``num_samples``,
            ``baseline``, ``alpha``, ``sle_distance``, ``ac_reward``, ...).
        freeze_encoder: keep the audio encoder fixed.
        batch_size: clips per batch. lr: Adam learning rate (seed 000: 5e-5, 25 epochs).
        num_iters_per_epoch: batches per epoch (``None``: one pass over the clips); see
            :func:`captionlib.train.common.epoch_batches`.
        batch_type, bucket_pool: ``random`` or length-``bucket``-ed batches, see
            :func:`captionlib.train.common.epoch_batches`.
        best_model_criterion: ``cider_d`` or ``bleu_4`` of greedy validation captions
            (seed 000: CIDEr); both get a ``valid.<metric>.best.pth``.
        ngpu, amp: devices and mixed precision, as in :func:`captionlib.train.xe.train_xe`
            (``torchrun`` runs it data-parallel; SCST and REINFORCE+ then equal one process
            on the global batch, the other objectives train data-parallel without that
            guarantee, see :mod:`captionlib.utils.distributed`).
        rl_unit: what an epoch iterates: ``clip`` (each clip once; seeds 001-004) or
            ``caption`` ((clip, caption) pairs, each clip once per reference caption, as the
            seed 000 authors' code does: 5x the updates per epoch on Clotho). The reward
            scores against all references of the clip either way.

    Raises:
        ValueError: unknown ``rl_algo`` or bad options.
    """
    if rl_algo not in RL_ALGOS:
        raise ValueError(f"unknown rl_algo {rl_algo!r}; choose from {', '.join(RL_ALGOS)}")
    criteria = best_criteria(best_model_criterion, ("cider_d", "bleu_4"))
    set_seed(seed)
    device = init_distributed(ngpu)
    model, obj = load_model_file(init_param)
    model.to(device)
    tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
    logging.info("initialised from %s", init_param)
    if freeze_encoder:
        for p in model.encoder.parameters():
            p.requires_grad_(False)
        model.freeze_encoder = True  # also keeps its BatchNorm statistics and dropout fixed
        logging.info("the encoder is frozen")
    log_model(model)
    if config is not None:
        write_config(output_dir, config)
    if dry_run:
        return
    train_set = AudioRefsDataset(train_data_dir, unit=rl_unit)
    valid_set = AudioRefsDataset(valid_data_dir)
    rew = Reward(reward, train_set.refs, cider_df, spice_lib_dir, f"{output_dir}/spice_cache")
    objective = build_objective(rl_algo, model, rew, tokenizer, train_set, max_len, **objective_options).to(device)
    groups = [{"params": [p for p in model.parameters() if p.requires_grad], "lr": lr}]
    own = [p for p in objective.parameters() if p.requires_grad]
    if own:
        groups.append({"params": own, "lr": critic_lr})
        logging.info("%s has %d parameters of its own (lr %g)", rl_algo, sum(p.numel() for p in own), critic_lr)
    optimizer = torch.optim.Adam(groups, weight_decay=weight_decay)
    Trainer(
        model,
        optimizer,
        objective,
        epoch_loader(train_set, collate_clips, batch_size, seed, num_workers, num_iters_per_epoch,
                     batch_type, bucket_pool),
        clip_validation(valid_set, tokenizer, device, batch_size, max_len),
        output_dir,
        max_epoch,
        obj["model_conf"],
        obj["token_list"],
        best_criteria=criteria,
        keep_nbest=keep_nbest,
        grad_clip=grad_clip,
        log_interval=log_interval,
        device=device,
        extra_file_info={"bpe_proto": obj.get("bpe_proto"), "rl_algo": rl_algo, "init_param": init_param},
        amp=amp,
    ).run()
