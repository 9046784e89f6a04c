#!/usr/bin/env python3
"""Compute the CIDEr-D document frequencies of the train references (recipe stage 4).

One document is the set of all references of one clip; references are cleaned with
``captionlib.text.cleaner.clean_words`` and grouped per clip through the ``utt2spk``
beside ``text`` (else the caption-id form ``<clip-id>-<k>``). The output ``.npz`` file (plain
arrays: it cannot carry code) is read by ``captionlib.metrics.cider_d.DocumentFrequency.load``
for every RL run and packed into packed models.

Usage:
    python -m captionbin.caption_compute_cider_df \\
        --text data/development/text --output exp/stats_logmel/cider_df.npz
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str_or_none

REQUIRED = ("text", "output")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("CIDEr-D document frequencies of the train references")
    parser.add_argument("--text", default=None, help="(required) data/<train>/text")
    parser.add_argument("--output", default=None, help="(required) output .npz, e.g. exp/stats_logmel/cider_df.npz")
    parser.add_argument("--utt2spk", type=str_or_none, default=None,
                        help="caption -> clip map (default: utt2spk next to --text if present)")
    parser.add_argument("--n", type=int, default=4, help="highest n-gram order")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.metrics.cider_d.compute_cider_df`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.metrics.cider_d import compute_cider_df
    from captionlib.utils.fileio import check_writable

    try:
        check_writable(args.output)
        compute_cider_df(text=args.text, output=args.output, utt2spk=args.utt2spk, n=args.n)
    except (ValueError, OSError) as e:  # OSError: a missing file, a directory given as a file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
