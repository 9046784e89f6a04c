"""Epoch batches of the XE and RL trainers: shuffled or length-bucketed, one pass or ESPnet2's
``num_iters_per_epoch``, sharded over data-parallel ranks."""

from typing import Callable, Iterable, List, Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from captionlib.train.options import BATCH_TYPES, TrainOptions
from captionlib.utils.distributed import rank_and_world, shard_batches


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
