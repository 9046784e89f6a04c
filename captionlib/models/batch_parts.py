"""Encoder outputs that are more than one tensor, with the batch-axis operations of a tensor.

Decoding and the RL objectives handle an encoding ``v`` without looking inside it: they
index, repeat, expand or detach it along the batch axis (e.g. ``v.repeat_interleave(n, 0)``
for n samples per clip, ``v[alive]`` in beam search) and pass it to ``first_step``. A plain
(batch, embed) tensor serves decoders that read one vector per clip (Show-and-Tell style);
an attention decoder (Top-Down, Anderson et al. 2018) also needs the frame/region vectors and
their lengths. :class:`BatchParts` holds such a group of batch-first tensors and applies each
of those operations to every part, so the same decoding and RL code serves both.
"""

from typing import Callable, Iterable, Union

import torch
from torch import nn

EncodingLike = Union[torch.Tensor, "BatchParts"]


class BatchParts(tuple):
    """A tuple of batch-first tensors (or nested :class:`BatchParts`) that share the batch axis.

    The operations decoding and RL apply to an encoding along the batch axis are applied to
    every part: ``v[index]``, ``index_select(0, index)``, ``repeat_interleave(n, 0)``,
    ``expand(n, ...)`` (a batch of 1 to n), ``detach()``, ``contiguous()``, ``to(device)``;
    ``size(0)``, ``device`` and ``dtype`` are those of the first part.

    Example (an attention decoder's encoding):
        ``BatchParts((pooled, memory, memory_lens))`` with pooled (batch, embed), memory
        (batch, frames, embed), memory_lens (batch,).

    Raises:
        ValueError: no part, or parts with different batch sizes.
    """

    def __new__(cls, parts: Iterable):
        parts = tuple(parts)
        if not parts:
            raise ValueError("BatchParts needs at least one part")
        sizes = {p.size(0) for p in parts}
        if len(sizes) != 1:
            raise ValueError(f"BatchParts: parts disagree on the batch size ({sorted(sizes)})")
        return super().__new__(cls, parts)

    def map(self, fn: Callable) -> "BatchParts":
        """Apply ``fn`` to every part (recursively) and return the new parts."""
        return BatchParts(p.map(fn) if isinstance(p, BatchParts) else fn(p) for p in self)

    def size(self, dim: int = 0) -> int:
        """Batch size (only ``dim=0`` is defined for a group of tensors)."""
        if dim != 0:
            raise ValueError("BatchParts only has a batch axis (dim 0)")
        return self[0].size(0)

    @property
    def device(self) -> torch.device:
        """The device of the first part."""
        return self[0].device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first part (the pooled vector's, by convention)."""
        return self[0].dtype

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, int) and not isinstance(index, bool):
            return tuple.__getitem__(self, index)  # the part itself, as a tuple gives
        return self.map(lambda t: t[index])

    def index_select(self, dim: int, index: torch.Tensor) -> "BatchParts":
        """Select/repeat batch entries of every part by ``index`` (batch',); only ``dim=0``."""
        self.size(dim)
        return self.map(lambda t: t.index_select(0, index))

    def repeat_interleave(self, repeats, dim: int = 0) -> "BatchParts":
        """Repeat each batch entry of every part ``repeats`` times in a row; only ``dim=0``."""
        self.size(dim)
        return self.map(lambda t: t.repeat_interleave(repeats, 0))

    def expand(self, batch: int, *_ignored) -> "BatchParts":
        """Expand a batch of 1 to ``batch`` (the other axes of each part are kept)."""
        return self.map(lambda t: t.expand(batch, *t.shape[1:]))

    def detach(self) -> "BatchParts":
        """Every part detached from the graph."""
        return self.map(lambda t: t.detach())

    def contiguous(self) -> "BatchParts":
        """Every part made contiguous."""
        return self.map(lambda t: t.contiguous())

    def to(self, device) -> "BatchParts":
        """Move every part to ``device`` (dtypes are kept: lengths stay integer)."""
        return self.map(lambda t: t.to(device))


def pooled(v: EncodingLike) -> torch.Tensor:
    """The (batch, embed) clip vector of an encoding: ``v`` itself, or the first part of a
    :class:`BatchParts` (by convention the pooled vector)."""
    while isinstance(v, BatchParts):
        v = v[0]
    return v


def cat_encodings(chunks) -> EncodingLike:
    """Concatenate encodings along the batch axis (e.g. the chunks of an eval-mode encoding).

    Args:
        chunks: a non-empty list of tensors (batch_i, embed), or of :class:`BatchParts` with
            the same structure; 3-D parts (batch_i, frames_i, dim) of different lengths are
            zero-padded to the longest first (their lengths are another part).

    Returns:
        a tensor (sum batch_i, embed) or BatchParts of that batch size.
    """
    first = chunks[0]
    if not isinstance(first, BatchParts):
        return torch.cat(chunks)
    parts = []
    for i in range(len(first)):
        items = [c[i] for c in chunks]
        if isinstance(items[0], BatchParts):
            parts.append(cat_encodings(items))
        elif items[0].dim() == 3:
            frames = max(t.size(1) for t in items)
            parts.append(torch.cat([nn.functional.pad(t, (0, 0, 0, frames - t.size(1))) for t in items]))
        else:
            parts.append(torch.cat(items))
    return BatchParts(parts)
