"""Pieces shared by the XE and RL entry points: data loaders, validation, model setup."""

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Iterable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from captionlib.data.datasets import AudioRefsDataset, collate_clips
from captionlib.text.tokenizer import Tokenizer


def epoch_loader(
    dataset: Dataset, collate: Callable, batch_size: int, seed: int, num_workers: int = 0
) -> Callable[[int], Iterable]:
    """A function ``epoch -> DataLoader`` shuffling with a per-epoch seed (resumable order)."""

    def make(epoch: int) -> Iterable:
        g = torch.Generator()
        g.manual_seed(seed * 1000 + epoch)
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            collate_fn=collate,
            num_workers=num_workers,
            generator=g,
            drop_last=False,
        )

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

