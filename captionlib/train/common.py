"""Pieces shared by the XE and RL entry points: data loaders, validation, model setup."""

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from captionlib.data.datasets import AudioRefsDataset, collate_clips
from captionlib.text.tokenizer import Tokenizer


def epoch_batches(
    num_items: int, batch_size: int, seed: int, epoch: int, num_iters_per_epoch: Optional[int] = None
) -> List[List[int]]:
    """Index batches of ``epoch`` (1-based): shuffled passes over ``num_items`` items.

    Without ``num_iters_per_epoch`` an epoch is one pass (the last batch may be short).
    With it, an epoch is exactly that many batches taken from an endless stream of passes,
    each pass reshuffled, continuing where the previous epoch stopped (ESPnet2's
    ``--num_iters_per_epoch``): fewer batches than a pass shortens epochs, more repeats the
    data within one, so a small corpus still gets the configured number of updates. The
    order depends only on (seed, epoch), so a resumed run sees the same batches.

    Raises:
        ValueError: no item, or a batch size / iteration count below 1.
    """
    if num_items < 1:
        raise ValueError("the training set is empty")
    if batch_size < 1 or (num_iters_per_epoch is not None and num_iters_per_epoch < 1):
        raise ValueError(f"batch_size ({batch_size}) and num_iters_per_epoch ({num_iters_per_epoch}) must be >= 1")

    def one_pass(index: int) -> List[List[int]]:
        g = torch.Generator()
        g.manual_seed(seed * 1000 + index)
        perm = torch.randperm(num_items, generator=g).tolist()
        return [perm[i: i + batch_size] for i in range(0, num_items, batch_size)]

    if num_iters_per_epoch is None:
        return one_pass(epoch)
    per_pass = -(-num_items // batch_size)
    first = (epoch - 1) * num_iters_per_epoch
    batches: List[List[int]] = []
    for i in range(first, first + num_iters_per_epoch):
        if not batches or i % per_pass == 0:
            current = one_pass(1 + i // per_pass)
        batches.append(current[i % per_pass])
    return batches


def epoch_loader(
    dataset: Dataset,
    collate: Callable,
    batch_size: int,
    seed: int,
    num_workers: int = 0,
    num_iters_per_epoch: Optional[int] = None,
) -> Callable[[int], Iterable]:
    """A function ``epoch -> DataLoader`` over the batches of :func:`epoch_batches`."""

    def make(epoch: int) -> Iterable:
        batches = epoch_batches(len(dataset), batch_size, seed, epoch, num_iters_per_epoch)
        return DataLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=num_workers)

    return make


@torch.no_grad()
def decode_dataset(
    model: Any,
    dataset: AudioRefsDataset,
    tokenizer: Tokenizer,
    device: torch.device,
    batch_size: int = 32,
    max_len: int = 30,
) -> Dict[str, str]:
    """Greedy captions of every clip of ``dataset``: ``{clip_id: caption}``."""
    from captionlib.decode.inference import caption_batch

    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_clips)
    hyps: Dict[str, str] = {}
    for clips, feats, lens in loader:
        _, caps = caption_batch(model, tokenizer, feats.to(device), lens.to(device), max_len=max_len)
        hyps.update(zip(clips, caps))
    return hyps


def cider_d_validation(
    dataset: AudioRefsDataset, tokenizer: Tokenizer, device: torch.device, batch_size: int, max_len: int
) -> Callable[[Any], Dict[str, float]]:
    """Validation by corpus CIDEr-D of greedy captions (document frequencies of the valid refs).

    Uses the cleaned references, like the reward; the paper-comparable scores come from
    ``caption_score`` (PTB tokenizer) at the scoring stage.
    """
    from captionlib.metrics.cider_d import corpus_cider_d

    def validate(model: Any) -> Dict[str, float]:
        hyps = decode_dataset(model, dataset, tokenizer, device, batch_size, max_len)
        score, _ = corpus_cider_d(dataset.refs, {c: h.split() for c, h in hyps.items()})
        vocab = {w for h in hyps.values() for w in h.split()}
        return {"cider_d": score, "vocab_size": float(len(vocab))}

    return validate


def load_feats_stats(path: str) -> Dict[str, np.ndarray]:
    """Read ``feats_stats.npz`` (keys mean, std of shape (n_mels,)).

    Raises:
        ValueError: keys missing.
    """
    stats = np.load(path)
    for k in ("mean", "std"):
        if k not in stats:
            raise ValueError(f"{path}: no {k!r} array (written by caption_compute_stats?)")
    return {"mean": stats["mean"], "std": stats["std"]}


def feats_dim(data_dir: str) -> int:
    """Feature dimension from ``<data_dir>/feats_dim``.

    Raises:
        FileNotFoundError: no feats_dim file.
    """
    path = Path(data_dir) / "feats_dim"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (written by the feature dump stage)")
    return int(path.read_text().split()[0])


def log_model(model: torch.nn.Module) -> None:
    """Log the model and its parameter counts (seed 000: encoder ~679k, whole ~5M)."""
    from captionlib.models.captioner import count_parameters

    logging.info("model:\n%s", model)
    logging.info(
        "parameters: encoder %d, decoder %d, total %d",
        count_parameters(model.encoder), count_parameters(model.decoder), count_parameters(model),
    )


def write_config(output_dir: str, config: Dict[str, Any]) -> None:
    """Write the resolved options to ``<output_dir>/config.yaml``."""
    import yaml

    from captionlib.train.checkpoint import atomic_write_text

    atomic_write_text(Path(output_dir) / "config.yaml", yaml.safe_dump(config, sort_keys=False))

