"""BLEU-1..4 and ROUGE-L vs pycocoevalcap on the real Clotho evaluation captions."""

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.bleu.bleu_scorer import BleuScorer
from pycocoevalcap.rouge.rouge import Rouge

from captionlib.metrics.bleu import corpus_bleu, pairwise_bleu, sentence_bleu
from captionlib.metrics.rouge import corpus_rouge_l, lcs_length, sentence_rouge_l
from _metrics_data import as_pycoco, eval_parity_set


def test_corpus_bleu_equals_pycocoevalcap():
    refs, hyps = eval_parity_set()
    ours, per = corpus_bleu(refs, hyps)
    gts, res = as_pycoco(refs, hyps)
    theirs, their_per = Bleu(4).compute_score(gts, res, verbose=0)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    # sentence BLEU = pycocoevalcap's per-image values
    np.testing.assert_allclose(np.array([per[c] for c in gts]).T, np.array(their_per), rtol=0, atol=1e-9)
    c = next(iter(gts))
    np.testing.assert_allclose(sentence_bleu(hyps[c], refs[c]), per[c], rtol=0, atol=1e-12)


def test_corpus_rouge_l_equals_pycocoevalcap():
    refs, hyps = eval_parity_set()
    ours, per = corpus_rouge_l(refs, hyps)
    gts, res = as_pycoco(refs, hyps)
    theirs, their_per = Rouge().compute_score(gts, res)
    assert abs(ours - theirs) < 1e-6
    np.testing.assert_allclose([per[c] for c in gts], their_per, rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    "hyp,refs",
    [
        ([], [["a", "b"]]),
        (["a"], [["a"], ["a", "b", "c"]]),
        (["the", "the", "the"], [["the", "cat"], ["a", "the"]]),
        (["x", "y", "z", "w", "v"], [["x", "y"], ["y", "z", "w", "v", "u", "t"]]),
    ],
)
def test_sentence_edge_cases(hyp, refs):
    scorer = BleuScorer(n=4)
    scorer += (" ".join(hyp), [" ".join(r) for r in refs])
    _, their = scorer.compute_score(option="closest", verbose=0)
    np.testing.assert_allclose(sentence_bleu(hyp, refs), [x[0] for x in their], rtol=0, atol=1e-12)
    their_rouge = Rouge().calc_score([" ".join(hyp)], [" ".join(r) for r in refs])
    assert abs(sentence_rouge_l(hyp, refs) - their_rouge) < 1e-12


def test_pairwise_bleu():
    caps = [["a", "dog", "barks", "loudly"], ["a", "dog", "barks"], ["rain", "falls"], []]
    mat = pairwise_bleu(caps)
    assert mat.shape == (4, 4, 4)
    for i in range(4):
        for j in range(4):
            if caps[j]:
                np.testing.assert_allclose(mat[i, j], sentence_bleu(caps[i], [caps[j]]), atol=1e-15)
    assert mat[0, 0, 3] == pytest.approx(1.0)


def test_lcs():
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4
    assert lcs_length([], ["a"]) == 0
