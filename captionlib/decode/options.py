"""The one check of the decoding options, shared by ``caption_decode``, ``caption_infer``,
:func:`captionlib.decode.inference.decode_feats_scp` and
:class:`captionlib.pretrained.PretrainedCaptioner`, so that a value out of range is refused
up front (naming the option and its range) instead of decoding greedily, writing empty
captions or failing deep inside with ``range() arg 3 must not be zero``.

Imports nothing heavy: the binaries call it before anything is loaded.
"""

import math
from typing import Optional

# option: (lowest allowed value, what it means), for the integer options
_INT_RANGES = {
    "beam_size": (1, "1: greedy search"),
    "batch_size": (1, "clips decoded together"),
    "max_len": (1, "tokens, eos included"),
    "nbest": (0, "0: no n-best list"),
    "num_diversity_samples": (0, "0: no samples"),
}


def check_decode_options(
    beam_size: Optional[int] = None,
    batch_size: Optional[int] = None,
    max_len: Optional[int] = None,
    length_penalty: Optional[float] = None,
    nbest: Optional[int] = None,
    num_diversity_samples: Optional[int] = None,
    sample_temperature: Optional[float] = None,
) -> None:
    """Check decoding options; ``None`` means not given (not checked).

    Allowed: ``beam_size``, ``batch_size`` and ``max_len`` integers >= 1; ``nbest`` and
    ``num_diversity_samples`` integers >= 0; ``length_penalty`` any finite number;
    ``sample_temperature`` a finite number > 0.

    Raises:
        ValueError: the first option out of range, e.g. ``beam_size must be >= 1 (1: greedy
            search), got 0``.
    """
    given = dict(beam_size=beam_size, batch_size=batch_size, max_len=max_len, nbest=nbest,
                 num_diversity_samples=num_diversity_samples)
    for key, value in given.items():
        low, meaning = _INT_RANGES[key]
        if value is not None and int(value) < low:
            raise ValueError(f"{key} must be >= {low} ({meaning}), got {value}")
    if length_penalty is not None and not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be a finite number, got {length_penalty}")
    if sample_temperature is not None and not (math.isfinite(sample_temperature) and sample_temperature > 0):
        raise ValueError(f"sample_temperature must be > 0 (1: the model's distribution), got {sample_temperature}")
