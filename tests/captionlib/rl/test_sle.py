import math

import numpy as np
import pytest
import torch

from captionlib.metrics.bleu import sentence_bleu
from captionlib.rl.policy_gradient import PolicyGradient, policy_gradient_loss
from captionlib.rl.sle import SLE, bleu_distances, diversity_advantages, sle_loss, symmetric_distances
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward, train_rewards
from rl_doubles import tiny_captioner as _model


def _batch():
    torch.manual_seed(123)
    return ["c1", "c2"], torch.randn(2, 40, 64), torch.tensor([40, 32])


def _d(y, y_ref, distance="bleu34_sum"):
    """Independent reference: 2 - BLEU-3 - BLEU-4 (or half of it) with y_ref the only reference."""
    if list(y) == list(y_ref):
        return 0.0
    b = sentence_bleu(y, [y_ref], n=4)
    return 2.0 - b[2] - b[3] if distance == "bleu34_sum" else 1.0 - (b[2] + b[3]) / 2.0


def _loo_reference(dbar):
    """Leave-one-out (q, b) of one clip written from the definitions, with loops."""
    s = len(dbar)
    q = [sum(dbar[j][k] for k in range(s) if k != j) / (s - 1) for j in range(s)]
    b = []
    for j in range(s):
        pairs = [dbar[k][m] for k in range(s) for m in range(s) if k != m and j not in (k, m)]
        b.append(np.mean(pairs) if pairs else 0.0)
    return np.array(q), np.array(b)


@pytest.mark.parametrize("distance,top", [("bleu34_sum", 2.0), ("bleu34_mean", 1.0)])
def test_distance_zero_for_identical_and_symmetry(distance, top):
    caps = [
        "a dog barks".split(),  # shorter than 4 words: smoothed self-BLEU-4 is not 1, d must still be 0
        "a dog barks".split(),
        "a dog barks at the rain".split(),
        "rain falls on a roof now".split(),
        "a dog barks at the mailman".split(),
    ]
    d = bleu_distances(caps, distance)
    assert d.shape == (5, 5)
    assert np.all(np.diag(d) == 0.0) and d[0, 1] == 0.0 and d[1, 0] == 0.0
    assert np.all((d >= 0) & (d <= top)) and d.max() > top / 2
    # equal lengths (6 words): BLEU with the other as reference is symmetric, so d is
    for j, k in [(2, 3), (2, 4), (3, 4)]:
        assert d[j, k] == pytest.approx(d[k, j], abs=1e-12)
    # different lengths: the brevity penalty makes the directed d asymmetric ...
    assert abs(d[0, 2] - d[2, 0]) > 1e-3
    # ... and the estimator uses the symmetrised distance
    dbar = symmetric_distances(caps, distance)
    assert np.allclose(dbar, dbar.T) and dbar[0, 2] == pytest.approx((d[0, 2] + d[2, 0]) / 2)
    for j in range(5):
        for k in range(5):
            assert d[j, k] == pytest.approx(_d(caps[j], caps[k], distance), abs=1e-12)


def test_default_distance_is_the_sum_and_twice_the_mean():
    caps = ["a dog barks".split(), "a dog barks at the rain".split(), "rain falls on a roof".split(), []]
    d_sum, d_mean = bleu_distances(caps, "bleu34_sum"), bleu_distances(caps, "bleu34_mean")
    assert np.array_equal(bleu_distances(caps), d_sum)
    assert np.allclose(d_sum, 2.0 * d_mean, atol=1e-12)
    assert np.array_equal(symmetric_distances(caps), (d_sum + d_sum.T) / 2)


def test_distance_value_by_hand():
    y, yp = "a b c d".split(), "a b c e".split()
    p = [3 / 4, 2 / 3, 1 / 2, (0 + 1e-15) / (1 + 1e-9)]
    b3 = (p[0] * p[1] * p[2]) ** (1 / 3)
    b4 = (p[0] * p[1] * p[2] * p[3]) ** (1 / 4)
    assert bleu_distances([y, yp])[0, 1] == pytest.approx(2 - b3 - b4, rel=1e-6)
    assert bleu_distances([y, yp], "bleu34_mean")[0, 1] == pytest.approx(1 - (b3 + b4) / 2, rel=1e-6)
    # disjoint captions are at distance ~2 (sum) / ~1 (mean)
    assert bleu_distances(["a b c d".split(), "w x y z".split()])[0, 1] > 1.999
    assert bleu_distances(["a b c d".split(), "w x y z".split()], "bleu34_mean")[0, 1] > 0.999


