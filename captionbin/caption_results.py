#!/usr/bin/env python3
"""Collect every ``score.json`` of an experiment tree into a markdown ``RESULTS.md``.

One row per (model dir, decode tag, test set), found as
``<exp_dir>/**/decode_<tag>/<set>/score.json``; skipped metrics are marked ``skipped``
with their reasons listed under the table. No date or environment is written, so the
output is deterministic.

Usage:
    python -m captionbin.caption_results --exp_dir exp --output RESULTS.md
    python -m captionbin.caption_results --exp_dir egs/mini_clotho/exp --output /tmp/RESULTS.md
"""

from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Build the command-line parser."""
    parser = get_base_parser(description="Write RESULTS.md from the score.json files under an exp dir")
    parser.add_argument("--exp_dir", required=True, help="experiment root to search (e.g. exp)")
    parser.add_argument("--output", required=True, help="markdown file to write (e.g. RESULTS.md)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run the binary; ``cmd`` defaults to ``sys.argv[1:]``."""
    args = parse_args(get_parser(), cmd)
    from captionlib.metrics.results import write_results

    write_results(exp_dir=args.exp_dir, output=args.output)


if __name__ == "__main__":
    main()
