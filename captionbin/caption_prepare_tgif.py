#!/usr/bin/env python3
"""Prepare a Kaldi-style data directory for one split of TGIF (Li et al., CVPR 2016).

Reads ``tgif-v1.0.tsv`` (``<GIF URL><TAB><sentence>`` rows, TGIF-Release ``data/``), the split's
URL list (``data/splits/<split>.txt``) and, with ``--gif_root``, the GIFs the user downloaded,
named as in the URLs (``tumblr_<id>_<size>.gif``, directly in the folder or in ``gifs/``), and
writes ``text utt2spk spk2utt clip2id`` (+ ``video.scp`` and ``missing`` with ``--gif_root``),
sorted LC_ALL=C. ``missing`` lists the GIFs without a file (``<clip-id> <URL> <file name>``);
one summary line counts and names them, and more than ``--max_missing_fraction`` of the split
is an error (exit 1). Clip ids ``tgif-<file name without .gif>``, caption ids ``<clip-id>-<kk>``.
A malformed row or URL, a GIF without a sentence, or an empty or non-GIF file is an error naming
the file and line (or the file); with ``--skip_bad true`` it is logged and left out.

Usage:
    python -m captionbin.caption_prepare_tgif --tsv /data/TGIF-Release/data/tgif-v1.0.tsv \\
        --split_list /data/TGIF-Release/data/splits/train.txt --split train \\
        --gif_root /data/tgif/gifs --output_dir data/train
    python -m captionbin.caption_prepare_tgif --tsv tgif-v1.0.tsv --split_list splits/test.txt \\
        --split test --gif_root gifs --output_dir data/test --max_missing_fraction 0.2 --skip_bad true
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool, str_or_none

REQUIRED = ("tsv", "split_list", "split", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Prepare data/<split> from TGIF's tgif-v1.0.tsv, a split list and downloaded GIFs")
    parser.add_argument("--tsv", default=None, help="(required) tgif-v1.0.tsv: <GIF URL><TAB><sentence> rows")
    parser.add_argument("--split_list", default=None, help="(required) the split's GIF URLs, one a line")
    parser.add_argument("--split", default=None, choices=("train", "val", "test"), help="(required) TGIF split")
    parser.add_argument("--output_dir", default=None, help="(required) data directory to write, e.g. data/train")
    parser.add_argument("--gif_root", type=str_or_none, default=None,
                        help="folder of the GIFs named as in the URLs (or gifs/ under it); writes video.scp, missing")
    parser.add_argument("--max_missing_fraction", type=float, default=0.1,
                        help="fail when more than this fraction (0..1) of the split's GIFs has no file")
    parser.add_argument("--skip_bad", type=str2bool, default=False,
                        help="warn about and skip malformed rows/URLs and empty or non-GIF files instead of failing")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`captionlib.corpora.tgif.prepare_tgif`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.corpora.tgif import prepare_tgif

    try:
        prepare_tgif(tsv=args.tsv, split_list=args.split_list, split=args.split, output_dir=args.output_dir,
                     gif_root=args.gif_root, max_missing_fraction=args.max_missing_fraction,
                     skip_bad=args.skip_bad)
    except (ValueError, OSError) as e:  # TgifPrepError, a ValueError; OSError: a directory given as a file, an
        # output dir that cannot be made
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
