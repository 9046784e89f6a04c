#!/usr/bin/env python3
"""Compute global feature mean/std (float64) over all frames of a feats.scp.

Writes an ``.npz`` with keys ``count`` (total frames), ``sum``, ``sum_square``,
``mean``, ``std`` (each ``(dim,)`` except ``count``). Used for input normalisation
with statistics of the training set only.

Usage:
    python -m captionbin.caption_compute_stats \\
        --feats_scp dump/logmel/development/feats.scp --output exp/stats_logmel/feats_stats.npz
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args

REQUIRED = ('feats_scp', 'output')


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Global mean/std of features for normalisation")
    parser.add_argument("--feats_scp", default=None, help="(required) feature scp (ark or h5 lines)")
    parser.add_argument("--output", default=None, help="(required) output .npz, e.g. exp/stats_logmel/feats_stats.npz")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.io.stats.compute_feats_stats`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.io.stats import compute_feats_stats
    from captionlib.utils.fileio import check_writable

    try:
        check_writable(args.output)
        compute_feats_stats(feats_scp=args.feats_scp, output=args.output)
    except (ValueError, OSError, KeyError) as e:  # OSError: a missing file, a directory given as a file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
