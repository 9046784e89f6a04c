"""Word2Vec vectors for the decoder's word embeddings (seed 000 sec. 3.4, "CRNN-W").

Seed 000 initialises the decoder word embeddings of CRNN-W "from Word2Vec word-embeddings
trained on the development set captions" (Mikolov et al., 2013). We train gensim's
:class:`gensim.models.Word2Vec` (CBOW by default, ``sg=1`` for skip-gram) on the *train*
captions tokenized exactly as the model sees them
(:meth:`captionlib.text.tokenizer.Tokenizer.text2tokens`: cleaned, then words or BPE
pieces), and write a float32 matrix of shape (vocab_size, vector_size) whose row i is the
vector of token i of ``tokens.txt``, ready for ``caption_train --init_embedding``.

Rows without a trained vector:

* ``<blank>`` (id 0, padding): zeros, as ``nn.Embedding(padding_idx=0)`` initialises it;
* ``<unk>``, ``<sos/eos>`` and any token gensim did not keep (e.g. below its ``min_count``):
  small random normal values N(0, ``oov_std``^2) drawn from ``numpy.random.default_rng(seed)``
  in token-id order, so the file is reproducible.

Training is deterministic for a given seed: one worker thread and a hash function that does
not depend on ``PYTHONHASHSEED``.
"""

import logging
import zlib
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple, Union

import numpy as np

from captionlib.text.tokenizer import BLANK, load_tokenizer


def _stable_hash(text: str) -> int:
    """crc32 of the UTF-8 text: gensim's seeding hash, independent of PYTHONHASHSEED."""
    return zlib.crc32(text.encode("utf-8"))


def train_word2vec(
    sentences: Sequence[Sequence[str]],
    vector_size: int = 256,
    window: int = 5,
    min_count: int = 1,
    epochs: int = 5,
    sg: int = 0,
    seed: int = 0,
):
    """Train gensim Word2Vec on tokenized sentences (one worker: deterministic).

    Args:
        sentences: token lists (e.g. cleaned train captions split into words).
        vector_size: dimension of the vectors (the decoder embedding size, 256 in seed 000).
        window: context window (tokens each side); min_count: minimum count to get a vector.
        epochs: passes over the corpus; sg: 0 = CBOW, 1 = skip-gram; seed: gensim's seed.

    Returns:
        The trained ``gensim.models.Word2Vec``.

    Raises:
        ValueError: if no sentence has a token, or no token reaches ``min_count``.
        ImportError: if gensim is not installed (``pip install captionlib[w2v]``).
    """
    try:  # gensim is an optional extra, and slow to import (~1 s)
        from gensim.models import Word2Vec
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("Word2Vec needs gensim: pip install 'gensim>=4' (extra 'w2v')") from e
    sentences = [list(s) for s in sentences if len(s) > 0]
    if not sentences:
        raise ValueError("no non-empty sentence to train Word2Vec on")
    model = Word2Vec(
        vector_size=vector_size, window=window, min_count=min_count, sg=sg, seed=seed,
        workers=1, hashfxn=_stable_hash,
    )
    model.build_vocab(sentences)
    if len(model.wv) == 0:
        raise ValueError(f"no token occurs at least min_count={min_count} times")
    model.train(sentences, total_examples=len(sentences), epochs=epochs)
    return model


def aligned_vectors(
    wv, token_list: Sequence[str], seed: int = 0, oov_std: float = 0.01
) -> Tuple[np.ndarray, List[str]]:
    """Rows of ``wv`` in token-list order; see the module docstring for the other rows.

    Args:
        wv: gensim ``KeyedVectors`` (``model.wv``), or any mapping token -> vector with ``in``.
        token_list: the tokens (index = id).
        seed: seed of the random rows; oov_std: their standard deviation.

    Returns:
        (vectors float32 (len(token_list), vector_size), tokens that got a random row).
    """
    size = int(wv.vector_size)
    rng = np.random.default_rng(seed)
    out = np.zeros((len(token_list), size), dtype=np.float32)
    random_rows: List[str] = []
    for i, tok in enumerate(token_list):
        if tok == BLANK:
            continue
        if tok in wv:
            out[i] = np.asarray(wv[tok], dtype=np.float32)
        else:
            out[i] = rng.normal(0.0, oov_std, size).astype(np.float32)
            random_rows.append(tok)
    return out, random_rows


def build_word2vec_embedding(
    captions: Iterable[str],
    token_list: Union[str, Path],
    output: Union[str, Path],
    vector_size: int = 256,
    window: int = 5,
    min_count: int = 1,
    epochs: int = 5,
    sg: int = 0,
    seed: int = 0,
    oov_std: float = 0.01,
) -> np.ndarray:
    """Train Word2Vec on raw train captions and save the token-aligned matrix as ``.npy``.

    Args:
        captions: raw train captions (cleaned and tokenized by the token list's tokenizer).
        token_list: ``tokens.txt`` (a ``bpe.model`` beside it makes the vectors BPE pieces).
        output: ``.npy`` path (e.g. ``data/token_list/word/word2vec.npy``), written atomically.
        vector_size, window, min_count, epochs, sg, seed: see :func:`train_word2vec`.
        oov_std: std of the random rows (see module docstring).

    Returns:
        The saved float32 array (vocab_size, vector_size).
    """
    tokenizer = load_tokenizer(token_list)
    sentences = [tokenizer.text2tokens(c) for c in captions]
    model = train_word2vec(sentences, vector_size, window, min_count, epochs, sg, seed)
    vectors, random_rows = aligned_vectors(model.wv, tokenizer.token_list, seed=seed, oov_std=oov_std)
    logging.info(
        "Word2Vec (%s, %d-d, %d epochs) on %d captions: %d/%d tokens have a trained vector; random rows: %s",
        "skip-gram" if sg else "CBOW", vector_size, epochs, len(sentences),
        len(tokenizer.token_list) - 1 - len(random_rows), len(tokenizer.token_list),
        ", ".join(random_rows[:10]) + (" ..." if len(random_rows) > 10 else ""),
    )
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(output)
    return vectors
