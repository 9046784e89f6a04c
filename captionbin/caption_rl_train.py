#!/usr/bin/env python3
"""RL fine-tuning of an XE captioner (stage 6): ``--rl_algo scst|reinforce_plus|sle|ac|mc_pg|multitask``.

Usage:
    python -m captionbin.caption_rl_train --rl_algo scst --config conf/train_scst.yaml \
        --init_param exp/xe_train_xe_logmel_word/valid.cider_d.best.pth \
        --train_data_dir dump/logmel/development --valid_data_dir dump/logmel/validation \
        --cider_df exp/stats_logmel/cider_df.npz \
        --output_dir exp/xe_train_xe_logmel_word/scst_train_scst --ngpu 0

Re-running the same command resumes from ``<output_dir>/latest.pth``. The options are the
fields of :class:`captionlib.rl.options.RLOptions`; a bad one, or a combination the objective
cannot train with, exits 2 with one line naming it (``--check_only true``: check and exit).
"""

from typing import Optional, Sequence

from captionlib.rl import check_rl_options
from captionlib.rl.options import RLOptions
from captionlib.utils.cli import add_options, get_base_parser, parse_options, run_refusing_unsafe_files


def get_parser():
    """Return the argument parser of caption_rl_train."""
    parser = get_base_parser("Fine-tune a captioner with reinforcement learning (see captionlib.rl.train)")
    add_options(parser, RLOptions)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_rl_train."""
    opts = parse_options(get_parser(), RLOptions, cmd, check=check_rl_options)
    from captionlib.rl.train import train_rl
    from captionlib.utils.distributed import finish

    run_refusing_unsafe_files(train_rl, opts)
    finish()


if __name__ == "__main__":
    main()
