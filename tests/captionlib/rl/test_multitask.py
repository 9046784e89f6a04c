import csv
import logging
from collections import Counter
from pathlib import Path

import pytest
import torch
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from captionlib.models.encoders import masked_mean
from captionlib.rl.multitask import (
    AUXILIARIES,
    MultiTask,
    attribute_counts,
    attribute_targets,
    attribute_vocabulary,
    pos_tags,
)
from captionlib.rl.policy_gradient import PolicyGradient
from captionlib.text.cleaner import clean_words
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward
from rl_doubles import tiny_captioner as _model

CLOTHO = Path("/work/shared/data/clotho_captions_v2.1/clotho_captions_development.csv")
REFS = {
    "c1": [["a", "dog", "barks"], ["the", "dog", "runs", "fast"], ["dog", "barks", "twice"]],
    "c2": [["rain", "falls"], ["heavy", "rain", "on", "a", "roof"]],
}


def _batch():
    torch.manual_seed(123)
    return ["c1", "c2"], torch.randn(2, 40, 64), torch.tensor([40, 32])


def _objective(model, **kw):
    kw.setdefault("num_samples", 3)
    kw.setdefault("cnn_size", model.encoder.cnn_output_size)
    return MultiTask(WordSetReward(), Tokenizer(TOKENS), REFS, embed_size=model.encoder.output_size, max_len=6, **kw)


