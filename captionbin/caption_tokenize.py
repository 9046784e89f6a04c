#!/usr/bin/env python3
"""Build the token list (word vocabulary or sentencepiece BPE) from train captions only.

Usage:
    python -m captionbin.caption_tokenize --text data/development/text \
        --token_type word --min_count 1 --output_dir data/token_list/word
    python -m captionbin.caption_tokenize --text data/development/text \
        --token_type bpe --nbpe 1000 --output_dir data/token_list/bpe1000
"""

from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Return the argument parser of caption_tokenize."""
    parser = get_base_parser("Build a token list from the captions of a train data dir")
    parser.add_argument("--text", required=True, help="Kaldi text file: <caption-id> <raw caption>")
    parser.add_argument("--token_type", default="word", choices=("word", "bpe"))
    parser.add_argument("--min_count", type=int, default=1, help="word: minimum train count")
    parser.add_argument("--nbpe", type=int, default=1000, help="bpe: number of pieces")
    parser.add_argument("--output_dir", required=True, help="writes tokens.txt (+ bpe.model)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_tokenize."""
    args = parse_args(get_parser(), cmd)
    from captionlib.io.datadir import read_text
    from captionlib.text.tokenizer import build_token_list

    build_token_list(
        read_text(args.text).values(), args.output_dir, args.token_type, args.min_count, args.nbpe
    )


if __name__ == "__main__":
    main()