@pytest.mark.parametrize("baseline", ["leave_one_out", "all_pairs"])
def test_diversity_term_pushes_toward_the_far_sample(baseline):
    caps = ["a dog barks at the rain".split()] * 2 + ["rain falls on a roof now".split()]
    dbar = torch.tensor(symmetric_distances(caps), dtype=torch.float32).unsqueeze(0)
    x = dbar[0, 0, 2].item()
    q, b, adv = diversity_advantages(dbar, baseline)
    if baseline == "all_pairs":
        assert b[0, 0] == pytest.approx(dbar.sum() / 9)
    else:  # q_j: mean distance to the others; b_j: distance between the two others
        assert torch.allclose(q[0], torch.tensor([x / 2, x / 2, x])) and torch.allclose(b[0], torch.tensor([x, x, 0.0]))
        assert torch.allclose(adv[0], torch.tensor([-x, -x, 2 * x]))
    assert adv[0, 2] > 0 and adv[0, 0] < 0 and adv[0, 1] < 0
    assert adv.sum().abs() < 1e-6  # both baselines centre the advantage
    # alpha = 0 (pure diversity): a gradient step raises log p of the far sample only
    logp = torch.zeros(3, 4, requires_grad=True)
    mask = torch.ones(3, 4)
    loss, _ = sle_loss(logp, mask, torch.zeros(1, 3), torch.zeros(1), dbar, alpha=0.0, diversity_baseline=baseline)
    loss.backward()
    step = -logp.grad.sum(1)
    assert step[2] > 0 and step[0] < 0 and step[1] < 0


@pytest.mark.parametrize("s", [2, 3, 5])
def test_diversity_baselines_match_their_definitions(s):
    torch.manual_seed(s)
    dbar = torch.rand(4, s, s, dtype=torch.float64)
    dbar = (dbar + dbar.transpose(1, 2)) / 2
    dbar = dbar * (1 - torch.eye(s, dtype=torch.float64))
    q, b, adv = diversity_advantages(dbar)  # default: leave_one_out
    for i in range(4):
        q_ref, b_ref = _loo_reference(dbar[i].tolist())
        assert np.allclose(q[i].numpy(), q_ref) and np.allclose(b[i].numpy(), b_ref)
    assert torch.allclose(adv, 2 * (q - b))
    if s > 2:  # sum_j b_j = sum_j q_j; with s = 2 no pair is left out and b = 0
        assert torch.allclose(adv.sum(1), torch.zeros(4, dtype=torch.float64))
    else:
        assert torch.equal(b, torch.zeros_like(b)) and torch.allclose(adv, 2 * dbar[:, [0, 1], [1, 0]])
    # b_j does not depend on sample j: changing y_j's distances leaves b_j unchanged
    changed = dbar.clone()
    changed[:, 0, 1:] += 0.3
    changed[:, 1:, 0] += 0.3
    assert torch.allclose(diversity_advantages(changed)[1][:, 0], b[:, 0])
    # all_pairs: eq. 14's (1/s) sum_k and sec. 4.3's mean over all s^2 pairs
    q, b, adv = diversity_advantages(dbar, "all_pairs")
    assert torch.allclose(q, dbar.mean(2)) and torch.allclose(b, dbar.mean((1, 2)).view(-1, 1).expand(4, s))
    # the diagonal is ignored (d(y, y) = 0 by definition)
    noisy = dbar + torch.diag_embed(torch.rand(4, s, dtype=torch.float64))
    for name in ("leave_one_out", "all_pairs"):
        assert torch.allclose(diversity_advantages(noisy, name)[2], diversity_advantages(dbar, name)[2])


def test_alpha_one_is_scst_with_s_samples():
    # pure function: alpha = 1 ignores distances and equals REINFORCE with the greedy baseline
    torch.manual_seed(0)
    logp = torch.randn(6, 5, requires_grad=True)
    mask = (torch.rand(6, 5) > 0.3).float()
    r, g = torch.rand(2, 3), torch.rand(2)
    dbar = torch.rand(2, 3, 3)
    loss, _ = sle_loss(logp, mask, r, g, dbar, alpha=1.0)
    ref = policy_gradient_loss(logp, mask, (r - g.view(-1, 1)).reshape(-1))
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    # whole objective: same samples (same seed) -> same loss and gradients as PolicyGradient
    grads = []
    for obj in (
        SLE(WordSetReward(), Tokenizer(TOKENS), num_samples=4, alpha=1.0, max_len=6),
        PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=4, baseline="greedy", max_len=6),
    ):
        model = _model()
        batch = _batch()
        torch.manual_seed(7)
        loss, stats = obj(model, batch)
        loss.backward()
        g = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        grads.append((loss.item(), stats["reward"], stats["baseline"], g))
    (l1, r1, b1, g1), (l2, r2, b2, g2) = grads
    assert l1 == pytest.approx(l2, rel=1e-6) and r1 == r2 and b1 == b2
    assert len(g1) == len(g2) and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g1, g2))


