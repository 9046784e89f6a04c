"""RL fine-tuning from an XE model file (stage 6): one loop, ``rl_algo`` picks the objective."""

import logging
from typing import Any, Dict, Optional

import torch

from captionlib.data.datasets import AudioRefsDataset, collate_clips
from captionlib.models.captioner import load_model_file
from captionlib.rl.policy_gradient import PolicyGradient
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.common import cider_d_validation, epoch_loader, log_model, write_config
from captionlib.train.trainer import Trainer, get_device, set_seed

RL_ALGOS = ("scst", "reinforce_plus")


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
    temperature: float = 1.0,
    batch_size: int = 32,
    max_epoch: int = 25,
    lr: float = 5e-5,
    weight_decay: float = 0.0,
    grad_clip: float = 0.0,
    num_iters_per_epoch: Optional[int] = None,
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
        rl_algo: ``scst`` (seed 000: one sample, greedy baseline; ``num_samples`` and
            ``baseline`` are forced to 1/greedy) or ``reinforce_plus`` (seed 004:
            ``num_samples`` samples, ``baseline`` greedy or mean of the other samples).
        init_param: XE model file (self-describing, see ``load_model_file``).
        train_data_dir, valid_data_dir: dump directories; RL iterates clips (spk2utt).
        cider_df: train-set CIDEr-D document frequencies (stage 4).
        reward: reward spec, e.g. ``cider_d:1.0``.
        batch_size: clips per batch. lr: Adam learning rate (seed 000: 5e-5, 25 epochs).

    Raises:
        ValueError: unknown ``rl_algo``.
    """
    if rl_algo not in RL_ALGOS:
        raise ValueError(f"unknown rl_algo {rl_algo!r}; choose from {', '.join(RL_ALGOS)}")
    if rl_algo == "scst" and (num_samples != 1 or baseline != "greedy"):
        logging.warning("scst uses 1 sample and the greedy baseline; ignoring num_samples/baseline")
        num_samples, baseline = 1, "greedy"
    set_seed(seed)
    device = get_device(ngpu)
    model, obj = load_model_file(init_param)
    model.to(device)
    tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
    logging.info("initialised from %s", init_param)
    log_model(model)
    if config is not None:
        write_config(output_dir, config)
    if dry_run:
        return
    train_set = AudioRefsDataset(train_data_dir)
    valid_set = AudioRefsDataset(valid_data_dir)
    objective = PolicyGradient(
        Reward(reward, train_set.refs, cider_df), tokenizer, num_samples, baseline, max_len, temperature
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    Trainer(
        model,
        optimizer,
        objective,
        epoch_loader(train_set, collate_clips, batch_size, seed, num_workers),
        cider_d_validation(valid_set, tokenizer, device, batch_size, max_len),
        output_dir,
        max_epoch,
        obj["model_conf"],
        obj["token_list"],
        best_criteria=[("cider_d", "max")],
        keep_nbest=keep_nbest,
        num_iters_per_epoch=num_iters_per_epoch,
        grad_clip=grad_clip,
        log_interval=log_interval,
        device=device,
        extra_file_info={"bpe_proto": obj.get("bpe_proto"), "rl_algo": rl_algo, "init_param": init_param},
    ).run()
