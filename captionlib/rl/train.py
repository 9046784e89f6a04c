"""RL fine-tuning from an XE model file (stage 6): one loop, ``rl_algo`` picks the objective.

| rl_algo | objective | paper |
|---|---|---|
| ``scst`` | 1 sample, greedy baseline | Rennie et al. 2017; seed 000 |
| ``reinforce_plus`` | ``num_samples`` samples, greedy or leave-one-out mean baseline | seed 004 |
| ``sle`` | precision term + sequence-level exploration (diversity) term | seed 001 eq. 15-16 |
| ``ac`` | actor-critic, value network on prefixes trained by MSE | seed 002 |
| ``mc_pg`` | Monte-Carlo rollouts for Q(s_t, w_t), learned MLP baseline | seed 003 |
| ``multitask`` | REINFORCE+ plus attribute prediction (BCE) | seed 004 |
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
from captionlib.train.common import clip_validation, epoch_loader, log_model, write_config
from captionlib.train.trainer import Trainer, get_device, set_seed



def build_objective(
    rl_algo: str,
    model,
    reward: Reward,
    tokenizer: Tokenizer,
    train_set: AudioRefsDataset,
    num_samples: int,
    baseline: str,
    temperature: float,
    max_len: int,
    alpha: Optional[float] = None,
    num_rollouts: int = 3,
    critic_warmup_steps: int = 100,
    num_attributes: int = 400,
    baseline_encoding: str = "shared",
) -> nn.Module:
    """The objective module ``(model, batch) -> (loss, stats)`` of ``rl_algo``.

    Raises:
        ValueError: unknown ``rl_algo``.
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
            baseline_encoding=baseline_encoding, **kw,
        )
    if rl_algo == "ac":
        from captionlib.rl.actor_critic import ActorCritic

        return ActorCritic(
            reward, tokenizer, vocab_size=model.vocab_size, embed_size=model.encoder.output_size,
            warmup_steps=critic_warmup_steps, **kw,
        )
    if rl_algo == "mc_pg":
        from captionlib.rl.mc_pg import MonteCarloPG

        return MonteCarloPG(
            reward, tokenizer, hidden_size=model.decoder.rnn.hidden_size, num_rollouts=num_rollouts, **kw
        )
    if rl_algo == "multitask":
        from captionlib.rl.multitask import MultiTask

        return MultiTask(
            reward, tokenizer, train_set.refs, embed_size=model.encoder.output_size,
            num_attributes=num_attributes, alpha=0.95 if alpha is None else alpha,
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
    num_samples: int = 1,
    baseline: str = "greedy",
    baseline_encoding: str = "shared",
    temperature: float = 1.0,
    alpha: Optional[float] = None,
    num_rollouts: int = 3,
    critic_warmup_steps: int = 100,
    critic_lr: float = 1e-3,
    num_attributes: int = 400,
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
    log_interval: int = 50,
    max_len: int = 30,
    num_workers: int = 0,
    ngpu: int = 0,
    seed: int = 0,
    dry_run: bool = False,
    config: Optional[Dict[str, Any]] = None,
) -> None:
    """Fine-tune a captioner with a sequence-level reward.

    Args:
        rl_algo: one of :data:`RL_ALGOS` (see the module table).
        init_param: XE model file (self-describing, see ``load_model_file``).
        train_data_dir, valid_data_dir: dump directories; RL iterates clips (spk2utt).
        cider_df: train-set CIDEr-D document frequencies (stage 4).
        reward: reward spec, e.g. ``cider_d:1.0`` (see :mod:`captionlib.rl.rewards`).
        num_samples, baseline, temperature: sampling (reinforce_plus, sle, multitask).
        baseline_encoding: the greedy baseline decodes from the sampling pass's embedding
            (``shared``, the seed authors' code) or re-encodes in eval mode (``separate``).
        alpha: weight of the RL term (sle: 0.75, multitask: 0.95 when ``None``).
        num_rollouts: Monte-Carlo rollouts per step (mc_pg).
        critic_warmup_steps: steps training only the critic (ac).
        critic_lr: Adam learning rate of the objective's own networks (critic, baseline,
            attribute branch).
        num_attributes: attribute words predicted by the multitask branch.
        freeze_encoder: keep the audio encoder fixed.
        batch_size: clips per batch. lr: Adam learning rate (seed 000: 5e-5, 25 epochs).
        num_iters_per_epoch: batches per epoch (``None``: one pass over the clips); see
            :func:`captionlib.train.common.epoch_batches`.
        batch_type, bucket_pool: ``random`` or length-``bucket``-ed batches, see
            :func:`captionlib.train.common.epoch_batches`.

    Raises:
        ValueError: unknown ``rl_algo`` or bad options.
    """
    if rl_algo not in RL_ALGOS:
        raise ValueError(f"unknown rl_algo {rl_algo!r}; choose from {', '.join(RL_ALGOS)}")
    set_seed(seed)
    device = get_device(ngpu)
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
    train_set = AudioRefsDataset(train_data_dir)
    valid_set = AudioRefsDataset(valid_data_dir)
    rew = Reward(reward, train_set.refs, cider_df, spice_lib_dir, f"{output_dir}/spice_cache")
    objective = build_objective(
        rl_algo, model, rew, tokenizer, train_set, num_samples, baseline, temperature, max_len,
        alpha, num_rollouts, critic_warmup_steps, num_attributes, baseline_encoding,
    ).to(device)
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
        best_criteria=[("cider_d", "max")],
        keep_nbest=keep_nbest,
        grad_clip=grad_clip,
        log_interval=log_interval,
        device=device,
        extra_file_info={"bpe_proto": obj.get("bpe_proto"), "rl_algo": rl_algo, "init_param": init_param},
    ).run()
