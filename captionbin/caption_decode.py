#!/usr/bin/env python3
"""Decode clips (feats.scp) with a model file into ``<output_dir>/text`` (stage 8).

Usage:
    python -m captionbin.caption_decode --config conf/decode.yaml \
        --model_file exp/xe_train_xe_logmel_word/valid.cider_d.best.pth \
        --feats_scp dump/logmel/evaluation/feats.scp --output_dir exp/.../decode_x/evaluation --beam_size 3
"""

from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Return the argument parser of caption_decode."""
    parser = get_base_parser("Caption the clips of a feats.scp")
    parser.add_argument("--model_file", required=True, help="model file (.pth) written by training")
    parser.add_argument("--feats_scp", required=True, help="<clip-id> <features> lines")
    parser.add_argument("--output_dir", required=True, help="writes text (<clip-id> <caption>)")
    parser.add_argument("--beam_size", type=int, default=1, help="1 = greedy")
    parser.add_argument("--batch_size", type=int, default=32, help="clips per batch")
    parser.add_argument("--max_len", type=int, default=30, help="max tokens (eos included)")
    parser.add_argument("--length_penalty", type=float, default=0.0, help="beam: score / length**p")
    parser.add_argument("--ngpu", type=int, default=0)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_decode."""
    args = parse_args(get_parser(), cmd)
    from captionlib.decode.inference import decode_feats_scp

    decode_feats_scp(
        args.model_file, args.feats_scp, args.output_dir, args.beam_size, args.batch_size,
        args.max_len, args.length_penalty, args.ngpu,
    )


if __name__ == "__main__":
    main()