def _clotho_refs():
    with open(CLOTHO, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return {row[0]: [clean_words(c) for c in row[1:]] for row in rows}


def _check_ranking(vocab, counts):
    """Counts decrease along ``vocab`` and every candidate left out is not more frequent."""
    freq = [counts[w] for w in vocab]
    assert all(a >= b for a, b in zip(freq, freq[1:]))
    assert max(c for w, c in counts.items() if w not in vocab) <= freq[-1]
    assert vocab[0] == max((c, w) for w, c in counts.items())[1]


@pytest.mark.skipif(not CLOTHO.exists(), reason="Clotho captions not available")
def test_pos_attributes_on_real_clotho_captions():
    refs = _clotho_refs()
    vocab = attribute_vocabulary(refs, 400)
    assert len(vocab) == 400 and len(set(vocab)) == 400
    _check_ranking(vocab, attribute_counts(refs, "pos"))
    # nouns and verbs that scikit-learn's stop-word list drops are admitted ...
    assert {"fire", "call"} <= set(vocab) and {"fire", "call"} <= ENGLISH_STOP_WORDS
    # ... adverbs, prepositions, determiners and auxiliaries are not
    for w in ("loudly", "slowly", "quickly", "softly", "very", "outside", "a", "the", "and", "of", "in", "while"):
        assert w not in vocab
    assert not set(vocab) & AUXILIARIES
    assert vocab[:5] == ["background", "water", "birds", "people", "someone"]
    assert {"chirping", "loud", "heavy", "rain"} <= set(vocab[:50])


def test_pos_tags_in_context():
    # "call" is a verb after a plural noun, a noun after an adjective
    assert pos_tags("birds call in the distance".split()) == ["NNS", "VBP", "IN", "DT", "NN"]
    assert pos_tags("a bird makes a loud call".split()) == ["DT", "NN", "VBZ", "DT", "JJ", "NN"]
    # the same word gets different tags in different contexts (the first is arguably RB too)
    assert pos_tags("the wind blows hard".split())[-1] == "JJ"
    assert pos_tags("a man hits the ground hard".split())[-1] == "RB"
    assert pos_tags(["a", "fire", "alarm", "rings", "loudly"]) == ["DT", "NN", "NN", "VBZ", "RB"]
    assert pos_tags([]) == []


@pytest.mark.skipif(not CLOTHO.exists(), reason="Clotho captions not available")
def test_stopword_attributes_on_real_clotho_captions():
    refs = _clotho_refs()
    vocab = attribute_vocabulary(refs, 400, selection="stopwords")
    assert len(vocab) == 400 and len(set(vocab)) == 400
    assert not set(vocab) & set(ENGLISH_STOP_WORDS)
    counts = Counter(w for caps in refs.values() for cap in caps for w in cap)
    content = {w: c for w, c in counts.items() if w not in ENGLISH_STOP_WORDS and any(ch.isalpha() for ch in w)}
    _check_ranking(vocab, content)
    assert {"water", "birds", "loudly"} <= set(vocab[:50]) and "fire" not in vocab


def test_targets_are_multi_hot_over_all_references(caplog):
    with caplog.at_level(logging.WARNING):
        vocab = attribute_vocabulary(REFS, 400)
    # nouns, verbs, adjectives: dog barks runs rain falls heavy roof (fast, twice are adverbs)
    assert vocab == ["dog", "barks", "rain", "falls", "heavy", "roof", "runs"]
    assert "exceeds the 7 attribute words" in caplog.text
    targets = attribute_targets(REFS, vocab)
    assert [vocab[i] for i in targets["c1"]] == ["dog", "barks", "runs"]
    assert [vocab[i] for i in targets["c2"]] == ["rain", "falls", "heavy", "roof"]
    stop_vocab = attribute_vocabulary(REFS, 400, selection="stopwords")
    assert stop_vocab == ["dog", "barks", "rain", "falls", "fast", "heavy", "roof", "runs", "twice"]
    model = _model()
    obj = _objective(model, num_attributes=4)
    assert obj.attributes == ["dog", "barks", "rain", "falls"]
    y = obj.target(["c2", "c1"], "cpu")
    assert y.tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    with pytest.raises(KeyError, match="c9"):
        obj.target(["c9"], "cpu")
    with pytest.raises(ValueError, match="no attribute word"):
        attribute_vocabulary({"c": [["the", "a", "is"]]}, 5)
    with pytest.raises(ValueError, match="attribute_selection"):
        attribute_vocabulary(REFS, 5, selection="nouns")


def test_missing_tagger_names_the_package(monkeypatch):
    from captionlib.text import pos

    monkeypatch.setattr(pos, "_tagger", pos._tagger.__wrapped__)
    monkeypatch.setattr(pos.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install textblob-aptagger.*attribute_selection='stopwords'"):
        attribute_vocabulary(REFS, 4)
    assert attribute_vocabulary(REFS, 2, selection="stopwords") == ["dog", "barks"]


def test_attribute_head_input_and_errors():
    model = _model()
    assert model.encoder.cnn_output_size == 128  # 128 channels x 1 frequency bin
    assert _objective(model).attr_head.in_features == 128
    assert _objective(model, attribute_input="embedding", cnn_size=None).attr_head.in_features == 256
    with pytest.raises(ValueError, match="cnn_size"):
        _objective(model, cnn_size=None)
    with pytest.raises(ValueError, match="attribute_input"):
        _objective(model, attribute_input="rnn")


def test_time_pooled_cnn_features_share_the_encoder_pass():
    model = _model()
    model.eval()
    feats, lens = torch.randn(3, 40, 64), torch.tensor([40, 25, 13])
    v = model.encode(feats, lens)
    v2, cnn = model.encode(feats, lens, return_cnn=True)
    assert cnn.shape == (3, model.encoder.cnn_output_size)
    assert torch.allclose(v, v2, atol=1e-6)
    # the mean over each clip's valid CNN frames (lengths // 4), padding excluded
    x = (feats - model.feats_mean) / model.feats_std
    x = x * (torch.arange(40)[None, :] < lens[:, None]).unsqueeze(-1)
    frames, out_lens = model.encoder._cnn_frames(x, lens)
    assert out_lens.tolist() == [10, 6, 3]
    assert torch.allclose(cnn, masked_mean(frames, out_lens), atol=1e-6)
    # a clip's features do not depend on its batch-mates' padding
    _, alone = model.encode(feats[2:, :13], lens[2:], return_cnn=True)
    assert torch.allclose(cnn[2:], alone, atol=1e-5)
    # eval-mode chunking (more than EVAL_CHUNK["cpu"] clips) gives the same pairs
    big = torch.randn(10, 24, 64)
    big_lens = torch.tensor([24, 20, 16, 12, 8, 24, 20, 16, 12, 8])
    vb, cb = model.encode(big, big_lens, return_cnn=True)
    _, c1 = model.encode(big[1:2, :20], big_lens[1:2], return_cnn=True)
    assert vb.shape == (10, 256) and cb.shape == (10, 128) and torch.allclose(cb[1:2], c1, atol=1e-5)


def test_attribute_gradient_reaches_the_cnn_directly():
    for attribute_input in ("cnn", "embedding"):
        model = _model()
        obj = _objective(model, alpha=0.0, attribute_input=attribute_input)
        loss, stats = obj(model, _batch())
        loss.backward()
        assert loss.item() == pytest.approx(stats["attr_loss"], rel=1e-6)
        cnn = [p.grad for p in model.encoder.cnn.parameters()]
        assert all(g is not None for g in cnn) and any(torch.count_nonzero(g) > 0 for g in cnn)
        rnn = [p.grad for p in model.encoder.rnn.parameters()]
        # on the CNN features, the attribute gradient skips the BiGRU (seed 004 sec. 3.2)
        assert any(g is not None and torch.count_nonzero(g) > 0 for g in rnn) == (attribute_input == "embedding")
        assert torch.count_nonzero(obj.attr_head.weight.grad) > 0
        # with alpha = 0 the RL term contributes nothing to the decoder
        assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.decoder.parameters())


@pytest.mark.parametrize("baseline", ["greedy", "mean"])
def test_alpha_one_equals_reinforce_plus(baseline):
    out = []
    for make in (
        lambda m: _objective(m, alpha=1.0, baseline=baseline),
        lambda m: PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=3, baseline=baseline, max_len=6),
    ):
        model = _model()
        obj = make(model)
        torch.manual_seed(5)
        loss, stats = obj(model, _batch())
        loss.backward()
        out.append((loss.item(), stats, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (l1, s1, g1), (l2, s2, g2) = out
    assert l1 == pytest.approx(l2, rel=1e-6)
    for key in ("reward", "baseline", "advantage", "entropy"):
        assert s1[key] == pytest.approx(s2[key])
    assert {"attr_loss", "attr_precision_at_5", "attr_f1", "rl_loss"} <= set(s1)
    assert len(g1) == len(g2) and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g1, g2))


def test_a_few_steps_reduce_attr_loss():
    model = _model()
    obj = _objective(model, alpha=0.5)
    opt = torch.optim.Adam(list(model.parameters()) + list(obj.parameters()), lr=0.01)
    batch = _batch()
    losses = []
    for _ in range(6):
        loss, stats = obj(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(stats["attr_loss"])
    assert losses[-1] < 0.5 * losses[0]
    # every attribute of each clip ranks in its top 5: c1 has 3 of the 7, c2 4: (3/5 + 4/5) / 2
    assert stats["attr_precision_at_5"] == pytest.approx(0.7)
