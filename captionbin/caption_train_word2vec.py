#!/usr/bin/env python3
"""Train Word2Vec on the train captions; write vectors aligned with tokens.txt (stage 3, seed 000 CRNN-W).

The output ``.npy`` is float32 (vocab_size, vector_size), row i = token i of ``--token_list``
(``<blank>`` zeros; ``<unk>``, ``<sos/eos>`` and tokens gensim skipped: N(0, oov_std^2),
seeded), for ``caption_train --init_embedding``. ``--vector_size`` must equal the decoder's
embedding size (the encoder output size, 256 for the seed 000 CRNN).

Usage:
    python -m captionbin.caption_train_word2vec --text data/development/text \
        --token_list data/token_list/word/tokens.txt --output data/token_list/word/word2vec.npy \
        --vector_size 256 --window 5 --min_count 1 --epochs 10 --seed 0
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args


def get_parser():
    """Return the argument parser of caption_train_word2vec."""
    parser = get_base_parser("Word2Vec vectors of the train captions, aligned with a token list")
    parser.add_argument("--text", required=True, help="Kaldi text file of the train set: <caption-id> <raw caption>")
    parser.add_argument("--token_list", required=True, help="tokens.txt (bpe.model beside it: BPE pieces)")
    parser.add_argument("--output", required=True, help=".npy file to write (vocab_size, vector_size) float32")
    parser.add_argument("--vector_size", type=int, default=256, help="= decoder embedding size")
    parser.add_argument("--window", type=int, default=5, help="context tokens each side")
    parser.add_argument("--min_count", type=int, default=1, help="minimum count for a trained vector")
    parser.add_argument("--epochs", type=int, default=10, help="passes over the captions")
    parser.add_argument("--sg", type=int, default=0, choices=(0, 1), help="0 = CBOW, 1 = skip-gram")
    parser.add_argument("--oov_std", type=float, default=0.01, help="std of the random rows")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_train_word2vec."""
    args = parse_args(get_parser(), cmd)
    from captionlib.io.datadir import read_text
    from captionlib.text.word2vec import build_word2vec_embedding

    try:
        build_word2vec_embedding(
            read_text(args.text).values(), args.token_list, args.output, vector_size=args.vector_size,
            window=args.window, min_count=args.min_count, epochs=args.epochs, sg=args.sg,
            seed=args.seed, oov_std=args.oov_std,
        )
    except (ValueError, ImportError) as e:
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
