#!/usr/bin/env python3
"""Prepare a Kaldi-style data directory for one split of MSVD (Chen & Dolan, ACL 2011).

Reads ``MSR Video Description Corpus.csv`` (English rows only), ``youtube_mapping.txt``
(``<VideoID>_<Start>_<End> vid<N>``, S2VT release) and, with ``--video_root``, the clips
``<video_root>[/YouTubeClips]/<VideoID>_<Start>_<End>.avi``; writes ``text utt2spk spk2utt
clip2id`` (+ ``video.scp`` with absolute paths when ``--video_root`` is given), sorted
LC_ALL=C. The split takes clips in vid-number order: ``--split_sizes 1200,100,670`` (the
standard split) gives vid1-1200 train, vid1201-1300 val, vid1301-1970 test. Clip ids
``msvd-vid<NNNN>`` (``clip2id`` gives the clip name), caption ids ``<clip-id>-<kk>``. A
malformed row (wrong column count, non-integer Start/End, empty description) is an error
naming the CSV file and line, or, with ``--skip_bad true``, a warning and it is left out.

Usage:
    python -m captionbin.caption_prepare_msvd --corpus_csv "/data/msvd/MSR Video Description Corpus.csv" \\
        --mapping /data/msvd/youtube_mapping.txt --split train --video_root /data/msvd/YouTubeClips \\
        --output_dir data/train
    python -m captionbin.caption_prepare_msvd --corpus_csv corpus.csv --mapping youtube_mapping.txt \\
        --split test --split_sizes 5,1,2 --output_dir data/test --skip_bad true
"""

import argparse
import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool, str_or_none

REQUIRED = ("corpus_csv", "mapping", "split", "output_dir")


def split_sizes(value: str) -> str:
    """Check ``train,val,test`` clip counts (``1200,100,670``); return them normalised as a string
    (so that ``--print_config`` output loads back)."""
    parts = str(value).replace(" ", "").split(",")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected three non-negative integers train,val,test, got {value!r}")
    return ",".join(str(int(p)) for p in parts)


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Prepare data/<split> from the MSVD corpus CSV and the S2VT youtube_mapping.txt")
    parser.add_argument("--corpus_csv", default=None, help="(required) MSR Video Description Corpus.csv")
    parser.add_argument("--mapping", default=None,
                        help="(required) youtube_mapping.txt: <VideoID>_<Start>_<End> vid<N>")
    parser.add_argument("--split", default=None, choices=("train", "val", "test"), help="(required) split")
    parser.add_argument("--output_dir", default=None, help="(required) data directory to write, e.g. data/train")
    parser.add_argument("--video_root", type=str_or_none, default=None,
                        help="directory with <clip>.avi (or YouTubeClips/<clip>.avi); writes video.scp (else none)")
    parser.add_argument("--split_sizes", type=split_sizes, default="1200,100,670",
                        help="clips of train,val,test in vid-number order")
    parser.add_argument("--skip_bad", type=str2bool, default=False,
                        help="warn about and skip malformed rows and bad clips instead of failing")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`captionlib.corpora.msvd.prepare_msvd`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.corpora.msvd import prepare_msvd

    try:
        prepare_msvd(corpus_csv=args.corpus_csv, mapping=args.mapping, split=args.split,
                     output_dir=args.output_dir, video_root=args.video_root,
                     split_sizes=[int(n) for n in args.split_sizes.split(",")],
                     skip_bad=args.skip_bad)
    except (ValueError, OSError) as e:  # MsvdPrepError, a ValueError; OSError: a directory given as a file, an
        # output dir that cannot be made
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
