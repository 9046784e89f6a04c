"""Word-level ensemble (seed 000 CRNN-E): log of the mean of the models' word probabilities."""

import math

import pytest
import torch

from captionlib.decode.ensemble import Ensemble, load_ensemble
from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.models.captioner import Captioner, model_file_dict

V = 12
TOKENS = ["<blank>", "<unk>"] + [f"w{i}" for i in range(V - 3)] + ["<sos/eos>"]


def _model(seed, hidden=16, rnn_units=8):
    torch.manual_seed(seed)
    return Captioner(V, n_mels=64, encoder_conf={"rnn_units": rnn_units}, decoder_conf={"hidden_size": hidden}).eval()


def _feats(batch=3):
    g = torch.Generator().manual_seed(123)
    return torch.randn(batch, 40, 64, generator=g), torch.tensor([40, 25, 33][:batch])


@torch.no_grad()
def test_ensemble_of_one_equals_the_model():
    m = _model(0)
    ens = Ensemble([m], token_lists=[TOKENS]).eval()
    feats, lens = _feats()
    v, ve = m.encode(feats, lens), ens.encode(feats, lens)
    assert torch.equal(v, ve)
    lp, st = m.first_step(v)
    lpe, ste = ens.first_step(ve)
    assert torch.equal(lp, lpe)
    tok = lp.argmax(-1)
    assert torch.equal(m.step(tok, st)[0], ens.step(tok, ste)[0])
    assert torch.equal(greedy_search(m, v, 8), greedy_search(ens, ve, 8))
    assert torch.equal(beam_search(m, v, 3, 8), beam_search(ens, ve, 3, 8))
    torch.manual_seed(5)
    s1 = sample(m, v, 8).tokens
    torch.manual_seed(5)
    s2 = sample(ens, ve, 8).tokens
    assert torch.equal(s1, s2)


@torch.no_grad()
def test_two_models_average_probabilities_at_each_step():
    # different architectures (embedding sizes 16 and 24) share the vocabulary
    a, b = _model(0, rnn_units=8), _model(1, hidden=20, rnn_units=12)
    ens = Ensemble([a, b], token_lists=[TOKENS, TOKENS])
    feats, lens = _feats()
    v = ens.encode(feats, lens)
    assert v.shape == (3, 16 + 24)
    va, vb = a.encode(feats, lens), b.encode(feats, lens)
    assert torch.equal(v[:, :16], va) and torch.equal(v[:, 16:], vb)

    lp, state = ens.first_step(v)
    (la, sa), (lb, sb) = a.first_step(va), b.first_step(vb)
    manual = torch.log((la.exp() + lb.exp()) / 2)
    assert torch.allclose(lp, manual, atol=1e-6)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3), atol=1e-5)  # a distribution
    assert torch.all(lp[:, 0] == float("-inf"))  # padding never emitted
    # the average differs from either model (the test can fail if combine() picks one)
    assert not torch.allclose(lp, la) and not torch.allclose(lp, lb)

    tok = torch.tensor([3, 5, V - 2])
    lp2, state2 = ens.step(tok, state)
    (la2, _), (lb2, _) = a.step(tok, sa), b.step(tok, sb)
    # one entry by hand: p = (p_a + p_b) / 2
    w = 4
    expected = math.log((math.exp(la2[1, w].item()) + math.exp(lb2[1, w].item())) / 2)
    assert lp2[1, w].item() == pytest.approx(expected, abs=1e-6)
    assert torch.allclose(lp2, torch.logaddexp(la2, lb2) - math.log(2), atol=1e-6)

    # reorder_state reorders every model's state
    idx = torch.tensor([2, 2, 0])
    r = ens.reorder_state(state2, idx)
    assert torch.equal(r[0], state2[0][:, idx]) and torch.equal(r[1], state2[1][:, idx])


@torch.no_grad()
def test_greedy_and_beam_on_ensemble_follow_the_mean():
    a, b = _model(0), _model(3)
    ens = Ensemble([a, b])
    feats, lens = _feats()
    v = ens.encode(feats, lens)
    g = greedy_search(ens, v, max_len=6)
    # replay the greedy path with the two models by hand
    va, vb = a.encode(feats, lens), b.encode(feats, lens)
    (la, sa), (lb, sb) = a.first_step(va), b.first_step(vb)
    for t in range(min(g.size(1), 5)):  # the last of max_len=6 steps is a forced eos
        tok = torch.logaddexp(la, lb).argmax(-1)
        alive = (g[:, :t] != ens.eos_id).all(1) if t else torch.ones(3, dtype=torch.bool)
        assert torch.equal(g[alive, t], tok[alive])
        (la, sa), (lb, sb) = a.step(tok, sa), b.step(tok, sb)
    bs = beam_search(ens, v, beam_size=3, max_len=6)
    assert ((bs == ens.eos_id).sum(1) == 1).all()


def test_mismatched_token_lists_fail(tmp_path):
    other = list(TOKENS)
    other[3] = "zzz"
    with pytest.raises(ValueError, match="token list"):
        Ensemble([_model(0), _model(1)], token_lists=[TOKENS, other])
    bigger = Captioner(V + 1, n_mels=64, encoder_conf={"rnn_units": 8}, decoder_conf={"hidden_size": 16})
    with pytest.raises(ValueError, match="eos_id"):
        Ensemble([_model(0), bigger])
    with pytest.raises(ValueError):
        Ensemble([])

    conf = {"vocab_size": V, "n_mels": 64, "encoder_conf": {"rnn_units": 8}, "decoder_conf": {"hidden_size": 16}}
    fa, fb = tmp_path / "a.pth", tmp_path / "b.pth"
    torch.save(model_file_dict(Captioner(**conf), conf, TOKENS), fa)
    torch.save(model_file_dict(Captioner(**conf), conf, other), fb)
    with pytest.raises(ValueError, match="different token lists"):
        load_ensemble([str(fa), str(fb)])
    ens, obj = load_ensemble([str(fa), str(fa)])
    assert isinstance(ens, Ensemble) and ens.num_models == 2 and obj["token_list"] == TOKENS
    single, _ = load_ensemble([str(fa)])
    assert isinstance(single, Captioner)
