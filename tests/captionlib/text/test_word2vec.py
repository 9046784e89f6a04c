"""Word2Vec initialisation of the decoder embeddings (seed 000 CRNN-W)."""

import numpy as np
import pytest
import torch

pytest.importorskip("gensim")

from captionbin.caption_train_word2vec import main  # noqa: E402
from captionlib.models.captioner import Captioner  # noqa: E402
from captionlib.text.tokenizer import build_token_list, read_token_list  # noqa: E402
from captionlib.text.word2vec import aligned_vectors, build_word2vec_embedding, train_word2vec  # noqa: E402
from captionlib.train.xe import load_embedding  # noqa: E402

CAPTIONS = [
    "A dog barks loudly in the yard.",
    "The dog is barking, then a car passes.",
    "Birds chirp in the morning while a car passes by.",
    "Rain falls on a metal roof.",
    "Heavy rain falls on the roof and a dog barks.",
] * 4
RARE = "zebra"  # only in the token list's captions, not in the Word2Vec ones below


def _token_list(tmp_path, extra=()):
    return build_token_list(list(CAPTIONS) + list(extra), tmp_path / "tl", "word", 1)


def test_rows_aligned_with_token_list(tmp_path):
    tl = _token_list(tmp_path, extra=[f"a {RARE} walks"])
    tokens = read_token_list(tl)
    out = tmp_path / "w2v.npy"
    vec = build_word2vec_embedding(CAPTIONS, tl, out, vector_size=16, epochs=3, seed=0)
    saved = np.load(out)
    assert saved.dtype == np.float32 and saved.shape == (len(tokens), 16)
    assert np.array_equal(saved, vec)
    # row i is the gensim vector of token i
    model = train_word2vec([c.lower().replace(",", "").replace(".", "").split() for c in CAPTIONS],
                           vector_size=16, epochs=3, seed=0)
    for word in ["dog", "rain", "the", "barks"]:
        assert np.allclose(saved[tokens.index(word)], model.wv[word], atol=1e-6), word
    # special rows: <blank> zeros; <unk>, <sos/eos> and the word Word2Vec never saw: small random
    assert not saved[0].any()
    for tok in ["<unk>", "<sos/eos>", RARE]:
        row = saved[tokens.index(tok)]
        assert row.any() and np.abs(row).max() < 0.1, tok
    # distinct trained words get distinct vectors (a misaligned or constant matrix fails)
    assert not np.allclose(saved[tokens.index("dog")], saved[tokens.index("rain")])


def test_deterministic_for_a_seed(tmp_path):
    tl = _token_list(tmp_path)
    a = build_word2vec_embedding(CAPTIONS, tl, tmp_path / "a.npy", vector_size=8, epochs=2, seed=3)
    b = build_word2vec_embedding(CAPTIONS, tl, tmp_path / "b.npy", vector_size=8, epochs=2, seed=3)
    c = build_word2vec_embedding(CAPTIONS, tl, tmp_path / "c.npy", vector_size=8, epochs=2, seed=4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_aligned_vectors_on_a_plain_mapping():
    class WV(dict):
        vector_size = 2

    vec, rnd = aligned_vectors(WV(b=[1.0, 2.0]), ["<blank>", "<unk>", "b", "c", "<sos/eos>"], oov_std=0.5)
    assert vec[2].tolist() == [1.0, 2.0] and rnd == ["<unk>", "c", "<sos/eos>"]
    assert vec[0].tolist() == [0.0, 0.0]


def test_cli_and_init_embedding(tmp_path):
    tl = _token_list(tmp_path)
    text = tmp_path / "text"
    text.write_text("".join(f"c{i} {c}\n" for i, c in enumerate(CAPTIONS)), encoding="utf-8")
    out = tmp_path / "word2vec.npy"
    main(["--text", str(text), "--token_list", str(tl), "--output", str(out), "--vector_size", "256",
          "--window", "5", "--min_count", "1", "--epochs", "2", "--seed", "0"])
    vec = np.load(out)
    vocab = len(read_token_list(tl))
    assert vec.shape == (vocab, 256)
    # the matrix fits the seed 000 decoder embedding (256 = CRNN output size)
    model = Captioner(vocab)
    load_embedding(model, str(out))
    assert torch.allclose(model.decoder.embed.weight, torch.from_numpy(vec))
    with pytest.raises(SystemExit):
        main(["--text", str(text), "--token_list", str(tl), "--output", str(out), "--min_count", "1000"])
