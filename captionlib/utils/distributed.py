"""Data-parallel training over ``torchrun`` ranks, equal to one process on the global batch.

``torchrun --nproc_per_node N -m captionbin.caption_train ...`` starts N ranks
(``torch.distributed``: gloo on CPU, NCCL on GPUs). Each rank trains on its block of every
global batch, and four rules make N ranks compute what one process computes on the whole
batch, up to float summation order:

1. **Blocks and padding.** Rank r gets a contiguous block of each global batch
   (:func:`shard_batches`), padded to the global batch's longest item
   (:func:`pad_to_global`), so its tensors are rows of the one-process tensors.
2. **BatchNorm** statistics are summed over the ranks (:class:`BatchNorm2d`;
   ``torch.nn.SyncBatchNorm`` refuses CPU tensors in torch 2.13).
3. **Loss and gradients.** Each rank scales its loss by its share of the global count the
   loss averages over (tokens for XE, clips for RL) and the gradients are summed
   (:func:`all_reduce_gradients`): the sum is the gradient of the global-batch loss.
4. **Randomness.** Inside :func:`row_sharded_randomness`, row-wise random draws (dropout
   masks, SpecAugment bands, sampled tokens) are drawn for the global batch from the
   shared generator, and each rank keeps its rows (:func:`rows_rand`, :class:`Dropout`).
   All ranks start from the same seed and draw the same global tensors, so their
   generators stay in step. Loops that draw until every row is done stop together
   (:func:`all_ranks`). Objectives whose number of draws depends on their data (Monte-Carlo
   rollouts, actor-critic reference picks) draw from a stream of their rank's own instead
   (:func:`rank_random_stream`): they train data-parallel, but not equal to one process.

Exceptions to the equality: a reward whose statistics come from the batch (``cider_d_batch``:
each rank's IDF is its block's); statistics that are not means over the loss's units (the
per-token ``entropy`` of RL objectives is weighted by clips); dropout on GPUs (see
:class:`Dropout`); and a global batch with fewer items than ranks, merged into its neighbour.

Outside a ``torchrun`` launch (``WORLD_SIZE`` unset or 1) every function here is the plain
one-process operation, so single-process results are unchanged.

Reference for the launch protocol: PyTorch's ``torchrun`` (torch.distributed.run)
environment variables ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``.
"""

import atexit
import contextlib
import datetime
import faulthandler
import logging
import os
import sys
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

#: How long a rank waits in a collective (e.g. while rank 0 validates) before failing.
TIMEOUT = datetime.timedelta(hours=2)

# "active": row-sharded randomness (several ranks); "eval_rows": rows that :class:`Dropout` leaves
# as in eval mode (:func:`eval_rows`)
_ROWS: Dict[str, Any] = {"active": False, "eval_rows": 0}


def launched_world_size() -> int:
    """Ranks of this ``torchrun`` launch (``WORLD_SIZE``; 1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank_and_world() -> Tuple[int, int]:
    """(rank, world size) of the initialised process group, (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_distributed() -> bool:
    """True when a process group of more than one rank is initialised."""
    return rank_and_world()[1] > 1


def get_device(ngpu: int) -> torch.device:
    """``cuda`` when ``ngpu > 0`` (error if none is visible), else ``cpu``.

    Raises:
        RuntimeError: ngpu > 0 without a visible CUDA device.
    """
    if ngpu > 0:
        if not torch.cuda.is_available():
            raise RuntimeError(f"--ngpu {ngpu} but no CUDA device is visible")
        return torch.device("cuda")
    return torch.device("cpu")


def init_distributed(ngpu: int) -> torch.device:
    """Join the ``torchrun`` process group when launched with ``WORLD_SIZE`` > 1.

    Args:
        ngpu: 0: CPU ranks (gloo backend); > 0: one GPU per rank (NCCL), ``cuda:LOCAL_RANK``.

    Returns:
        The device of this rank (``cpu``, ``cuda`` or ``cuda:LOCAL_RANK``).

    Raises:
        RuntimeError: ``ngpu`` > 0 without a visible CUDA device, or fewer visible GPUs
            than ranks on this node.
    """
    world = launched_world_size()
    device = get_device(ngpu)
    if world <= 1:
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if ngpu > 0:
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} CUDA devices are visible")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # a rank that dies of a signal (SIGABRT, SIGSEGV) prints every thread's Python stack
        faulthandler.enable(all_threads=True)
        dist.init_process_group("nccl" if ngpu > 0 else "gloo", timeout=TIMEOUT)
    logging.info("rank %d of %d (local rank %d) on %s", dist.get_rank(), world, local_rank, device)
    return device


