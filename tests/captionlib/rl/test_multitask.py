import csv
import logging
from collections import Counter
from pathlib import Path

import pytest
import torch
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from captionlib.rl.multitask import MultiTask, attribute_targets, attribute_vocabulary
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
    return MultiTask(WordSetReward(), Tokenizer(TOKENS), REFS, embed_size=model.encoder.output_size, max_len=6, **kw)


@pytest.mark.skipif(not CLOTHO.exists(), reason="Clotho captions not available")
def test_attribute_vocabulary_on_real_clotho_captions():
    with open(CLOTHO, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    refs = {row[0]: [clean_words(c) for c in row[1:]] for row in rows}
    vocab = attribute_vocabulary(refs, 400)
    assert len(vocab) == 400 and len(set(vocab)) == 400
    assert not set(vocab) & set(ENGLISH_STOP_WORDS)
    for w in ("a", "the", "is", "and", "of", "in", "while"):
        assert w not in vocab
    counts = Counter(w for caps in refs.values() for cap in caps for w in cap)
    freq = [counts[w] for w in vocab]
    assert all(a >= b for a, b in zip(freq, freq[1:]))
    # nothing more frequent was left out: every content word outside the list is rarer
    content = {w: c for w, c in counts.items() if w not in ENGLISH_STOP_WORDS and any(ch.isalpha() for ch in w)}
    rest = [c for w, c in content.items() if w not in vocab]
    assert max(rest) <= freq[-1]
    assert vocab[0] == max((c, w) for w, c in counts.items() if w not in ENGLISH_STOP_WORDS)[1]
    assert {"water", "birds"} <= set(vocab[:50])


def test_targets_are_multi_hot_over_all_references(caplog):
    with caplog.at_level(logging.WARNING):
        vocab = attribute_vocabulary(REFS, 400)
    # content words: dog barks runs fast twice rain falls heavy roof (a, the, on are stop words)
    assert vocab[:3] == ["dog", "barks", "rain"] and len(vocab) == 9
    assert "exceeds the 9 content words" in caplog.text
    targets = attribute_targets(REFS, vocab)
    assert [vocab[i] for i in targets["c1"]] == ["dog", "barks", "fast", "runs", "twice"]
    assert [vocab[i] for i in targets["c2"]] == ["rain", "falls", "heavy", "roof"]
    model = _model()
    obj = _objective(model, num_attributes=4)
    assert obj.attributes == ["dog", "barks", "rain", "falls"]
    y = obj.target(["c2", "c1"], "cpu")
    assert y.tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    with pytest.raises(KeyError, match="c9"):
        obj.target(["c9"], "cpu")
    with pytest.raises(ValueError):
        attribute_vocabulary({"c": [["the", "a"]]}, 5)


def test_attribute_gradient_reaches_the_encoder():
    model = _model()
    obj = _objective(model, alpha=0.0)
    loss, stats = obj(model, _batch())
    loss.backward()
    assert loss.item() == pytest.approx(stats["attr_loss"], rel=1e-6)
    enc = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert enc and any(torch.count_nonzero(g) > 0 for g in enc)
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
    assert stats["attr_precision_at_5"] >= 0.8  # c1 has 5 attributes, c2 4 of the 9
