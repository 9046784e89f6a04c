#!/usr/bin/env python3
"""Prepare a Kaldi-style data directory for one split of MSR-VTT (Xu et al., CVPR 2016).

Reads ``train_val_videodatainfo.json`` (splits ``train``, ``validate``) or
``test_videodatainfo.json`` (``test``) and, with ``--video_root``, the videos
``<video_root>/TrainValVideo/videoN.mp4`` / ``<video_root>/TestVideo/videoN.mp4`` (or
``<video_root>/videoN.mp4``); writes ``text utt2spk spk2utt clip2id`` (+ ``video.scp`` with
absolute paths when ``--video_root`` is given), sorted LC_ALL=C. ``--split val`` is the
corpus's ``validate``. Clip ids ``msrvtt-video<NNNNN>`` (``clip2id`` gives ``videoN``),
caption ids ``<clip-id>-<kk>`` in sen_id order. A bad record (missing key, sentence of an
unknown video, caption without words, missing/empty video) is an error naming the JSON
file and record (``videos[i]``/``sentences[i]``), or, with ``--skip_bad true``, a warning
and it is left out.

Usage:
    python -m captionbin.caption_prepare_msrvtt --train_val_json /data/msrvtt/train_val_videodatainfo.json \\
        --test_json /data/msrvtt/test_videodatainfo.json --split train --video_root /data/msrvtt \\
        --output_dir data/train
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool, str_or_none

REQUIRED = ("split", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Prepare data/<split> from the MSR-VTT annotation JSON files")
    parser.add_argument("--train_val_json", type=str_or_none, default=None,
                        help="train_val_videodatainfo.json (required for --split train|val)")
    parser.add_argument("--test_json", type=str_or_none, default=None,
                        help="test_videodatainfo.json (required for --split test)")
    parser.add_argument("--split", default=None, choices=("train", "val", "test"),
                        help="(required) split; val = the corpus's 'validate'")
    parser.add_argument("--output_dir", default=None, help="(required) data directory to write, e.g. data/train")
    parser.add_argument("--video_root", type=str_or_none, default=None,
                        help="directory with TrainValVideo/ and TestVideo/ (or the videoN.mp4 files); "
                             "writes video.scp (else none)")
    parser.add_argument("--skip_bad", type=str2bool, default=False,
                        help="warn about and skip bad records/videos instead of failing")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`captionlib.corpora.msrvtt.prepare_msrvtt`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    needed = "test_json" if args.split == "test" else "train_val_json"
    if getattr(args, needed) is None:
        parser.error(f"--split {args.split} needs --{needed}")
    from captionlib.corpora.msrvtt import prepare_msrvtt

    try:
        prepare_msrvtt(split=args.split, output_dir=args.output_dir, train_val_json=args.train_val_json,
                       test_json=args.test_json, video_root=args.video_root, skip_bad=args.skip_bad)
    except (ValueError, OSError) as e:  # MsrvttPrepError, a ValueError; OSError: a directory given as a file, an
        # output dir that cannot be made
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