def shard_batches(batches: Sequence[List[int]], rank: int, world_size: int) -> List[List[int]]:
    """This rank's contiguous block of every global batch.

    Blocks differ in size by at most one item, the larger ones first. A global batch with
    fewer items than ranks would leave a rank idle (and its collectives unmatched), so it
    joins the batch before it (the first batch: the one after it).

    Args:
        batches: global batches of item indices (e.g. :func:`captionlib.train.batching.epoch_batches`).

    Returns:
        One index list per global batch (after merging), never empty.

    Raises:
        ValueError: fewer items in all batches together than ranks.
    """
    if world_size <= 1:
        return [list(b) for b in batches]
    merged: List[List[int]] = []
    carry: List[int] = []
    for b in batches:
        b = carry + list(b)
        carry = []
        if len(b) < world_size:
            if merged:
                merged[-1] = merged[-1] + b
            else:
                carry = b
            continue
        merged.append(b)
    if carry:
        raise ValueError(f"{len(carry)} training items for {world_size} ranks: every rank needs an item per batch")
    out = []
    for b in merged:
        size, extra = divmod(len(b), world_size)
        start = rank * size + min(rank, extra)
        out.append(b[start: start + size + (rank < extra)])
    return out


def _collective(fn, t: torch.Tensor) -> torch.Tensor:
    """Run the in-place collective ``fn(t)``; CPU tensors travel through the GPU under NCCL.
    Returns the result (``t`` itself, or a new CPU tensor)."""
    if not t.is_cuda and dist.get_backend() == "nccl":
        return _collective(fn, t.cuda()).cpu()
    fn(t)
    return t


def _all_reduce(t: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """All-reduce of ``t`` (see :func:`_collective`); returns the result."""
    return _collective(lambda x: dist.all_reduce(x, op=op), t)


def pad_to_global(batch: Any) -> Any:
    """Zero-pad axis 1 of every tensor of 2 or more dims to its longest length over the ranks.

    Collated batches hold padded (items, frames, dim) features and (items, length) token ids;
    after this each rank's tensors are exactly rows of the one-process batch tensors, so
    BatchNorm sums, dropout masks and teacher forcing see the same shapes. Padding is what
    the collate functions pad with (zeros; token id 0). Identity without a process group.

    Args:
        batch: a collated batch (tuple of tensors and other objects); returned as it is
            without a process group, else as a tuple.
    """
    if not is_distributed():
        return batch
    idx = [i for i, x in enumerate(batch) if torch.is_tensor(x) and x.dim() >= 2]
    if not idx:
        return batch
    lengths = _all_reduce(torch.tensor([batch[i].size(1) for i in idx]), dist.ReduceOp.MAX).tolist()
    out = list(batch)
    for i, n in zip(idx, lengths):
        x = out[i]
        if x.size(1) < n:
            pad = x.new_zeros((x.size(0), n - x.size(1)) + tuple(x.shape[2:]))
            out[i] = torch.cat([x, pad], 1)
    return tuple(out)


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks whose gradient is the sum of the ranks' gradients (each rank
    back-propagates only its own loss, and the global loss is the sum of them)."""

    @staticmethod
    def forward(ctx, x):
        return _all_reduce(x.clone())

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.clone())


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Differentiable sum of ``x`` over ranks (``x`` itself without a process group)."""
    return _AllReduceSum.apply(x) if is_distributed() else x


@contextlib.contextmanager
def row_sharded_randomness(active: bool = True) -> Iterator[None]:
    """Within the block, :func:`rows_rand`, :class:`Dropout` and :func:`all_ranks` act on
    the global batch (a collective per call), so every rank makes the same sequence of calls.

    The trainer enters it around the objectives that declare ``row_sharded_randomness``;
    a no-op without a process group or with ``active`` false.
    """
    previous = _ROWS["active"]
    _ROWS["active"] = bool(active) and is_distributed()
    try:
        yield
    finally:
        _ROWS["active"] = previous


