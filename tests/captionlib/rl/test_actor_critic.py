"""ActorCritic and MonteCarloPG on a small real Captioner: shapes, warm-up, gradient flow."""

import numpy as np
import pytest
import torch

from captionlib.decode.search import sample
from captionlib.rl.actor_critic import ActorCritic, ValueNetwork
from captionlib.rl.mc_pg import MonteCarloPG, rollouts
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward, train_rewards
from rl_doubles import tiny_captioner as _model

STATS = {"reward", "baseline", "advantage", "entropy"}


def _batch(n=2):
    torch.manual_seed(1)
    return [f"c{i}" for i in range(n)], torch.randn(n, 16, 64), torch.full((n,), 16)


def _ac(model, warmup_steps=2, **kw):
    return ActorCritic(
        WordSetReward(), Tokenizer(TOKENS), vocab_size=model.vocab_size, embed_size=model.encoder.output_size,
        warmup_steps=warmup_steps, max_len=6, **kw,
    )


def _mc(model, **kw):
    return MonteCarloPG(
        WordSetReward(), Tokenizer(TOKENS), hidden_size=model.decoder.rnn.hidden_size, num_rollouts=2, max_len=6, **kw
    )


def _grads(params):
    return [p.grad for p in params if p.grad is not None and torch.count_nonzero(p.grad) > 0]


def test_value_network_shapes():
    net = ValueNetwork(len(TOKENS), 256, 32)
    values = net(torch.randn(3, 256), torch.tensor([[2, 3, 7], [7, 0, 0], [4, 5, 6]]))
    assert values.shape == (3, 3)
    assert net(torch.randn(2, 256), torch.tensor([[7], [7]])).shape == (2, 1)
    # entry t depends only on the prefix tokens[:, :t]
    v = torch.randn(1, 256)
    a, b = net(v, torch.tensor([[2, 3, 7]])), net(v, torch.tensor([[2, 4, 7]]))
    assert torch.allclose(a[:, :2], b[:, :2]) and not torch.allclose(a[:, 2], b[:, 2])


def test_actor_critic_warmup_then_joint_training():
    model = _model()
    obj = _ac(model, warmup_steps=2)
    model.train()
    obj.train()
    for step in range(3):
        model.zero_grad()
        obj.zero_grad()
        actor, value_loss, stats = obj.losses(model, _batch())
        assert STATS | {"value_loss", "warmup"} <= set(stats)
        (actor + value_loss).backward()
        assert _grads(obj.critic.parameters()), "the critic always learns"
        if step < 2:
            assert stats["warmup"] == 1.0 and actor.item() == 0.0 and not actor.requires_grad
            assert not _grads(model.parameters()), "no actor gradient during warm-up"
        else:
            assert stats["warmup"] == 0.0 and actor.requires_grad
            assert _grads(model.decoder.parameters())
    assert int(obj.num_updates) == 3


def test_critic_loss_does_not_reach_the_captioner():
    model = _model()
    obj = _ac(model, warmup_steps=0)
    model.train()
    _, value_loss, _ = obj.losses(model, _batch())
    value_loss.backward()
    assert not _grads(model.parameters()) and _grads(obj.critic.parameters())


def test_warmup_counter_survives_state_dict_round_trip():
    model = _model()
    obj = _ac(model, warmup_steps=3)
    obj.train()
    for _ in range(2):
        obj(model, _batch())
    obj.eval()
    obj(model, _batch())  # evaluation calls do not advance the counter
    assert "num_updates" in obj.state_dict() and int(obj.state_dict()["num_updates"]) == 2
    resumed = _ac(model, warmup_steps=3)
    resumed.load_state_dict(obj.state_dict())
    assert int(resumed.num_updates) == 2 and resumed.in_warmup
    resumed.train()
    _, stats = resumed(model, _batch())
    assert stats["warmup"] == 1.0 and not resumed.in_warmup
    _, stats = resumed(model, _batch())
    assert stats["warmup"] == 0.0


def test_actor_critic_training_increases_reward():
    torch.manual_seed(0)
    model = _model()
    obj = _ac(model, warmup_steps=10, num_samples=4, critic_size=32)
    opt = torch.optim.Adam([{"params": model.parameters(), "lr": 0.01}, {"params": obj.parameters(), "lr": 0.01}])
    rewards = train_rewards(obj, model, _batch, opt, 50)
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.5


def test_rollouts_keep_prefixes_and_truncate():
    model = _model()
    prefixes = torch.tensor([[2, 3, 4, 0], [5, 6, 0, 0]])
    out = rollouts(model, torch.randn(2, 256), prefixes, torch.tensor([3, 1]), max_len=5)
    assert out.shape[1] <= 5
    assert out[0, :3].tolist() == [2, 3, 4] and out[1, 0].item() == 5
    eos = model.eos_id
    for row in out.tolist():
        assert eos in row and all(t == 0 for t in row[row.index(eos) + 1:])


def test_monte_carlo_pg_shapes_and_stats():
    model = _model()
    obj = _mc(model)
    model.train()
    actor, baseline_loss, stats = obj.losses(model, _batch(3))
    assert actor.dim() == 0 and baseline_loss.dim() == 0
    assert STATS | {"baseline_loss", "q", "rollouts"} <= set(stats)
    clips, feats, lens = _batch(3)
    v = model.encode(feats, lens)
    out = sample(model, v, 6)
    q, r, n = obj.q_values(model, clips, v, out.tokens, out.mask)
    assert q.shape == out.tokens.shape and r.shape == (3,)
    assert n == 2 * int((out.mask.sum(1) - 1).sum())


def test_monte_carlo_baseline_gets_no_gradient_into_the_rnn():
    model = _model()
    obj = _mc(model)
    model.train()
    actor, baseline_loss, _ = obj.losses(model, _batch())
    baseline_loss.backward(retain_graph=True)
    assert not _grads(model.parameters()), "the baseline MLP must see a detached hidden state"
    assert _grads(obj.baseline_mlp.parameters())
    actor.backward()
    assert _grads(model.decoder.rnn.parameters()), "the actor loss trains the RNN"


def test_monte_carlo_pg_training_increases_reward():
    torch.manual_seed(0)
    model = _model()
    obj = _mc(model, baseline_hidden=32)
    opt = torch.optim.Adam([{"params": model.parameters(), "lr": 0.01}, {"params": obj.parameters(), "lr": 0.01}])
    batch = _batch(4)
    rewards = train_rewards(obj, model, batch, opt, 40)
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.5


def test_bad_options():
    model = _model()
    with pytest.raises(ValueError):
        _ac(model, warmup_steps=-1)
    with pytest.raises(ValueError):
        MonteCarloPG(WordSetReward(), Tokenizer(TOKENS), hidden_size=16, num_rollouts=0)
