#!/usr/bin/env python3
"""Build the token list (word vocabulary or sentencepiece BPE) from train captions only.

Writes ``<output_dir>/tokens.txt`` (and, for BPE, ``bpe.model``/``bpe.vocab``; a word run
removes those of an earlier BPE run in the same directory). A bad ``--text`` (missing, not
UTF-8, a line without a caption, a duplicate id, no caption at all) is one error line
naming the file (and line), exit 1; an ``--nbpe``/``--min_count`` that cannot work with
these captions is one usage error naming the option, exit 2.

Usage:
    python -m captionbin.caption_tokenize --text data/development/text \\
        --token_type word --min_count 1 --output_dir data/token_list/word
    python -m captionbin.caption_tokenize --text data/development/text \\
        --token_type bpe --nbpe 1000 --output_dir data/token_list/bpe1000
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args

REQUIRED = ("text", "output_dir")


def get_parser():
    """Return the argument parser of caption_tokenize."""
    parser = get_base_parser("Build a token list from the captions of a train data dir")
    parser.add_argument("--text", default=None, help="(required) Kaldi text file: <caption-id> <raw caption>")
    parser.add_argument("--token_type", default="word", choices=("word", "bpe"))
    parser.add_argument("--min_count", type=int, default=1, help="word: minimum train count")
    parser.add_argument("--nbpe", type=int, default=1000, help="bpe: number of pieces")
    parser.add_argument("--output_dir", default=None, help="(required) writes tokens.txt (+ bpe.model)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_tokenize."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    from captionlib.io.datadir import read_text
    from captionlib.text.tokenizer import TokenListOptionError, build_token_list

    try:
        captions = read_text(args.text)  # errors name the file and line
    except ValueError as e:
        logging.error("%s", e)
        sys.exit(1)
    except OSError as e:  # missing, a directory, unreadable
        logging.error("--text %s: %s", args.text, e.strerror or e)
        sys.exit(1)
    if not captions:
        logging.error("%s: empty file, no caption to build a token list from", args.text)
        sys.exit(1)
    try:
        build_token_list(captions.values(), args.output_dir, args.token_type, args.min_count, args.nbpe)
    except TokenListOptionError as e:
        parser.error(f"--{e}")  # "--nbpe 3 is too small: ..."
    except ValueError as e:
        logging.error("%s: %s", args.text, e)
        sys.exit(1)
    except OSError as e:
        logging.error("cannot write the token list to --output_dir %s: %s", args.output_dir, e)
        sys.exit(1)


if __name__ == "__main__":
    main()
