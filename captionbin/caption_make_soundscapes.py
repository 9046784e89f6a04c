#!/usr/bin/env python3
"""Generate a captioned soundscape corpus from an event library, in the Clotho layout.

Stage 0 of ``egs/soundscapes``: mixes 1-3 labelled recordings of an event library over a
quiet background per clip and writes five captions per clip from the mix's annotation
(:mod:`captionlib.soundscapes`). The output (``clotho_captions_<split>.csv``,
``<split>/*.flac``, ``annotations_<split>.jsonl``, the library's licence notices) is
prepared by ``caption_prepare_clotho`` like Clotho. Everything is deterministic from
``--seed``; re-running with the same options does nothing.

Usage:
    python -m captionbin.caption_make_soundscapes --event_root ../../../shared/data/event_library \\
        --output_dir downloads/soundscapes --num_clips development:1500,validation:200,evaluation:300
    # ESC-50 as the library, 5-s clips, more overlap
    python -m captionbin.caption_make_soundscapes --event_root /data/ESC-50-master \\
        --output_dir downloads/esc50_scapes --num_clips development:5000,validation:500,evaluation:1000 \\
        --duration_s 5 --mixer_conf "{overlap_prob: 0.5}"
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, yaml_dict

REQUIRED = ("event_root", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Mix a captioned soundscape corpus (Clotho layout) from an event library")
    parser.add_argument("--event_root", default=None,
                        help="(required) event library: events.csv + audio, or the ESC-50 layout (meta/esc50.csv)")
    parser.add_argument("--output_dir", default=None, help="(required) corpus root to write")
    parser.add_argument("--num_clips", default="development:1500,validation:200,evaluation:300",
                        help="clips per split, <split>:<count>,...")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed")
    parser.add_argument("--duration_s", type=float, default=10.0, help="clip length in seconds")
    parser.add_argument("--sample_rate", type=int, default=16000, help="Hz")
    parser.add_argument("--heldout_fraction", type=float, default=0.2,
                        help="share of a multi-file class's recordings used only in evaluation")
    parser.add_argument("--classes", default="",
                        help="comma-separated labels: mix only these classes (empty: all)")
    parser.add_argument("--mixer_conf", type=yaml_dict, default={},
                        help="other SoundscapeConfig fields (captionlib/soundscapes/mixer.py), e.g. "
                             "\"{overlap_prob: 0.5, repeat_prob: 0.3}\"")
    parser.add_argument("--log_interval", type=int, default=200, help="clips between progress lines")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`make_soundscape_corpus`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.soundscapes.corpus import make_soundscape_corpus, parse_num_clips
    from captionlib.soundscapes.mixer import mixer_config

    try:
        config = mixer_config(args.mixer_conf, duration_s=args.duration_s, sample_rate=args.sample_rate)
        make_soundscape_corpus(
            args.event_root, args.output_dir, parse_num_clips(args.num_clips), seed=args.seed, config=config,
            heldout_fraction=args.heldout_fraction, log_interval=args.log_interval,
            classes=[c for c in args.classes.split(",") if c] or None,
        )
    except (ValueError, FileNotFoundError) as e:
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
