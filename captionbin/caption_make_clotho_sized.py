#!/usr/bin/env python3
"""Generate a benchmark corpus of Clotho v2.1's size: real captions, audio mixed from an event library.

Clotho v2.1's split sizes (3839 / 1045 / 1045 clips, times ``--scale``), clips of 15-30 s
(uniform), the official captions in order, and soundscapes of the event library as audio
(44.1 kHz 16-bit mono WAV), in the official Clotho layout that ``egs/clotho`` reads
(``--clotho_root``). The captions do NOT describe the audio: the corpus measures the speed
of a pipeline, not learning (:mod:`captionlib.soundscapes.clotho_sized`). Deterministic from
``--seed``; a re-run skips the clips already written.

Usage:
    python -m captionbin.caption_make_clotho_sized --event_root ../shared/data/event_library \\
        --captions_dir ../shared/data/clotho_captions_v2.1 --output_dir /data/clotho_sized --nj 2
    # a 1 % corpus (38 / 10 / 10 clips) of 2-4 s clips, for a quick check
    python -m captionbin.caption_make_clotho_sized --event_root ../shared/data/event_library \\
        --captions_dir ../shared/data/clotho_captions_v2.1 --output_dir /tmp/clotho_tiny \\
        --scale 0.01 --min_duration_s 2 --max_duration_s 4
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args

REQUIRED = ("event_root", "captions_dir", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Make a Clotho-sized benchmark corpus (real captions, mixed audio; Clotho layout)")
    parser.add_argument("--event_root", default=None,
                        help="(required) event library: events.csv + audio, or the ESC-50 layout (meta/esc50.csv)")
    parser.add_argument("--captions_dir", default=None,
                        help="(required) the official clotho_captions_<split>.csv and LICENSE_clotho_captions.txt")
    parser.add_argument("--output_dir", default=None, help="(required) corpus root to write")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of each split's Clotho v2.1 clip count, in (0, 1] (1: full size)")
    parser.add_argument("--min_duration_s", type=float, default=15.0, help="shortest clip (s)")
    parser.add_argument("--max_duration_s", type=float, default=30.0, help="longest clip (s)")
    parser.add_argument("--sample_rate", type=int, default=44100, help="Hz of the WAVs")
    parser.add_argument("--heldout_fraction", type=float, default=0.2,
                        help="share of a multi-file class's recordings used only in evaluation")
    parser.add_argument("--nj", type=int, default=1, help="worker processes")
    parser.add_argument("--log_interval", type=int, default=200, help="clips between progress lines")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`make_clotho_sized_corpus`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.soundscapes.clotho_sized import ClothoSizedOptions, make_clotho_sized_corpus

    options = ClothoSizedOptions(seed=args.seed, scale=args.scale, min_duration_s=args.min_duration_s,
                                 max_duration_s=args.max_duration_s, sample_rate=args.sample_rate,
                                 heldout_fraction=args.heldout_fraction)
    try:  # bad options exit 2 before anything is read or written
        options.check()
    except ValueError as e:
        parser.error(str(e))
    try:
        make_clotho_sized_corpus(args.event_root, args.captions_dir, args.output_dir, options, nj=args.nj,
                                 log_interval=args.log_interval)
    except (ValueError, FileNotFoundError) as e:
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
