#!/usr/bin/env python3
"""Prepare a Kaldi-style data directory for one split of Clotho v2.1.

Reads ``<clotho_root>/clotho_captions_<split>.csv`` and ``<clotho_root>/<split>/*``
and writes ``wav.scp text utt2spk spk2utt aud2name reco2dur`` (sorted, LC_ALL=C).
Clip ids are ``clotho-<split>-<NNNNN>`` (1-based CSV data-row index; ``--id_prefix``
replaces ``clotho``); caption ids ``<clip-id>-<k>``. A bad row (wrong column count, empty caption, duplicate file
name, missing/unreadable/empty audio) is an error naming the CSV file and line,
or, with ``--skip_bad true``, a warning and the clip is left out.

Usage:
    python -m captionbin.caption_prepare_clotho \\
        --clotho_root /data/clotho_v2.1 --split development --output_dir data/development
    python -m captionbin.caption_prepare_clotho \\
        --clotho_root /data/clotho_v2.1 --split evaluation --output_dir data/evaluation --skip_bad true
"""

import logging
import os
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool

REQUIRED = ('clotho_root', 'split', 'output_dir')


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Prepare data/<split> from the official Clotho v2.1 layout")
    parser.add_argument(
        "--clotho_root", default=None, help="(required) directory with clotho_captions_<split>.csv and <split>/"
    )
    parser.add_argument(
        "--split", default=None, choices=("development", "validation", "evaluation"), help="(required) Clotho split"
    )
    parser.add_argument("--output_dir", default=None, help="(required) data directory to write, e.g. data/development")
    parser.add_argument(
        "--skip_bad", type=str2bool, default=False, help="warn about and skip bad rows/clips instead of failing"
    )
    parser.add_argument(
        "--id_prefix", default="clotho", help="clip ids are <id_prefix>-<split>-<NNNNN> (e.g. soundscapes)"
    )
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`captionlib.corpora.clotho.prepare_clotho`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.corpora.clotho import ClothoPrepError, prepare_clotho
    from captionlib.utils.fileio import check_writable

    try:
        check_writable(os.path.join(args.output_dir, "text"))
        prepare_clotho(
            clotho_root=args.clotho_root, split=args.split, output_dir=args.output_dir, skip_bad=args.skip_bad,
            id_prefix=args.id_prefix,
        )
    except (ClothoPrepError, ValueError, OSError) as e:  # OSError: a directory given as a CSV file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
