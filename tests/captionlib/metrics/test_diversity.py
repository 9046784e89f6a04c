"""Set-level diversity metrics (seed 001)."""

import numpy as np
import pytest

from captionlib.metrics.bleu import sentence_bleu
from captionlib.metrics.diversity import div_n, diversity_metrics, mbleu


def test_div_n():
    caps = [["a", "dog", "barks"], ["a", "dog", "runs"]]
    assert div_n(caps, 1) == pytest.approx(4 / 6)  # a dog barks runs
    assert div_n(caps, 2) == pytest.approx(3 / 6)  # (a dog) (dog barks) (dog runs)
    assert div_n([[]], 1) == 0.0


def test_mbleu_identical_and_distinct():
    same = [["a", "dog", "barks", "loudly"]] * 5
    assert mbleu(same) == pytest.approx(1.0)
    caps = [
        ["a", "dog", "barks", "loudly", "now"],
        ["rain", "falls", "on", "the", "roof"],
        ["a", "dog", "barks", "softly"],
    ]
    want = np.mean([sentence_bleu(caps[i], [c for j, c in enumerate(caps) if j != i])[3] for i in range(3)])
    assert mbleu(caps) == pytest.approx(want)
    with pytest.raises(ValueError):
        mbleu(caps[:1])


def test_diversity_metrics():
    gen = {"a": [["a", "dog", "barks"], ["a", "dog", "barks"]], "b": [["rain", "falls"], ["heavy", "rain"]]}
    train = [["a", "dog", "barks"], ["something", "else"]]
    out = diversity_metrics(gen, train)
    assert out["Div-1"] == pytest.approx(np.mean([3 / 6, 3 / 4]))
    assert out["Div-2"] == pytest.approx(np.mean([2 / 6, 2 / 4]))
    assert out["vocab_size"] == 6
    assert out["novel"] == pytest.approx(0.5)
    # 3-word captions have no 4-gram: pycocoevalcap's smoothing gives (1e-15/1e-9)^(1/4)
    assert mbleu(gen["a"]) == pytest.approx(1e-6 ** 0.25, rel=1e-6)
    assert out["mBLEU-4"] == pytest.approx(np.mean([mbleu(gen["a"]), mbleu(gen["b"])]))
    assert "novel" not in diversity_metrics(gen)