@pytest.mark.parametrize(
    "distance,baseline", [("bleu34_sum", "leave_one_out"), ("bleu34_mean", "all_pairs")], ids=["default", "old"]
)
def test_stats_are_computed_as_specified(distance, baseline):
    reward = WordSetReward()
    s = 4
    obj = SLE(reward, Tokenizer(TOKENS), num_samples=s, alpha=0.75, max_len=6, distance=distance,
              diversity_baseline=baseline)
    model = _model()
    torch.manual_seed(3)
    loss, stats = obj(model, _batch())
    keys = ("reward", "baseline", "advantage", "entropy", "sample_len", "precision_advantage", "diversity",
            "diversity_baseline", "diversity_advantage")
    for key in keys:
        assert key in stats and math.isfinite(stats[key])
    keys, cands, r = reward.calls[-1]
    assert keys == ["c1"] * s + ["c2"] * s + ["c1", "c2"]
    samples, rs, rg = cands[: 2 * s], r[: 2 * s].reshape(2, s), r[2 * s:]
    assert stats["reward"] == pytest.approx(rs.mean())
    assert stats["baseline"] == pytest.approx(rg.mean())
    assert stats["precision_advantage"] == pytest.approx((rs - rg[:, None]).mean(), abs=1e-6)
    # diversity: mean over clips of the mean symmetric distance over pairs j != k
    div, adv_div, b_div = [], [], []
    for i in range(2):
        caps = samples[i * s : (i + 1) * s]
        full = np.array([[(_d(caps[j], caps[k], distance) + _d(caps[k], caps[j], distance)) / 2
                          for k in range(s)] for j in range(s)])
        div.append(full.sum() / (s * (s - 1)))
        if baseline == "all_pairs":
            q, b = full.mean(1), np.full(s, full.mean())
        else:
            q, b = _loo_reference(full)
        adv_div.append(2 * (q - b))
        b_div.append(b)
    assert np.mean(div) > 0.1  # the samples differ, so the checks below are not trivial
    assert stats["diversity"] == pytest.approx(np.mean(div), abs=1e-5)
    assert stats["diversity_baseline"] == pytest.approx(np.mean(b_div), abs=1e-5)
    factor = 1.0 if baseline == "leave_one_out" else (s - 1) / s
    assert stats["diversity_baseline"] == pytest.approx(factor * stats["diversity"], abs=1e-5)
    assert stats["diversity_advantage"] == pytest.approx(np.abs(adv_div).mean(), abs=1e-5)
    prec = rs - rg[:, None]
    assert stats["advantage"] == pytest.approx((0.75 * prec + 0.25 * np.array(adv_div)).mean(), abs=1e-5)


def test_sle_training_increases_reward():
    model = _model()
    model.encoder.requires_grad_(False)  # keep the test fast: train the decoder only
    obj = SLE(WordSetReward(), Tokenizer(TOKENS), num_samples=5, alpha=0.75, max_len=5)
    opt = torch.optim.Adam(model.decoder.parameters(), lr=0.01)
    batch = _batch()
    torch.manual_seed(0)
    rewards = train_rewards(obj, model, batch, opt, 25)
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 1.0


def test_bad_options():
    with pytest.raises(ValueError, match="num_samples"):
        SLE(WordSetReward(), Tokenizer(TOKENS), num_samples=1)
    with pytest.raises(ValueError, match="alpha"):
        SLE(WordSetReward(), Tokenizer(TOKENS), alpha=1.5)
    with pytest.raises(ValueError, match="distance.*'bleu34'"):
        SLE(WordSetReward(), Tokenizer(TOKENS), distance="bleu34")
    with pytest.raises(ValueError, match="diversity_baseline.*'mean'"):
        SLE(WordSetReward(), Tokenizer(TOKENS), diversity_baseline="mean")
    with pytest.raises(ValueError, match="distance.*'edit'"):
        bleu_distances([["a"], ["b"]], "edit")
    with pytest.raises(ValueError, match="diversity_baseline.*'loo'"):
        diversity_advantages(torch.zeros(1, 3, 3), "loo")
