#!/usr/bin/env python3
"""Prepare a Kaldi-style data directory for one split of AudioCaps (Kim et al. 2019).

Reads ``<csv_dir>/<split>.csv`` (official columns ``audiocap_id,youtube_id,start_time,caption``)
and the audio the user downloaded into ``--audio_dir``, named ``<youtube_id>_<start_time>.<ext>``
or ``Y<youtube_id>.<ext>`` (ext: wav, flac, ogg, mp3, m4a; directly in the folder or in its
``<split>/`` subfolder), and writes ``wav.scp text utt2spk spk2utt clip2id aud2name reco2dur``
(sorted, LC_ALL=C) plus ``missing``: the clips without audio, one line each
(``<clip-id> <youtube_id> <start_time> <file names looked for>``). One summary line gives how
many clips are missing; more than ``--max_missing_fraction`` of them is an error (exit 1).
Clip ids are ``audiocaps-<youtube_id>-<start_time>``, caption ids ``<clip-id>-<kk>``.
A malformed row (wrong column count, non-numeric start_time, empty caption, ...) is an error
naming ``<csv>:<line>``, an unreadable or empty audio file one naming the file; with
``--skip_bad true`` both are logged and skipped.

Usage:
    python -m captionbin.caption_prepare_audiocaps \\
        --csv_dir downloads/audiocaps/csv --audio_dir downloads/audiocaps/audio --split train \\
        --output_dir data/train
    python -m captionbin.caption_prepare_audiocaps --csv_dir csv --audio_dir audio --split val \\
        --output_dir data/val --max_missing_fraction 0.2 --skip_bad true
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool

REQUIRED = ("csv_dir", "audio_dir", "split", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Prepare data/<split> from the official AudioCaps CSVs and downloaded audio")
    parser.add_argument("--csv_dir", default=None, help="(required) directory with train.csv, val.csv, test.csv")
    parser.add_argument(
        "--audio_dir", default=None,
        help="(required) audio folder: <youtube_id>_<start_time>.<ext> or Y<youtube_id>.<ext> (or <split>/ under it)",
    )
    parser.add_argument("--split", default=None, choices=("train", "val", "test"), help="(required) AudioCaps split")
    parser.add_argument("--output_dir", default=None, help="(required) data directory to write, e.g. data/train")
    parser.add_argument(
        "--max_missing_fraction", type=float, default=0.1,
        help="fail when more than this fraction (0..1) of the split's clips has no audio file",
    )
    parser.add_argument(
        "--skip_bad", type=str2bool, default=False,
        help="warn about and skip malformed rows and unreadable/empty audio instead of failing",
    )
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`captionlib.corpora.audiocaps.prepare_audiocaps`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.corpora.audiocaps import prepare_audiocaps

    try:
        prepare_audiocaps(
            csv_dir=args.csv_dir, audio_dir=args.audio_dir, split=args.split, output_dir=args.output_dir,
            max_missing_fraction=args.max_missing_fraction, skip_bad=args.skip_bad,
        )
    except (ValueError, OSError) as e:  # AudioCapsPrepError, a ValueError; OSError: a directory given as a file, an
        # output dir that cannot be made
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
