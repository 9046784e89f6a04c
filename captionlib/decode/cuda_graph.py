"""The whole sampling loop replayed as one CUDA graph (``--decode_compile cuda-graph``).

On a GPU, :func:`~captionlib.decode.search.sample`'s loop is bound by the host, not by the
device: on an H100 a decoder step of 32 rows computes in far less than the host time of
launching it (bench/README.md, "Speed": each compiled call of ``reduce-overhead`` cost
200-330 us of host time, and the greedy baseline and the samples took 26 ms of a 62 ms SCST
update against a 31 ms XE update). Here the loop's every step, all ``max_len`` of them with no
early exit and no host synchronisation (:func:`~captionlib.decode.search.decode_loop` with
``sync_every`` 0), is captured once per shape as a ``torch.cuda.CUDAGraph``
(``torch.cuda.graph``, PyTorch's "CUDA Graphs" notes) and replayed: one launch per loop, then
one device-to-host copy to cut the padding columns.

It serves the passes without gradients: the greedy baselines of the RL objectives, their samples
under ``--sample_logprobs recompute``, and validation's greedy captions. :func:`graphed_sample`
returns ``None`` (and :func:`~captionlib.decode.search.sample` runs its eager loop) off a CUDA
device, with gradients enabled, under row-sharded randomness (several ranks drawing one
global batch: a collective per draw), and in a process where a capture failed (logged once).

How it differs from the eager loop:
- every replay runs all ``max_len`` steps: the steps after the last row's eos only add padding,
  which is cut off, so greedy captions are the eager loop's; but the random generator advances
  for those steps too (as with a larger ``sync_every``);
- the random numbers of a replay come from the CUDA generator's graph-safe Philox offsets:
  samples have the same law as the eager loop's, but a seed does not give the eager loop's draws;
- encodings with frame axes (an attention decoder's memory, (batch, frames, dim) parts of a
  :class:`~captionlib.models.batch_parts.BatchParts`) are zero-padded to a multiple of
  :data:`FRAME_MULTIPLE` frames, so that batches of other lengths share a graph; the decoders
  mask frames past ``memory_lens``, so the padding changes nothing but float rounding;
- each captured shape keeps its graph and its memory pool (at most :data:`CACHE_SIZE`, the
  least recently used dropped first); a new shape costs one eager loop (the warm-up the capture
  needs) and the capture.
"""

import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, List, Optional

import torch

from captionlib.decode.loop import SampleOutput, decode_loop, trimmed
from captionlib.models.batch_parts import BatchParts
from captionlib.utils.distributed import row_sharded

#: frames of an encoding's frame axis are padded to a multiple of this (one graph per length bucket)
FRAME_MULTIPLE = 64
#: captured graphs kept (one per model, mode, shape and decoding setting)
CACHE_SIZE = 16


@dataclass
class _Graph:
    """One captured loop: the graph, its static input tensors and its static outputs."""

    graph: Any
    inputs: List[torch.Tensor]
    output: SampleOutput


_GRAPHS: "OrderedDict[tuple, _Graph]" = OrderedDict()
#: the key of a failed capture: after one, the process decodes eagerly (a capture that a CUDA
#: error broke can leave the allocator unusable for another)
_DISABLED: list = []


def flat_parts(v) -> List[torch.Tensor]:
    """The tensors of an encoding, in order: ``[v]`` or the (nested) parts of a BatchParts."""
    if isinstance(v, BatchParts):
        return [t for p in v for t in flat_parts(p)]
    return [v]


def with_parts(v, tensors: List[torch.Tensor]):
    """An encoding of ``v``'s structure holding ``tensors`` (in :func:`flat_parts` order)."""
    it = iter(tensors)

    def rebuild(x):
        return BatchParts(rebuild(p) for p in x) if isinstance(x, BatchParts) else next(it)

    return rebuild(v)


def padded_frames(v):
    """``v`` with every (batch, frames, dim) part of a BatchParts zero-padded along its frame axis
    to a multiple of :data:`FRAME_MULTIPLE`; a plain tensor (a clip vector) unchanged."""
    if not isinstance(v, BatchParts):
        return v

    def pad(t: torch.Tensor) -> torch.Tensor:
        extra = -t.size(1) % FRAME_MULTIPLE if t.dim() == 3 else 0
        return torch.nn.functional.pad(t, (0, 0, 0, extra)) if extra else t

    return with_parts(v, [pad(t) for t in flat_parts(v)])


def _autocast_dtype() -> torch.dtype:
    """CUDA autocast's dtype (``torch.get_autocast_dtype`` from torch 2.4, before it the GPU's own getter)."""
    getter = getattr(torch, "get_autocast_dtype", None)
    return getter("cuda") if getter is not None else torch.get_autocast_gpu_dtype()


