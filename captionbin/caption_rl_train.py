#!/usr/bin/env python3
"""RL fine-tuning of an XE captioner (stage 6): ``--rl_algo scst|reinforce_plus|sle|ac|mc_pg|multitask``.

Usage:
    python -m captionbin.caption_rl_train --rl_algo scst --config conf/train_scst.yaml \
        --init_param exp/xe_train_xe_logmel_word/valid.cider_d.best.pth \
        --train_data_dir dump/logmel/development --valid_data_dir dump/logmel/validation \
        --cider_df exp/stats_logmel/cider_df.npz \
        --output_dir exp/xe_train_xe_logmel_word/scst_train_scst --ngpu 0

Re-running the same command resumes from ``<output_dir>/latest.pth``. The options are the
fields of :class:`captionlib.rl.options.RLOptions`, shared by every objective; an objective's
own options are the keys of ``--rl_conf`` (``--rl_algo sle --rl_conf num_samples=5``;
``--rl_algo sle --help`` lists them). A bad one, or a combination the objective cannot train
with, exits 2 with one line naming it (``--check_only true``: check and exit).
"""

import sys
from typing import Optional, Sequence

from captionlib.rl import RL_OBJECTIVES, check_rl_options, objective_class
from captionlib.rl.options import MOVED_TO_RL_CONF, RLOptions
from captionlib.utils.cli import add_options, get_base_parser, options_help, parse_options, run_refusing_unsafe_files


def _help_algo(cmd: Sequence[str]) -> Optional[str]:
    """The ``--rl_algo`` of a ``--help`` command line (its last), ``None`` without one."""
    if "--help" not in cmd and "-h" not in cmd:
        return None
    algo = None
    for i, word in enumerate(cmd):
        if word == "--rl_algo" and i + 1 < len(cmd):
            algo = cmd[i + 1]
        elif word.startswith("--rl_algo="):
            algo = word.split("=", 1)[1]
    return algo if algo in RL_OBJECTIVES else None


def get_parser(cmd: Optional[Sequence[str]] = None):
    """Return the argument parser of caption_rl_train; for a ``--help`` command line with
    ``--rl_algo X``, its help ends with X's ``rl_conf`` keys (this imports X's class, and torch)."""
    parser = get_base_parser("Fine-tune a captioner with reinforcement learning (see captionlib.rl.train)")
    add_options(parser, RLOptions)
    parser.moved_keys = MOVED_TO_RL_CONF
    algo = _help_algo(list(sys.argv[1:] if cmd is None else cmd))
    if algo is None:
        parser.epilog = "--rl_algo X --help: also the keys of X's --rl_conf block"
    else:
        cls = objective_class(algo)
        parser.epilog = options_help(cls.Conf, f"--rl_conf keys of --rl_algo {algo} ({cls.paper})")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_rl_train."""
    opts = parse_options(get_parser(cmd), RLOptions, cmd, check=check_rl_options)
    from captionlib.rl.train import train_rl
    from captionlib.utils.distributed import finish

    run_refusing_unsafe_files(train_rl, opts)
    finish()


if __name__ == "__main__":
    main()