@contextlib.contextmanager
def eval_rows(rows: int) -> Iterator[None]:
    """Within the block, :class:`Dropout` in training mode leaves the first ``rows`` rows (axis
    0) of its input as eval mode does (unchanged) and drops out the others, drawing the mask of
    those others alone: the same draws as a separate call on them. It lets one batched decoder
    pass hold eval-mode rows (a greedy baseline) beside train-mode ones (samples): see
    :func:`eval_rows_exact` for the modules where that equals two passes.

    Args:
        rows: >= 0; 0: every row as the module's mode says (the default).

    Raises:
        ValueError: ``rows`` < 0.
    """
    if rows < 0:
        raise ValueError(f"eval_rows needs rows >= 0, got {rows}")
    previous = _ROWS["eval_rows"]
    _ROWS["eval_rows"] = rows
    try:
        yield
    finally:
        _ROWS["eval_rows"] = previous


class replay_row_state:  # noqa: N801 (used as a function returning a context manager)
    """A context manager that re-enters, wherever it is entered, the row state of its creation:
    the :func:`row_sharded_randomness` and :func:`eval_rows` blocks around it. Reusable (each
    entry restores the state found there on exit), as a second backward pass through the same
    graph recomputes again.

    For recomputations in the backward pass (activation checkpointing:
    :func:`captionlib.models.encoders.checkpointed`), which runs outside those blocks: the
    recomputed :class:`Dropout` masks and :func:`rows_rand` draws are then those of the forward
    pass (with torch's generator states, which the checkpoint restores), and row-sharded draws
    make their collective there on every rank alike.
    """

    def __init__(self) -> None:
        self.state, self.previous = dict(_ROWS), []

    def __enter__(self) -> None:
        self.previous.append(dict(_ROWS))
        _ROWS.update(self.state)

    def __exit__(self, *exc: Any) -> None:
        _ROWS.update(self.previous.pop())


def eval_rows_exact(module: nn.Module) -> bool:
    """Whether, under :func:`eval_rows`, the first rows of ``module``'s training-mode output are
    its eval-mode output for them: every leaf module (one without children) is of a kind that
    acts alike in both modes (:data:`_MODE_FREE`, dropout with p = 0, ``nn.GRU``/``nn.LSTM``
    without inter-layer dropout) or is :class:`Dropout`, and every ``nn.MultiheadAttention`` has
    no attention dropout. Any other leaf (batch norm, whose statistics mix the rows, other
    dropouts, ``nn.RReLU``, a module of unknown kind) answers no. The code of a module with
    children is not read: its ``forward`` must not branch on ``self.training`` itself (the
    decoders here do not; the Transformer's attention dropout reads its ``MultiheadAttention``)."""
    for m in module.modules():
        if isinstance(m, nn.MultiheadAttention) and m.dropout > 0:
            return False
        if any(True for _ in m.children()) or isinstance(m, Dropout):
            continue
        if isinstance(m, nn.modules.dropout._DropoutNd):
            if m.p > 0:
                return False
        elif isinstance(m, nn.RNNBase):
            if m.dropout > 0 and m.num_layers > 1:
                return False
        elif not isinstance(m, _MODE_FREE):
            return False
    return True


#: leaf modules that compute the same in training and eval mode (:func:`eval_rows_exact`); the
#: activation modules of ``torch.nn`` but ``nn.RReLU`` (random slopes in training)
_MODE_FREE = (nn.Linear, nn.Embedding, nn.LayerNorm, nn.Identity, nn.RNNCellBase, nn.Flatten, nn.Unflatten,
              nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softmax, nn.LogSoftmax, nn.ELU, nn.LeakyReLU,
              nn.GLU, nn.Mish, nn.Hardtanh, nn.Softplus)


def row_sharded() -> bool:
    """Whether :func:`row_sharded_randomness` is in effect (with a process group)."""
    return _ROWS["active"]


