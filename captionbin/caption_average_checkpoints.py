#!/usr/bin/env python3
"""Average the n best epoch model files of an experiment (stage 7).

By default the epochs are ranked by the metric the training kept its epoch files by (its
``best_model_criterion``), and the output is ``<exp_dir>/valid.<metric>.ave_<N>best.pth``.

Usage:
    python -m captionbin.caption_average_checkpoints --exp_dir exp/xe_train_xe_logmel_word --nbest 5
    # -> exp/xe_train_xe_logmel_word/valid.bleu_4.ave_5best.pth for a bleu_4-selected XE run
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Return the argument parser of caption_average_checkpoints."""
    parser = get_base_parser("Average the weights of the n best epochs")
    parser.add_argument("--exp_dir", required=True, help="experiment dir (history.json, <N>epoch.pth)")
    parser.add_argument("--output", default=None,
                        help="averaged model file (default: <exp_dir>/valid.<metric>.ave_<nbest>best.pth)")
    parser.add_argument("--metric", default=None,
                        help="validation metric to rank epochs (default: the exp dir's best_model_criterion, "
                             "by which its epoch files were kept)")
    parser.add_argument("--mode", default=None, choices=("max", "min"),
                        help="which end of the metric is best (default: min for loss, else max)")
    parser.add_argument("--nbest", type=int, default=5)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_average_checkpoints."""
    args = parse_args(get_parser(), cmd)
    from captionlib.train import SELECTION_MODES
    from captionlib.train.average import average_checkpoints, kept_by

    try:
        metric = args.metric or kept_by(args.exp_dir)
        mode = args.mode or SELECTION_MODES.get(metric, "max")
        output = args.output or f"{args.exp_dir}/valid.{metric}.ave_{args.nbest}best.pth"
        average_checkpoints(args.exp_dir, output, metric, args.nbest, mode)
    except (ValueError, OSError) as e:  # OSError: no history.json (a dir not trained yet), a missing epoch file
        logging.error("%s", e)
        sys.exit(1)
    logging.info("wrote %s", output)


if __name__ == "__main__":
    main()
