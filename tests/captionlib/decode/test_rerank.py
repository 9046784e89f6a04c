"""Nucleus (top-p) sampling and MBR re-ranking (captionlib.decode.loop.top_p_filtered,
captionlib.decode.inference)."""

import math
from collections import Counter

import numpy as np
import pytest
import torch

from captionlib.decode.loop import draw_categorical, top_p_filtered
from captionlib.decode.options import check_decode_options
from captionlib.decode.rerank import consensus_cider_d, mbr_select, sequence_logprobs
from captionlib.decode.search import greedy_search, sample
from captionlib.metrics.fluency import fluency_flags
from captionlib.models.captioner import Captioner


def _model(seed=0, vocab=12):
    torch.manual_seed(seed)
    model = Captioner(vocab, encoder_conf={"rnn_units": 8}, decoder_conf={"hidden_size": 16}).eval()
    with torch.no_grad():
        v = model.encode(torch.randn(3, 40, 64), torch.tensor([40, 30, 20]))
    return model, v


def test_top_p_one_is_plain_sampling_and_a_tiny_top_p_the_greedy_caption():
    model, v = _model()
    rows = v.repeat_interleave(4, 0)
    with torch.no_grad():
        torch.manual_seed(3)
        plain = sample(model, rows, 12)
        torch.manual_seed(3)
        nucleus_all = sample(model, rows, 12, top_p=1.0)
        assert torch.equal(plain.tokens, nucleus_all.tokens) and torch.equal(plain.logprobs, nucleus_all.logprobs)
        greedy = greedy_search(model, rows, 12)
        for temperature in (1.0, 2.0):
            torch.manual_seed(3)
            assert torch.equal(sample(model, rows, 12, temperature=temperature, top_p=1e-6).tokens, greedy)
    assert len({tuple(t) for t in plain.tokens.tolist()}) > 1  # an untrained model: the samples differ


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3], [0.25, 0.25, 0.25, 0.25]])
    scores = probs.log()
    keep = lambda p, t=1.0: torch.isfinite(top_p_filtered(scores, t, p))  # noqa: E731
    assert keep(0.75)[0].tolist() == [False, True, False, True]  # 0.5 + 0.3 reach 0.75
    assert keep(0.85)[0].tolist() == [True, True, False, True]
    assert keep(0.999)[0].tolist() == [True, True, True, True]
    assert keep(0.4)[0].tolist() == [False, True, False, False]
    assert keep(0.3)[1].tolist() == [True, True, False, False]  # ties: ranked by id, as argmax
    assert keep(1e-9)[1].tolist() == [True, False, False, False]
    # the nucleus is that of the tempered distribution: at temperature 4 the probabilities flatten
    assert keep(0.75, 4.0)[0].tolist() == [True, True, False, True]
    # draws stay in the nucleus
    torch.manual_seed(0)
    rows = scores[:1].expand(2000, -1)
    drawn = Counter(draw_categorical(top_p_filtered(rows, 1.0, 0.75)).tolist())
    assert set(drawn) == {1, 3} and abs(drawn[1] / 2000 - 0.5 / 0.8) < 0.05


def _reference_cider_d(cand, refs, idf, n=4, sigma=6.0):
    """CIDEr-D of word list ``cand`` against ``refs`` with the given idf of every n-gram, written out."""
    def vec(words, k):
        return Counter(tuple(words[i:i + k]) for i in range(len(words) - k + 1))

    total = 0.0
    for k in range(1, n + 1):
        vc = {g: c * idf for g, c in vec(cand, k).items()}
        per_ref = []
        for ref in refs:
            vr = {g: c * idf for g, c in vec(ref, k).items()}
            norm = math.sqrt(sum(x * x for x in vc.values())) * math.sqrt(sum(x * x for x in vr.values()))
            sim = sum(min(vc[g], vr[g]) * vr[g] for g in vc if g in vr) / norm if norm else 0.0
            delta = max(0, len(cand) - 1) - max(0, len(ref) - 1)
            per_ref.append(sim * math.exp(-delta ** 2 / (2 * sigma ** 2)))
        total += sum(per_ref) / len(refs)
    return 10.0 * total / n