def _my_rows(rows: int, draw) -> torch.Tensor:
    """``draw(total)`` for the rows of all ranks stacked in rank order, sliced to this
    rank's ``rows`` (one all-reduce of the row counts)."""
    counts = torch.zeros(dist.get_world_size(), dtype=torch.long)
    counts[dist.get_rank()] = rows
    counts = _all_reduce(counts).tolist()
    offset = sum(counts[: dist.get_rank()])
    return draw(sum(counts))[offset: offset + rows]


def rows_rand(rows: int, *shape: int, dtype: torch.dtype = torch.float32,
              device: Any = None) -> torch.Tensor:
    """``torch.rand(rows, *shape)``, or inside :func:`row_sharded_randomness` this rank's
    rows of one draw for the rows of all ranks stacked in rank order (what one process
    would draw for the global batch).

    Args:
        rows: this rank's rows (items, captions or samples of its block, in order).
        shape: the trailing dims, equal on every rank.
    """
    if not _ROWS["active"]:
        return torch.rand(rows, *shape, dtype=dtype, device=device)
    return _my_rows(rows, lambda total: torch.rand(total, *shape, dtype=dtype, device=device))


@contextlib.contextmanager
def rank_random_stream(device: torch.device) -> Iterator[None]:
    """For objectives without row-sharded draws: a random stream of this rank's own.

    Seeds the generators with one number drawn from the shared generator plus the rank, and
    restores them afterwards, so the shared generator advances alike on every rank (and
    resumes), while ranks do not draw the same dropout masks and samples for their rows.
    A no-op without a process group.
    """
    if not is_distributed():
        yield
        return
    seed = int(torch.randint(2 ** 62, (1,)).item()) + dist.get_rank()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def all_ranks(flag: bool) -> bool:
    """``flag`` and-ed over ranks inside :func:`row_sharded_randomness` (loops that draw
    until every row is done must stop on every rank together); ``flag`` elsewhere."""
    if not _ROWS["active"]:
        return flag
    return bool(_all_reduce(torch.tensor([int(flag)]), dist.ReduceOp.MIN).item())


