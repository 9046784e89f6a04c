#!/usr/bin/env python3
"""Average the n best epoch model files of an experiment (stage 7).

Usage:
    python -m captionbin.caption_average_checkpoints --exp_dir exp/xe_train_xe_logmel_word \
        --metric cider_d --nbest 5 --output exp/xe_train_xe_logmel_word/valid.cider_d.ave_5best.pth
"""

from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Return the argument parser of caption_average_checkpoints."""
    parser = get_base_parser("Average the weights of the n best epochs")
    parser.add_argument("--exp_dir", required=True, help="experiment dir (history.json, <N>epoch.pth)")
    parser.add_argument("--output", required=True, help="averaged model file")
    parser.add_argument("--metric", default="cider_d", help="validation metric to rank epochs")
    parser.add_argument("--mode", default="max", choices=("max", "min"))
    parser.add_argument("--nbest", type=int, default=5)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_average_checkpoints."""
    args = parse_args(get_parser(), cmd)
    from captionlib.train.average import average_checkpoints

    average_checkpoints(args.exp_dir, args.output, args.metric, args.nbest, args.mode)


if __name__ == "__main__":
    main()