def _key(model, parts: List[torch.Tensor], settings: tuple) -> tuple:
    """What a captured graph depends on: the model object and the storage of its weights (a
    graph reads them where they were at capture), every module's train/eval mode (dropout),
    autocast, the inputs' shapes and dtypes, and the decoding settings."""
    weights = tuple(t.data_ptr() for t in [*model.parameters(), *model.buffers()])
    modes = tuple(m.training for m in model.modules())
    autocast = (torch.is_autocast_enabled(), _autocast_dtype())
    shapes = tuple((tuple(t.shape), t.dtype, t.device) for t in parts)
    return (id(model), weights, modes, autocast, shapes, settings)


def _end_pool(device: torch.device, pool) -> None:
    """Release the allocator from a capture that failed inside ``capture_end`` (before it ended
    the pool: PyTorch's ``CUDAGraph::reset`` notes that this leaves the allocator in "weird
    states"); the private function's name changed across torch versions."""
    for name in ("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool"):
        end = getattr(torch._C, name, None)
        if end is not None:
            with contextlib.suppress(RuntimeError):
                end(device.index, pool)
            return


def _capture(model, parts: List[torch.Tensor], v, settings: tuple) -> _Graph:
    """Warm the loop up on a side stream on ``parts`` (cuBLAS/cuDNN set themselves up outside
    a capture), then capture it on static copies of them, on their device. Autocast's weight
    cache is off for both: with it, the graph would read the low-precision copies the warm-up
    cached, which autocast frees when its region ends (``make_graphed_callables`` refuses that
    cache too). The caller's stream is restored even when the capture fails."""
    inputs = [t.clone() for t in parts]
    static_v = with_parts(v, inputs)
    dev = parts[0].device
    stream, pool, graph = torch.cuda.Stream(dev), torch.cuda.graph_pool_handle(), torch.cuda.CUDAGraph()
    amp = torch.autocast("cuda", dtype=_autocast_dtype(), enabled=torch.is_autocast_enabled(), cache_enabled=False)
    with torch.cuda.device(dev), amp:
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            decode_loop(model, static_v, *settings, sync_every=0)
        torch.cuda.current_stream(dev).wait_stream(stream)
        try:
            with torch.cuda.stream(stream):  # restored even if graph.__exit__ (capture_end) raises
                with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                    output = decode_loop(model, static_v, *settings, sync_every=0)
        except Exception:
            _end_pool(dev, pool)
            raise
    return _Graph(graph, inputs, output)


def replayable(v) -> bool:
    """Whether :func:`graphed_sample` replays a graph for ``v``: on a CUDA device, without
    gradients, outside row-sharded randomness."""
    return not torch.is_grad_enabled() and flat_parts(v)[0].device.type == "cuda" and not row_sharded()


def graphed_sample(model, v, max_len: int, greedy: bool, temperature: float, top_k: int,
                   return_states: bool, greedy_rows: int = 0, top_p: float = 1.0) -> Optional[SampleOutput]:
    """:func:`~captionlib.decode.search.sample` (same arguments; call it without gradients) by
    replaying a captured CUDA graph of its loop, captured at the first call of a shape.

    Args:
        model: the step-wise decoder (a Captioner), on a CUDA device.
        v: (batch, embed) encodings, or BatchParts (an attention decoder's (v, memory (batch,
            frames, dim), memory_lens)), on the model's device.

    Returns:
        the sampled (or greedy) captions as :class:`~captionlib.decode.search.SampleOutput`,
        (batch, length) each, trimmed after the last row's eos; ``None`` where the loop cannot
        be replayed so (see the module docstring): the caller then decodes eagerly.
    """
    if _DISABLED or not replayable(v):
        return None
    v = padded_frames(v)
    parts = flat_parts(v)
    # decode_loop's arguments after the encoding, in order (and part of the graph's key)
    settings = (max_len, greedy, temperature, top_k, return_states, greedy_rows, top_p)
    key = _key(model, parts, settings)
    entry = _GRAPHS.get(key)
    if entry is None:
        try:
            entry = _capture(model, parts, v, settings)
        except Exception as e:  # noqa: BLE001 (any capture failure: decode eagerly from now on, say why once)
            _DISABLED.append(key)
            cause = e.__context__ or e  # capture_end's error hides the op that broke the capture
            logging.warning("decode_compile cuda-graph: the loop for inputs %s could not be captured (%s: %s); "
                            "every pass of this process runs eagerly", [tuple(t.shape) for t in parts],
                            type(cause).__name__, cause)
            return None
        _GRAPHS[key] = entry
        while len(_GRAPHS) > CACHE_SIZE:
            _GRAPHS.popitem(last=False)
    _GRAPHS.move_to_end(key)
    for static, t in zip(entry.inputs, parts):
        static.copy_(t)
    entry.graph.replay()
    # views of the graph's static outputs, overwritten by its next replay: cloned out
    return trimmed(entry.output).map(torch.Tensor.clone)
