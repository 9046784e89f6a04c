"""The training loop shared by XE, RL and tagging (:func:`fit`) and what a run writes beside it:
the resolved ``config.yaml``, the fingerprints of its inputs, the model summary, feature statistics."""

import hashlib
import json
import logging
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import yaml
from torch.utils.data import Dataset

from captionlib.models.captioner import count_parameters
from captionlib.models.encoders import set_gradient_checkpointing
from captionlib.train.batching import epoch_loader
from captionlib.train.options import TrainOptions
from captionlib.train.schedule import lr_factor, make_optimizer, param_groups
from captionlib.train.trainer import Trainer
from captionlib.utils.distributed import rank_and_world
from captionlib.utils.fileio import atomic_write_text, load_numeric_arrays, read_yaml_mapping
from captionlib.utils.memory import limit_heap_growth
from captionlib.utils.provenance import changes, keep_previous


def load_feats_stats(path: str) -> Dict[str, np.ndarray]:
    """Read ``feats_stats.npz`` (keys mean, std of shape (n_mels,)), with
    :func:`~captionlib.utils.fileio.load_numeric_arrays` (no pickle is ever loaded).

    Raises:
        FileNotFoundError: no such file (naming stage 4, which writes it).
        ValueError: naming the file and ``--feats_stats``: not an ``.npz`` of numeric arrays
            (an object array is refused: loading it would unpickle), or keys missing.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: feature statistics not found (recipe stage 4 writes them: "
                                "caption_compute_stats)")
    fix = "recompute it with caption_compute_stats (recipe stage 4)"
    stats = load_numeric_arrays(path, "--feats_stats (feature statistics)", fix)
    if not isinstance(stats, dict):
        raise ValueError(f"{path}: --feats_stats must be an .npz archive of arrays mean and std, got a single "
                         f".npy array: {fix}")
    for k in ("mean", "std"):
        if k not in stats:
            raise ValueError(f"{path}: no {k!r} array (written by caption_compute_stats?)")
    return {"mean": stats["mean"], "std": stats["std"]}


def log_model(model: torch.nn.Module) -> None:
    """Log the model and its parameter counts (seed 000: encoder ~679k, whole ~5M)."""
    logging.info("model:\n%s", model)
    logging.info(
        "parameters: encoder %d, decoder %d, total %d",
        count_parameters(model.encoder), count_parameters(model.decoder), count_parameters(model),
    )


#: options that change how a run runs, not what it trains (write_config does not count them as changes)


RUNTIME_OPTIONS = ("dry_run", "check_only", "num_workers", "ngpu", "gradient_checkpointing")


def write_config(opts: TrainOptions) -> None:
    """Write the resolved options to ``<output_dir>/config.yaml`` (rank 0 alone under torchrun);
    the file is a valid ``--config`` of the same binary.

    A run that resumes (``latest.pth`` is there) with other options than the ``config.yaml`` it
    left keeps that file as ``config.yaml.N`` (N = 1, 2, ...) and logs a warning naming each
    changed option: the optimizer and scheduler states saved in ``latest.pth`` keep, e.g., the
    old learning rate, so the new ``config.yaml`` alone would misdescribe the model.
    """
    if rank_and_world()[0] > 0:
        return
    out = Path(opts.output_dir)
    new = asdict(opts)
    path = out / "config.yaml"
    if (out / "latest.pth").is_file() and path.is_file():
        old = read_yaml_mapping(path, "the options the run started with") or {}
        # an option added since the file was written counts as unchanged at its default
        changed = changes(old, new, defaults=asdict(type(opts)()), ignore=RUNTIME_OPTIONS)
        if changed:
            kept = keep_previous(path)
            logging.warning(
                "%s resumes with other options than it started with (kept as %s): %s. The optimizer and "
                "scheduler states of latest.pth keep their own values (e.g. the learning rate); remove %s to train "
                "afresh with the new options", out, kept.name, "; ".join(changed), out)
    atomic_write_text(path, yaml.safe_dump(new, sort_keys=False))


def fingerprint(source: Any) -> str:
    """A short SHA-256 of what a run is trained from (for :class:`Trainer`'s ``inputs``): of
    a file's bytes when ``source`` is a path to one (``"missing"`` when it does not exist),
    else of the JSON of ``source`` (a config mapping)."""
    h = hashlib.sha256()
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            return "missing"
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    else:
        h.update(json.dumps(source, sort_keys=True, default=str).encode("utf-8"))
    return h.hexdigest()[:16]


def run_inputs(train_data_dir: str, model_conf: Dict[str, Any], **files: Optional[str]) -> Dict[str, str]:
    """The fingerprints of a training run's inputs: the training text and features of
    ``train_data_dir``, the model config, and each of ``files`` that is given (token list,
    feature statistics, the model file it starts from, ...)."""
    inputs = {"train_text": fingerprint(Path(train_data_dir) / "text"),
              "train_feats": fingerprint(Path(train_data_dir) / "feats.scp"),
              "model_conf": fingerprint(model_conf)}
    inputs.update({name: fingerprint(path) for name, path in files.items() if path})
    return inputs


def fit(
    opts: TrainOptions,
    model: torch.nn.Module,
    objective: Any,
    train_set: Dataset,
    collate: Callable,
    validate: Callable[[Any], Dict[str, float]],
    criteria: Sequence[Tuple[str, str]],
    device: torch.device,
    model_file_info: Dict[str, Any],
    extra_params: Sequence[torch.nn.Parameter] = (),
    extra_lr: Optional[float] = None,
    inputs: Optional[Dict[str, str]] = None,
    epoch_start: Optional[Callable[[int], None]] = None,
    encoder_lr_factor: float = 1.0,
) -> List[Dict[str, float]]:
    """The end of every training entry point: a fixed glibc mmap threshold
    (:func:`~captionlib.utils.memory.limit_heap_growth`), the model's ``decode_compile``
    (``opts.decode_compile``, read by :func:`~captionlib.decode.search.sample`), the encoder's
    ``opts.gradient_checkpointing``
    (:func:`~captionlib.models.encoders.set_gradient_checkpointing`), the
    optimizer (``opts.optim``) over the model's trainable parameters and ``extra_params``,
    its learning-rate schedule (``opts.scheduler``, over ``max_epoch`` epochs of optimizer
    steps), the epoch loader of ``train_set`` and the
    :class:`~captionlib.train.trainer.Trainer` loop. The optimizer holds the parameters
    trainable when it is built, so a module that ``epoch_start`` freezes for the first
    epochs is in it from the start (Adam and AdamW skip parameters without a gradient, and
    start their moments when the module is unfrozen).

    Args:
        opts: the training options (batching, optimisation, output dir, epochs).
        model, objective: the captioner and ``objective(model, batch) -> (loss, stats)``.
        train_set, collate: the training items and their collate function.
        validate: ``validate(model) -> {metric: value}`` (see :func:`clip_validation`).
        criteria: the validation metrics that select models (:func:`best_criteria`).
        model_file_info: ``model_conf`` and ``token_list`` of the model files, and any more
            keys they carry (``bpe_proto``, ``rl_algo``, ...).
        extra_params, extra_lr: an RL objective's own parameters (critic, baseline, ...)
            and their learning rate.
        inputs: the fingerprints of what the run is trained from (:func:`run_inputs`);
            resuming with other inputs is refused.
        epoch_start: called with each epoch number before it is trained (see
            :class:`~captionlib.train.trainer.Trainer`; ``freeze_encoder: N`` freezes the encoder with it).
        encoder_lr_factor: the learning rate of ``model.encoder``'s parameters over ``opts.lr``
            (see :func:`~captionlib.train.schedule.param_groups`).

    Returns:
        The per-epoch history (see :meth:`Trainer.run`).

    Raises:
        ValueError: bad optimizer or schedule options (see :mod:`captionlib.train.schedule`);
            ``gradient_checkpointing`` with an encoder that has no such layers.
    """
    # the activations of batches of varying length fragment glibc's heap (the seed XE stage
    # reached 7.7 GiB of RSS in a Clotho epoch): see captionlib.utils.memory
    limit_heap_growth()
    model.decode_compile = opts.decode_compile  # read by captionlib.decode.search.sample
    set_gradient_checkpointing(model.encoder, opts.gradient_checkpointing)
    optimizer = make_optimizer(opts, param_groups(opts, model, list(extra_params), extra_lr, encoder_lr_factor))
    loader = epoch_loader(train_set, collate, opts)
    scheduler = None
    if opts.scheduler != "none":
        updates = getattr(objective, "updates_per_batch", 1)  # PPO: several optimizer steps per batch
        total = math.ceil(len(loader(1)) / opts.accum_grad) * opts.max_epoch * updates
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(opts, total))
        logging.info("%s schedule over %d optimizer steps (warm-up %d)", opts.scheduler, total, opts.warmup_steps)
    info = dict(model_file_info)
    return Trainer(model, optimizer, objective, loader, validate, opts, info.pop("model_conf"), info.pop("token_list"),
                   best_criteria=criteria, device=device, extra_file_info=info, scheduler=scheduler,
                   inputs=inputs, epoch_start=epoch_start).run()
