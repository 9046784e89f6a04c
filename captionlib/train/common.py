"""Pieces shared by the XE and RL entry points: data loaders, validation, model setup."""

import hashlib
import json
import logging
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader, Dataset

from captionlib.data.datasets import AudioRefsDataset, pad_feats, pad_ids
from captionlib.decode.search import greedy_search
from captionlib.metrics.bleu import corpus_bleu
from captionlib.metrics.cider_d import corpus_cider_d
from captionlib.models.captioner import count_parameters, xe_targets
from captionlib.models.encoders import set_gradient_checkpointing
from captionlib.text.tokenizer import Tokenizer
from captionlib.train import SELECTION_MODES
from captionlib.train.options import BATCH_TYPES, TrainOptions
from captionlib.train.schedule import lr_factor, make_optimizer, param_groups
from captionlib.train.trainer import Trainer
from captionlib.utils.distributed import rank_and_world, shard_batches
from captionlib.utils.fileio import atomic_write_text, load_numeric_arrays, read_yaml_mapping
from captionlib.utils.memory import limit_heap_growth
from captionlib.utils.provenance import changes, keep_previous


def epoch_batches(
    num_items: int,
    batch_size: int,
    seed: int,
    epoch: int,
    num_iters_per_epoch: Optional[int] = None,
    lengths: Optional[Sequence[int]] = None,
    bucket_pool: Optional[int] = None,
) -> List[List[int]]:
    """Index batches of ``epoch`` (1-based): shuffled passes over ``num_items`` items.

    Without ``num_iters_per_epoch`` an epoch is one pass (the last batch may be short).
    With it, an epoch is exactly that many batches taken from an endless stream of passes,
    each pass reshuffled, continuing where the previous epoch stopped (ESPnet2's
    ``--num_iters_per_epoch``): fewer batches than a pass shortens epochs, more repeats the
    data within one, so a small corpus still gets the configured number of updates. The
    order depends only on (seed, epoch), so a resumed run sees the same batches.

    With ``lengths`` (e.g. frames per item) the batches of a pass are length-bucketed, the
    idea of ESPnet2's sorted batch bins with fresh bins every pass: the shuffled items are
    cut into pools of ``bucket_pool`` batches, each pool is sorted by length and cut into
    batches, and all batches of the pass are shuffled. Batch-mates then have similar
    lengths, so little padding is computed. ``bucket_pool=0`` sorts the whole pass at once
    (ESPnet2's ``batch_type: sorted``: the same batches every pass, in a new order).

    Raises:
        ValueError: no item, a batch size / iteration count below 1, ``lengths`` without a
            ``bucket_pool`` or not of ``num_items`` entries, or a negative ``bucket_pool``.
    """
    if num_items < 1:
        raise ValueError("the training set is empty")
    if batch_size < 1 or (num_iters_per_epoch is not None and num_iters_per_epoch < 1):
        raise ValueError(f"batch_size ({batch_size}) and num_iters_per_epoch ({num_iters_per_epoch}) must be >= 1")
    if lengths is not None and len(lengths) != num_items:
        raise ValueError(f"{len(lengths)} lengths for {num_items} items")
    if lengths is not None and (bucket_pool is None or bucket_pool < 0):
        raise ValueError(f"length-bucketed batches need a bucket_pool >= 0, got {bucket_pool}")

    def one_pass(index: int) -> List[List[int]]:
        g = torch.Generator()
        g.manual_seed(seed * 1000 + index)
        perm = torch.randperm(num_items, generator=g).tolist()
        if lengths is None:
            return [perm[i: i + batch_size] for i in range(0, num_items, batch_size)]
        pool = bucket_pool * batch_size or num_items
        batches = []
        for start in range(0, num_items, pool):
            items = sorted(perm[start: start + pool], key=lambda i: (lengths[i], i))
            batches += [items[i: i + batch_size] for i in range(0, len(items), batch_size)]
        return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]

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


def epoch_loader(dataset: Dataset, collate: Callable, opts: TrainOptions) -> Callable[[int], Iterable]:
    """A function ``epoch -> DataLoader`` over the batches of :func:`epoch_batches`.

    Reads ``batch_size``, ``seed``, ``num_workers``, ``num_iters_per_epoch``, ``bucket_pool``
    and ``batch_type`` of ``opts``: ``random`` or ``bucket`` (length-bucketed by the
    dataset's ``lengths()``, frames per item from ``utt2num_frames``). Under ``torchrun`` the
    batches are global and each rank loads its block of every one
    (:func:`captionlib.utils.distributed.shard_batches`).

    Raises:
        ValueError: unknown ``batch_type``.
    """
    if opts.batch_type not in BATCH_TYPES:
        raise ValueError(f"batch_type must be one of {BATCH_TYPES}, got {opts.batch_type!r}")
    lengths = dataset.lengths() if opts.batch_type == "bucket" else None

    def make(epoch: int) -> Iterable:
        batches = epoch_batches(len(dataset), opts.batch_size, opts.seed, epoch, opts.num_iters_per_epoch, lengths,
                                opts.bucket_pool)
        batches = shard_batches(batches, *rank_and_world())
        return DataLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=opts.num_workers)

    return make