def test_mbr_picks_the_consensus_candidate():
    clip = ["a dog barks loudly", "a cat meows", "a dog barks", "a dog barks at night"]
    other = ["rain falls on the roof", "heavy rain is falling"]
    chosen, scores = mbr_select([clip, other])
    assert chosen[0] == 2  # shares most n-grams with the others (not the first: no tie-break)
    # by hand: two documents, every n-gram of the first clip is in one of them: idf = log 2
    words = [c.split() for c in clip]
    want = [_reference_cider_d(w, [o for j, o in enumerate(words) if j != i], math.log(2)) for i, w in enumerate(words)]
    np.testing.assert_allclose(scores[0], want, rtol=1e-9)
    assert np.argmax(want) == 2
    # a large log-likelihood weight hands the choice to the likeliest candidate
    lm = [[-1.0, -0.2, -3.0, -2.0], [-1.0, -1.0]]
    assert mbr_select([clip, other], lm, lm_weight=100.0)[0] == [1, 0]
    assert mbr_select([clip, other], lm, lm_weight=0.0)[0] == [2, 0]  # weight 0: the lm scores are ignored
    # the fluency penalty: the consensus choice flagged as disfluent gives way to the next best
    flags = fluency_flags([c.split() for c in clip + other])
    assert not flags.any()
    flagged = [[False, False, True, False], [False, False]]
    best_unflagged = int(np.argmax(np.where(flagged[0], -np.inf, scores[0])))
    assert mbr_select([clip, other], flags=flagged, fluency_weight=100.0)[0] == [best_unflagged, 0]
    assert mbr_select([clip, other], flags=flagged, fluency_weight=0.0)[0] == [2, 0]
    assert fluency_flags([["a", "dog", "barks", "and", "a"]]).tolist() == [True]  # an unfinished ending
    # an empty candidate (a sample that ended at once) is never chosen over a non-empty one
    assert mbr_select([["", "a dog barks", "a dog barks"], ["", "rain"]])[0] == [1, 1]
    # one clip is one document: every idf 0, every score 0, the first candidate kept
    chosen, scores = mbr_select([clip])
    assert chosen == [0] and not scores[0].any()
    with pytest.raises(ValueError, match=">= 2 candidates"):
        consensus_cider_d([[["a"]]])


def test_sequence_logprobs_are_those_of_the_sampler():
    model, v = _model(1)
    rows = v.repeat_interleave(5, 0)
    with torch.no_grad():
        torch.manual_seed(0)
        out = sample(model, rows, 60)  # long enough that every row ends by itself (no forced eos)
    assert bool((out.tokens == model.eos_id).any(1).all()) and out.mask.sum(1).max() < 60
    want = (out.logprobs.sum(1) / out.mask.sum(1)).double()
    torch.testing.assert_close(sequence_logprobs(model, rows, out.tokens), want, rtol=1e-5, atol=1e-6)
    # padding columns beyond every row's eos change nothing
    padded = torch.nn.functional.pad(out.tokens, (0, 3))
    torch.testing.assert_close(sequence_logprobs(model, rows, padded), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"sample_top_p": 0}, "sample_top_p must be in (0, 1] (1: all tokens), got 0"),
    ({"sample_top_p": 1.5}, "sample_top_p must be in (0, 1]"),
    ({"sample_top_p": float("nan")}, "sample_top_p must be in (0, 1]"),
    ({"rerank": -1}, "rerank must be >= 0 (0: no re-ranking), got -1"),
    ({"rerank_lm_weight": float("inf")}, "rerank_lm_weight must be a finite number"),
    ({"rerank": "4"}, "rerank must be a number"),
])
def test_check_decode_options_refuses_top_p_and_rerank_out_of_range(kwargs, message):
    with pytest.raises(ValueError) as e:
        check_decode_options(**kwargs)
    assert message in str(e.value)


def test_check_decode_options_takes_the_edges():
    check_decode_options(sample_top_p=1.0, rerank=0, rerank_lm_weight=-2.5)
    check_decode_options(sample_top_p=1e-9, rerank=16)


def test_top_p_traces_into_the_compiled_step():
    """The nucleus filter is part of the one compiled graph of a step (dynamo, fullgraph): the
    compiled loop draws what the eager loop draws."""
    torch._dynamo.reset()
    model, v = _model(2)
    rows = v.repeat_interleave(3, 0)
    with torch.no_grad():
        outs = []
        for mode in ("none", "eager"):
            torch.manual_seed(5)
            outs.append(sample(model, rows, 10, top_p=0.8, top_k=6, temperature=1.2, compile_mode=mode))
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    torch.testing.assert_close(outs[0].logprobs, outs[1].logprobs)
