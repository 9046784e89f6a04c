#!/usr/bin/env python3
"""Collect every ``score.json`` of an experiment tree into a markdown ``RESULTS.md``.

One row per (model dir, decode tag, test set), found as
``<exp_dir>/**/decode_<tag>/<set>/score.json``; the runs of several training seeds
(``_seed<N>`` in the dir names) share one row of ``mean ± std``, with a ``seeds`` count
and the ``paper`` each model comes from. Skipped metrics are marked ``skipped`` with their
reasons listed under the table. Below it, each RL model nested in an XE dir is compared
with that XE model by a paired bootstrap on per-clip CIDEr-D (``per_clip.json``, Koehn
2004; 10000 resamples, seed 0), and the environments that trained the models are listed (code
revision, torch, Python, device: each model dir's ``env.yaml``). No date or host is written, so
the output is deterministic.

Usage:
    python -m captionbin.caption_results --exp_dir exp --output RESULTS.md
    python -m captionbin.caption_results --exp_dir egs/mini_clotho/exp --output /tmp/RESULTS.md
    python -m captionbin.caption_results --exp_dir exp --output RESULTS.md \
        --compare xe_train_xe_cnn10_logmel_word=xe_train_xe_cnn10_pretrained_logmel_word
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Build the command-line parser."""
    parser = get_base_parser(description="Write RESULTS.md from the score.json files under an exp dir")
    parser.add_argument("--exp_dir", required=True, help="experiment root to search (e.g. exp)")
    parser.add_argument("--output", required=True, help="markdown file to write (e.g. RESULTS.md)")
    parser.add_argument("--command", default=None,
                        help="the command that made the experiments, written under the title")
    parser.add_argument("--compare", action="append", default=[],
                        help="<baseline>=<model>: also compare two models of the table (seed-group names) by the "
                             "paired bootstrap, seed by seed, in the same decode, or in the decodes named by "
                             "<name>@<decode> (the decode column) on either side (repeatable; a pair without runs is "
                             "logged and left out)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run the binary; ``cmd`` defaults to ``sys.argv[1:]``. Bad input exits 1 naming the file."""
    args = parse_args(get_parser(), cmd)
    from captionlib.report.results import parse_compare, write_results
    from captionlib.utils.fileio import check_writable

    try:
        check_writable(args.output)
        write_results(exp_dir=args.exp_dir, output=args.output, command=args.command,
                      compare=[parse_compare(c) for c in args.compare])
    except (ValueError, OSError) as e:  # OSError: a missing file, a directory given as a file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
