"""Paired bootstrap significance test of two captioning systems on the same clips.

The test follows Koehn, "Statistical significance tests for machine translation
evaluation" (EMNLP 2004), with the bootstrap of Efron and Tibshirani, "An Introduction to
the Bootstrap" (1993, ch. 16): both systems are scored per clip (e.g. the per-clip
CIDEr-D of ``per_clip.json``, written by :func:`captionlib.metrics.scorer.score_caption_files`),
clip indices are resampled with replacement, the *same* indices for both systems (paired),
and the corpus score difference is recomputed on every resample. The corpus score must be
the mean of the per-clip scores, which holds for CIDEr-D and ROUGE-L (not for BLEU).

p-value convention (one-sided, H1: "system b is better than system a"):
``p = (1 + #{resampled delta <= 0}) / (1 + num_resamples)``, i.e. the fraction of
resamples in which b does *not* beat a, counted with the "+1" correction so that p is
never 0 (smallest possible p: ``1 / (1 + num_resamples)``). Identical systems give p = 1.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Sequence, Union

import numpy as np

#: Resamples drawn per block (bounds memory at ``_BLOCK * num_items`` indices).
_BLOCK = 1000


@dataclass(frozen=True)
class BootstrapResult:
    """Outcome of :func:`paired_bootstrap`.

    Attributes:
        delta: ``mean(scores_b) - mean(scores_a)`` on the full set (same unit as the scores).
        p_value: one-sided p of H1 "b better than a" (convention: module docstring).
        num_resamples: number of bootstrap resamples.
        num_items: number of paired items (clips).
        ci_low: 2.5th percentile of the resampled deltas.
        ci_high: 97.5th percentile of the resampled deltas (with ``ci_low``: the 95%
            percentile interval of Efron and Tibshirani ch. 13).
    """

    delta: float
    p_value: float
    num_resamples: int
    num_items: int
    ci_low: float
    ci_high: float


def paired_bootstrap(
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    num_resamples: int = 10000,
    seed: int = 0,
) -> BootstrapResult:
    """Paired bootstrap test that system b scores higher than system a (Koehn 2004).

    Args:
        scores_a: per-item scores of the baseline, shape ``(N,)``.
        scores_b: per-item scores of the other system on the same items in the same
            order, shape ``(N,)``.
        num_resamples: number of resamples R (each draws N item indices with replacement).
        seed: seed of the ``numpy.random.Generator``; same inputs and seed give the same result.

    Returns:
        A :class:`BootstrapResult`; ``p_value = (1 + #{delta* <= 0}) / (1 + R)``.

    Raises:
        ValueError: if the shapes differ or are not 1-D, N = 0, R < 1, or a score is not finite.
    """
    a = np.asarray(scores_a, dtype=np.float64)
    b = np.asarray(scores_b, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"expected two 1-D score arrays of the same length, got shapes {a.shape} and {b.shape}")
    n = a.size
    if n == 0:
        raise ValueError("no items to resample")
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("scores must be finite")
    # mean(b) - mean(a) on a resample = mean of the paired differences on that resample
    diff = b - a
    rng = np.random.Generator(np.random.PCG64(seed))
    deltas = np.empty(num_resamples, dtype=np.float64)
    for start in range(0, num_resamples, _BLOCK):
        size = min(_BLOCK, num_resamples - start)
        idx = rng.integers(0, n, size=(size, n))
        deltas[start : start + size] = diff[idx].mean(axis=1)
    not_better = int(np.count_nonzero(deltas <= 0.0))
    low, high = np.percentile(deltas, [2.5, 97.5])
    return BootstrapResult(
        delta=float(b.mean() - a.mean()),
        p_value=(1.0 + not_better) / (1.0 + num_resamples),
        num_resamples=int(num_resamples),
        num_items=int(n),
        ci_low=float(low),
        ci_high=float(high),
    )


def _load_per_clip(path: Union[str, Path]):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read per-clip scores: {e}") from e


def has_per_clip(path: Union[str, Path], metric: str) -> bool:
    """Whether ``path`` exists and holds per-clip ``metric`` scores (older runs have no
    ``per_clip.json``; one scored without ``metric`` lacks it).

    Raises:
        ValueError: naming the file, if it exists but cannot be read as a JSON object.
    """
    if not Path(path).is_file():
        return False
    obj = _load_per_clip(path)
    if not isinstance(obj, dict):  # used to count as "no per-clip scores": that seed was left out silently
        raise ValueError(f"{path}: expected a JSON object of per-clip scores, got {type(obj).__name__}")
    return isinstance(obj.get(metric), dict)


def read_per_clip(path: Union[str, Path], metric: str) -> Dict[str, float]:
    """``{clip_id: score}`` of ``metric`` from a ``per_clip.json``.

    Raises:
        ValueError: naming the file, if it cannot be read, lacks ``metric`` or holds a
            score that is no finite number.
    """
    obj = _load_per_clip(path)
    if not isinstance(obj, dict) or not isinstance(obj.get(metric), dict):
        have = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise ValueError(f"{path}: no per-clip {metric} scores (has {have})")
    out: Dict[str, float] = {}
    for clip, value in obj[metric].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{path}: {metric} of clip {clip!r} must be a finite number, got {value!r}")
        out[str(clip)] = float(value)
    return out


def paired_bootstrap_files(
    per_clip_a: Union[str, Path],
    per_clip_b: Union[str, Path],
    metric: str = "CIDEr-D",
    num_resamples: int = 10000,
    seed: int = 0,
) -> BootstrapResult:
    """:func:`paired_bootstrap` of two ``per_clip.json`` files (a: baseline, b: other system).

    Clips are paired by id (in sorted id order, so the result does not depend on the
    order in the files).

    Raises:
        ValueError: naming both files if they do not cover the same clips; naming the
            file if it is unreadable or lacks ``metric``.
    """
    a = read_per_clip(per_clip_a, metric)
    b = read_per_clip(per_clip_b, metric)
    if set(a) != set(b):
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        raise ValueError(
            f"{per_clip_a} and {per_clip_b} cover different clips: {len(only_a)} only in the first "
            f"(e.g. {only_a[:3]}), {len(only_b)} only in the second (e.g. {only_b[:3]})"
        )
    clips = sorted(a)
    return paired_bootstrap(
        [a[c] for c in clips], [b[c] for c in clips], num_resamples=num_resamples, seed=seed
    )