def best_criteria(best_model_criterion: str, metrics: Sequence[str]) -> List[Tuple[str, str]]:
    """The trainer's ``best_criteria``: ``best_model_criterion`` first, then the other ``metrics``.

    Every metric gets a ``valid.<metric>.best.pth`` file; the first one also decides which
    ``keep_nbest`` epoch files are kept (ESPnet2's ``best_model_criterion``). Seed 000
    selects its XE models by validation BLEU-4 and its SCST models by CIDEr.

    Args:
        best_model_criterion: one of ``metrics`` (keys of :data:`SELECTION_MODES`).
        metrics: the validation metrics of this training (e.g. XE: cider_d, bleu_4, loss).

    Raises:
        ValueError: ``best_model_criterion`` not among ``metrics``.
    """
    if best_model_criterion not in metrics:
        raise ValueError(f"best_model_criterion must be one of {', '.join(metrics)}, got {best_model_criterion!r}")
    order = [best_model_criterion] + [m for m in metrics if m != best_model_criterion]
    return [(m, SELECTION_MODES[m]) for m in order]


def clip_validation(
    dataset: AudioRefsDataset,
    tokenizer: Tokenizer,
    device: torch.device,
    batch_size: int,
    max_len: int,
    captions: Optional[Mapping[str, Sequence[np.ndarray]]] = None,
) -> Callable[[Any], Dict[str, float]]:
    """Validation with one encoder pass per clip: corpus CIDEr-D (document frequencies of
    the valid references) and corpus BLEU-4 of greedy captions, and with ``captions`` the
    teacher-forced cross-entropy and token accuracy of every caption, from the same encodings.

    Clips are batched in order of length (little padding); in eval mode the result does not
    depend on the batching. Uses the cleaned references, like the reward; the
    paper-comparable scores come from ``caption_score`` (PTB tokenizer) at the scoring stage.

    Args:
        dataset: the validation clips and references.
        captions: ``{clip_id: [token ids (length,), ...]}`` (e.g. ``ClipCaptionsDataset.items``)
            for ``loss`` (nats per token, eos included) and ``acc``.

    Returns:
        ``validate(model) -> {"cider_d", "bleu_4", "vocab_size"[, "loss", "acc"]}``.
    """
    try:
        frames = dataset.lengths()
    except FileNotFoundError:  # a dump dir without utt2num_frames: keep the file order
        frames = [0] * len(dataset)
    order = sorted(range(len(dataset)), key=lambda i: frames[i])

    @torch.no_grad()
    def validate(model: Any) -> Dict[str, float]:
        hyps: Dict[str, List[str]] = {}
        nll, correct, ntok = 0.0, 0, 0
        for start in range(0, len(order), batch_size):
            clips = [dataset.clips[i] for i in order[start: start + batch_size]]
            feats, lens = pad_feats([dataset.feats[c] for c in clips])
            v = model.encode(feats.to(device), lens.to(device))
            for clip, ids in zip(clips, greedy_search(model, v, max_len).tolist()):
                hyps[clip] = tokenizer.ids2text(ids).split()
            if captions is None:
                continue
            ys, ys_lens = pad_ids([c for clip in clips for c in captions[clip]])
            caption2clip = torch.tensor([i for i, clip in enumerate(clips) for _ in captions[clip]], device=device)
            ys, ys_lens = ys.to(device), ys_lens.to(device)
            logits = model.decoder.forward_teacher(v[caption2clip], ys)
            targets = xe_targets(ys, ys_lens, model.eos_id)
            nll += float(torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), targets.flatten(), ignore_index=0, reduction="sum"))
            mask = targets != 0
            correct += int(((logits.argmax(-1) == targets) & mask).sum())
            ntok += int(mask.sum())
        score, _ = corpus_cider_d(dataset.refs, hyps)
        bleu, _ = corpus_bleu(dataset.refs, hyps)
        out = {"cider_d": score, "bleu_4": bleu[3], "vocab_size": float(len({w for h in hyps.values() for w in h}))}
        if captions is not None:
            out.update(loss=nll / max(ntok, 1), acc=correct / max(ntok, 1))
        return out

    return validate


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
            :class:`~captionlib.train.trainer.Trainer`; XE freezes the encoder with it).
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
        total = math.ceil(len(loader(1)) / opts.accum_grad) * opts.max_epoch
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(opts, total))
        logging.info("%s schedule over %d optimizer steps (warm-up %d)", opts.scheduler, total, opts.warmup_steps)
    info = dict(model_file_info)
    return Trainer(model, optimizer, objective, loader, validate, opts, info.pop("model_conf"), info.pop("token_list"),
                   best_criteria=criteria, device=device, extra_file_info=info, scheduler=scheduler,
                   inputs=inputs, epoch_start=epoch_start).run()
