"""Global feature statistics (mean/std over all frames) for input normalisation.

The seed system normalises log-mel features by the mean and standard deviation
of the development set (``seeds/000`` section 3.2). Sums are accumulated in
float64 (ESPnet's ``feats_stats.npz`` layout: ``count``, ``sum``, ``sum_square``),
and ``mean``/``std`` are stored alongside for convenience.
"""

import logging
import os
from typing import Dict

import numpy as np

from captionlib.io.datadir import PathLike
from captionlib.io.feats import FeatReader


def compute_feats_stats(feats_scp: PathLike, output: PathLike) -> Dict[str, np.ndarray]:
    """Compute per-dimension mean and standard deviation over every frame of ``feats_scp``.

    Args:
        feats_scp: feature scp (ark or h5 lines, see :class:`captionlib.io.feats.FeatReader`).
        output: ``.npz`` file to write (atomically; parent directories are created).

    Returns:
        dict of float64/int64 arrays: ``count`` (0-d int64, total frames), ``sum``
        and ``sum_square`` (``(dim,)``), ``mean`` (``(dim,)``) and ``std`` (``(dim,)``,
        population std ``sqrt(E[x^2] - mean^2)`` clipped at 0 before the root; a
        constant dimension gives 0, so floor it before dividing).

    Raises:
        ValueError: empty scp, a clip the reader refuses (no matrix, 0 frames, NaN/Inf), or a
            clip whose dimension differs from the first clip's (message names the clip and the scp).
    """
    feats_scp = os.fspath(feats_scp)
    total = None
    total_sq = None
    count = 0
    with FeatReader(feats_scp) as reader:
        if len(reader) == 0:
            raise ValueError(f"{feats_scp}: no clips")
        for key in reader.keys():
            x = reader[key].astype(np.float64)
            if total is None:
                total = np.zeros(x.shape[1], np.float64)
                total_sq = np.zeros(x.shape[1], np.float64)
            elif x.shape[1] != total.shape[0]:
                raise ValueError(f"{feats_scp}: clip {key} has dim {x.shape[1]}, expected {total.shape[0]}")
            total += x.sum(axis=0)
            total_sq += np.square(x).sum(axis=0)
            count += x.shape[0]
    mean = total / count
    var = np.maximum(total_sq / count - mean**2, 0.0)
    stats = {
        "count": np.array(count, dtype=np.int64),
        "sum": total,
        "sum_square": total_sq,
        "mean": mean,
        "std": np.sqrt(var),
    }
    output = os.fspath(output)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    tmp = output + ".tmp.npz"
    np.savez(tmp, **stats)
    os.replace(tmp, output)
    logging.info("stats over %d frames of %d clips written to %s", count, len(reader), output)
    return stats
