"""The one check of the decoding options, shared by ``caption_decode``, ``caption_infer``,
:func:`captionlib.decode.inference.decode_feats_scp` and
:class:`captionlib.packed.captioner.PretrainedCaptioner`, so that a value out of range is refused
up front (naming the option and its range) instead of decoding greedily, writing empty
captions or failing deep inside with ``range() arg 3 must not be zero``.

Imports nothing heavy (no torch): the binaries call it before anything is loaded.
"""

import math
import numbers
from typing import Optional

from captionlib.utils.cli import in_range

#: ``--decode_compile`` values (see :func:`captionlib.decode.search.compiled`): ``none`` (eager),
#: a ``torch.compile`` mode (``reduce-overhead``: CUDA graphs on a GPU), a ``torch.compile``
#: backend that only traces (``eager``, ``aot_eager``: a check that a step is one graph), or
#: ``cuda-graph`` (the whole sampling loop captured as one CUDA graph where nothing needs its
#: gradients: :mod:`captionlib.decode.cuda_graph`)
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs",
                 "eager", "aot_eager", "cuda-graph")

# option: (allowed range, as the training options write it: see captionlib.utils.cli.in_range; what it means)
_RANGES = {
    "beam_size": (">= 1", "1: greedy search"),
    "batch_size": (">= 1", "clips decoded together"),
    "max_len": (">= 2", "tokens, eos included: 1 leaves room for eos alone, an empty caption"),
    "nbest": (">= 0", "0: no n-best list"),
    "num_diversity_samples": (">= 0", "0: no samples"),
    "sample_temperature": ("> 0", "1: the model's distribution"),
    "sample_top_k": (">= 0", "0: all tokens"),
    "sample_top_p": ("(0, 1]", "1: all tokens"),
    "rerank": (">= 0", "0: no re-ranking"),
    "rerank_fluency_weight": (">= 0", "0: fluency not counted"),
}


def check_decode_options(
    beam_size: Optional[int] = None,
    batch_size: Optional[int] = None,
    max_len: Optional[int] = None,
    length_penalty: Optional[float] = None,
    nbest: Optional[int] = None,
    num_diversity_samples: Optional[int] = None,
    sample_temperature: Optional[float] = None,
    sample_top_k: Optional[int] = None,
    sample_top_p: Optional[float] = None,
    rerank: Optional[int] = None,
    rerank_lm_weight: Optional[float] = None,
    rerank_fluency_weight: Optional[float] = None,
) -> None:
    """Check decoding options; ``None`` means not given (not checked).

    Allowed: ``beam_size`` and ``batch_size`` integers >= 1, ``max_len`` >= 2; ``nbest``,
    ``num_diversity_samples`` and ``rerank`` integers >= 0; ``length_penalty`` and
    ``rerank_lm_weight`` any finite number; ``rerank_fluency_weight`` a finite number >= 0;
    ``sample_temperature`` a finite number > 0; ``sample_top_k`` an integer >= 0;
    ``sample_top_p`` in (0, 1].

    Raises:
        ValueError: the first option that is no number, or out of range, e.g. ``beam_size must
            be >= 1 (1: greedy search), got 0``.
    """
    given = dict(beam_size=beam_size, batch_size=batch_size, max_len=max_len, nbest=nbest,
                 num_diversity_samples=num_diversity_samples, sample_temperature=sample_temperature,
                 sample_top_k=sample_top_k, sample_top_p=sample_top_p, rerank=rerank,
                 rerank_fluency_weight=rerank_fluency_weight)
    free = {"length_penalty": length_penalty, "rerank_lm_weight": rerank_lm_weight}  # any finite number
    for key, value in {**given, **free}.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise ValueError(f"{key} must be a number, got {value!r}")  # e.g. from a tampered packed config
    for key, value in given.items():
        valid, meaning = _RANGES[key]
        if value is not None and not (math.isfinite(value) and in_range(value, valid)):
            shown = f"in {valid}" if valid[0] in "[(" else valid
            raise ValueError(f"{key} must be {shown} ({meaning}), got {value}")
    for key, value in free.items():
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{key} must be a finite number, got {value}")
