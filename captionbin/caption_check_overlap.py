#!/usr/bin/env python3
"""Warn about evaluation clips that are also training clips (recipe stage 1).

For each ``--eval_dirs`` data dir, the clips that are clips of ``--train_dir``: by the same
clip id, by the same media file under another id, and (unless ``--content false``) by the
same bytes in another file (:mod:`captionlib.io.overlap`). Each finding is a logged warning
naming the count and one example; the stage goes on (the scores of those clips are of data
the models were trained on). ``--strict true`` makes a finding an error (exit 1).

Usage:
    python -m captionbin.caption_check_overlap --train_dir data/development \\
        --eval_dirs data/validation data/evaluation
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool

REQUIRED = ("train_dir", "eval_dirs")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Warn about evaluation clips that are also training clips")
    parser.add_argument("--train_dir", default=None, help="(required) training data dir, e.g. data/development")
    parser.add_argument("--eval_dirs", nargs="+", default=None,
                        help="(required) data dirs scored after training, e.g. data/validation data/evaluation")
    parser.add_argument("--content", type=str2bool, default=True,
                        help="also compare the bytes of different media files (reads files of equal size)")
    parser.add_argument("--strict", type=str2bool, default=False, help="a clip in both sets is an error (exit 1)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.io.overlap.find_overlap` per eval dir."""
    args = parse_args(get_parser(), cmd, REQUIRED)
    from captionlib.io.datadir import read_spk2utt
    from captionlib.io.overlap import describe_overlap, find_overlap

    found = False
    try:
        for d in args.eval_dirs:
            overlap = find_overlap(args.train_dir, d, content=args.content)
            for line in describe_overlap(overlap, args.train_dir, d, len(read_spk2utt(f"{d}/spk2utt"))):
                logging.warning("%s", line)
                found = True
    except (ValueError, OSError) as e:  # a parse error, a missing spk2utt
        logging.error("%s", e)
        sys.exit(1)
    if found and args.strict:
        logging.error("--strict: evaluation clips are training clips (above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
