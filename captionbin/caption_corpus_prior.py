#!/usr/bin/env python3
"""Write the corpus-prior "decode" of a data dir: every clip gets the most frequent training caption.

A reference row of ``RESULTS.md`` (stage 8 with ``--corpus_prior true``): a model that does
not listen. Writes ``<output_dir>/text`` (``<clip-id> <caption>``), scored by stage 9 like
any decode.

Usage:
    python -m captionbin.caption_corpus_prior --train_text data/development/text \\
        --data_dir data/evaluation --output_dir exp/corpus_prior/decode_most_frequent_train_caption/evaluation
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args

REQUIRED = ("train_text", "data_dir", "output_dir")


def get_parser():
    """Build the argument parser."""
    parser = get_base_parser("Give every clip the most frequent training caption (corpus prior)")
    parser.add_argument("--train_text", default=None, help="(required) text of the training set")
    parser.add_argument("--data_dir", default=None, help="(required) data dir whose clips (spk2utt) get the caption")
    parser.add_argument("--output_dir", default=None, help="(required) writes text here")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` (default: ``sys.argv[1:]``) and run :func:`write_prior_decode`."""
    args = parse_args(get_parser(), cmd, REQUIRED)
    from captionlib.decode.prior import write_prior_decode

    try:
        write_prior_decode(args.train_text, args.data_dir, args.output_dir)
    except (ValueError, OSError) as e:  # OSError: a directory given as a file, an output dir that is a file
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