class Dropout(nn.Dropout):
    """``nn.Dropout`` whose mask, inside :func:`row_sharded_randomness`, is this rank's rows
    of the mask one process would draw for the global batch (axis 0 = rows).

    Same module, arguments and (empty) state as ``nn.Dropout``; outside the block it is
    ``nn.Dropout``. The global mask is drawn as ``torch.nn.functional.dropout`` draws it on
    CPU (``bernoulli_(1 - p)`` then ``/ (1 - p)``), so CPU ranks draw one CPU process's
    masks. One CUDA process uses a fused dropout kernel with other draws, so GPU ranks
    equal one GPU process in law only. Inside :func:`eval_rows` the first rows pass unchanged.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = _ROWS["eval_rows"]
        if keep and self.training and self.p > 0:  # eval_rows: the first rows as in eval mode
            return x if keep >= x.size(0) else torch.cat([x[:keep], self._dropped(x[keep:])])
        return self._dropped(x)

    def _dropped(self, x: torch.Tensor) -> torch.Tensor:
        """Training-mode dropout of every row of ``x`` (row-sharded where that is active)."""
        if not (_ROWS["active"] and self.training and self.p > 0):
            return super().forward(x)
        if self.p >= 1:
            return x * 0
        # empty_like's memory layout (channels-last CNN activations), so the draws land where
        # they land in one process's mask; axis 0 stays outermost in either layout
        layout = (torch.channels_last if x.dim() == 4 and not x.is_contiguous()
                  and x.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format)

        def mask(total: int) -> torch.Tensor:
            m = torch.empty((total,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device, memory_format=layout)
            return m.bernoulli_(1 - self.p).div_(1 - self.p)

        return x * _my_rows(x.size(0), mask)


class BatchNorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` whose training statistics, with a process group, are those of
    the global batch: per-channel sums (then squared deviations) are summed over ranks with
    autograd (``torch.nn.SyncBatchNorm`` works on GPUs only). Same parameters, buffers and
    state-dict keys; without a process group or in eval mode it is ``nn.BatchNorm2d``.

    Shapes: (batch, channels, height, width) in and out; the statistics are computed in
    float32 whatever the input dtype (mixed precision), the output has the input's dtype.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and is_distributed()):
            return super().forward(x)
        dims = (0, 2, 3)
        xf = x.float()  # statistics in float32, also under fp16/bf16 autocast (sums overflow fp16)
        count = _all_reduce(xf.new_tensor(float(x.numel() // x.size(1))))
        mean = all_reduce_sum(xf.sum(dims)) / count
        centred = xf - mean[None, :, None, None]
        var = all_reduce_sum(centred.pow(2).sum(dims)) / count
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.mul_(1 - factor).add_(factor * mean.detach())
                unbiased = var.detach() * count / max(float(count) - 1.0, 1.0)
                self.running_var.mul_(1 - factor).add_(factor * unbiased)
        y = centred * torch.rsqrt(var + self.eps)[None, :, None, None]
        if self.affine:
            y = y * self.weight[None, :, None, None] + self.bias[None, :, None, None]
        return y.to(x.dtype)


def reduce_step(loss: torch.Tensor, stats: Dict[str, float],
                count: float) -> Tuple[torch.Tensor, Dict[str, float], bool]:
    """Weight this rank's loss by its share of the global ``count`` and average the
    statistics over ranks, weighted by ``count`` (one collective).

    Args:
        loss: scalar, this rank's mean over its ``count`` units (tokens, clips).
        stats: this rank's statistics, each a mean over the same units.
        count: this rank's units.

    Returns:
        (loss to back-propagate, global statistics, True when some rank's loss is not finite).
        Without a process group: (loss, stats, not finite(loss)).
    """
    finite = bool(torch.isfinite(loss))
    if not is_distributed():
        return loss, stats, not finite
    keys = sorted(stats)
    vec = torch.tensor([count, float(not finite)] + [float(stats[k]) * count for k in keys], dtype=torch.float64)
    vec = _all_reduce(vec).tolist()
    total = vec[0]
    return loss * (count / total), {k: v / total for k, v in zip(keys, vec[2:])}, vec[1] > 0


def all_reduce_gradients(params: Sequence[nn.Parameter]) -> None:
    """Sum the gradients of ``params`` over ranks, in one flat buffer.

    A parameter without a gradient on every rank keeps none (as one process would leave
    it); if some rank has one, the others count zeros. No-op without a process group.
    """
    if not is_distributed():
        return
    params = list(params)
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32)
    has = _all_reduce(has).tolist()
    live = [p for p, h in zip(params, has) if h > 0]
    if not live:
        return
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = _all_reduce(torch.cat([p.grad.reshape(-1) for p in live]))
    offset = 0
    for p in live:
        n = p.numel()
        p.grad.copy_(flat[offset: offset + n].view_as(p.grad))
        offset += n


def broadcast_state(module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers into ``module`` on every rank (no-op without
    a process group)."""
    if not is_distributed():
        return
    for t in module.state_dict().values():
        out = _collective(lambda x: dist.broadcast(x, src=0), t)
        if out is not t:
            t.copy_(out)


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    if is_distributed():
        dist.barrier()


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (``obj`` itself without a process group)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def destroy() -> bool:
    """Leave the process group (no-op without one), after a barrier: every rank leaves
    together, so none tears down its gloo/NCCL threads while another still talks to it (a
    rank that left first was seen to abort with "terminate called without an active
    exception" on a loaded machine). Returns whether there was a group to leave."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.barrier()
    dist.destroy_process_group()
    return True


def finish() -> None:
    """End a training binary's process group: under ``torchrun`` (a process group was
    joined), leave it (:func:`destroy`), run the ``atexit`` functions (which flush and close
    the log handlers), flush the standard streams and end the process with exit status 0
    at once (``os._exit``), skipping the interpreter's finalisation and the C++ static
    destructors. In them, gloo's teardown was seen to abort a rank whose training had
    finished and whose files were written ("terminate called without an active exception",
    exit status -6; in four ``make test`` runs on 2 loaded cores, once each), and
    ``torchrun`` then failed the stage. Every file of the run is closed by then (checkpoints
    are written atomically). Without a process group it returns: a binary's ``main()``
    called in-process must not end its caller.
    """
    if not destroy():
        return
    atexit._run_exitfuncs()  # what the interpreter's exit runs first (no public name)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)
