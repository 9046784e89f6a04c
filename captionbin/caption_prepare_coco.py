#!/usr/bin/env python3
"""Prepare a Kaldi-style data directory for one Karpathy split of MS COCO captions.

Reads Karpathy & Fei-Fei's (CVPR 2015) ``dataset_coco.json`` and, with ``--image_root``,
the COCO 2014 images ``<image_root>/<filepath>/<filename>``; writes ``text utt2spk spk2utt
clip2id`` (+ ``image.scp`` with absolute paths when ``--image_root`` is given), sorted
LC_ALL=C. ``--split train`` is Karpathy's train + restval (113,287 images), ``val`` and
``test`` his 5k splits. Clip ids ``coco-<cocoid, 12 digits>`` (``clip2id`` gives the COCO
image id), caption ids ``<clip-id>-<kk>``. A bad record (missing key, caption without
words, missing/empty image) is an error naming ``<json>:images[<i>]``, or, with
``--skip_bad true``, a warning and it is left out.

Usage:
    python -m captionbin.caption_prepare_coco --dataset_json /data/coco/dataset_coco.json \\
        --split train --image_root /data/coco/images --output_dir data/train
    python -m captionbin.caption_prepare_coco --dataset_json /data/coco/dataset_coco.json \\
        --split test --output_dir data/test      # no image.scp: import precomputed features
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool, str_or_none

REQUIRED = ("dataset_json", "split", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Prepare data/<split> from Karpathy's dataset_coco.json (COCO 2014 captions)")
    parser.add_argument("--dataset_json", default=None, help="(required) Karpathy's dataset_coco.json")
    parser.add_argument("--split", default=None, choices=("train", "val", "test"),
                        help="(required) Karpathy split; train = train + restval")
    parser.add_argument("--output_dir", default=None, help="(required) data directory to write, e.g. data/train")
    parser.add_argument("--image_root", type=str_or_none, default=None,
                        help="directory with train2014/ and val2014/; writes image.scp (else none)")
    parser.add_argument("--skip_bad", type=str2bool, default=False,
                        help="warn about and skip bad records/images instead of failing")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`captionlib.corpora.coco.prepare_coco`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.corpora.coco import prepare_coco

    try:
        prepare_coco(dataset_json=args.dataset_json, split=args.split, output_dir=args.output_dir,
                     image_root=args.image_root, skip_bad=args.skip_bad)
    except (ValueError, OSError) as e:  # CocoPrepError, a ValueError; OSError: a directory given as a file, an
        # output dir that cannot be made
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
