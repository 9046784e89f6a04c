#!/usr/bin/env python3
"""Plot the training curves of experiment dirs, seeds merged, into one PNG.

Left: the training objective per epoch (``train_loss`` of XE dirs, ``train_reward`` of RL
dirs); right: validation CIDEr-D per epoch. Dirs that differ only by their ``_seed<N>``
tokens form one line (mean over the seeds) with a min-max band. See
:mod:`captionlib.report.plot`.

Usage:
    python -m captionbin.caption_plot_history \\
        --exp_dir exp/xe_train_xe_small_logmel_word_seed0 --exp_dir exp/xe_train_xe_small_logmel_word_seed1 \\
        --exp_dir exp/xe_train_xe_small_logmel_word_seed0/scst_train_scst_small_seed0 \\
        --output curves.png --title "soundscapes"
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Build the command-line parser."""
    parser = get_base_parser(description="Plot train objective and valid CIDEr-D of exp dirs (seeds merged)")
    parser.add_argument("--exp_dir", action="append", default=None,
                        help="experiment dir with a history.json; repeat for several dirs")
    parser.add_argument("--output", default=None, help="PNG file to write (e.g. curves.png)")
    parser.add_argument("--title", default=None, help="figure title")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run the binary; ``cmd`` defaults to ``sys.argv[1:]``. Bad input exits 1 naming the file."""
    args = parse_args(get_parser(), cmd, required=("exp_dir", "output"))
    from captionlib.report.plot import plot_history

    try:
        plot_history(args.exp_dir, args.output, title=args.title)
    except (ValueError, FileNotFoundError) as e:
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
