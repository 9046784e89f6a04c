"""ActorCritic and MonteCarloPG on a small real Captioner: shapes, warm-up, gradient flow; seed 002's
embedding reward (hinge ranking loss, cosine reward) and separate value encoder."""

import numpy as np
import pytest
import torch

from captionlib.decode.search import sample
from captionlib.rl.actor_critic import ActorCritic, ValueNetwork
from captionlib.rl.embedding import AudioCaptionEmbedding, CaptionEncoder, FrameEncoder, ranking_loss
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


# ---- seed 002's embedding reward and separate value encoder ------------------------------------

AC_STATS = STATS | {"value_loss", "warmup", "sample_len"}
N_MELS = 64


class RefsReward(WordSetReward):
    """:class:`WordSetReward` with train references (what the embedding is trained on)."""

    refs = {"c0": [["a", "dog", "barks"]], "c1": [["rain", "falls"], ["rain"]], "c2": [["dog"]], "c3": [["falls"]]}


def _seed002(model, warmup_steps=2, **kw):
    kw = {"reward_type": "embedding", "value_encoder": "separate", "n_mels": N_MELS, "embedding_size": 16,
          "critic_size": 16, **kw}
    return ActorCritic(
        RefsReward(), Tokenizer(TOKENS), vocab_size=model.vocab_size, embed_size=model.encoder.output_size,
        warmup_steps=warmup_steps, max_len=6, **kw,
    )


def test_ranking_loss_hand_computed():
    # cosines s_ij = cos(audio_i, caption_j): [[1, 0.6], [0, 0.8]] (the norms do not matter)
    audio, caps = torch.tensor([[2.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [3.0, 4.0]])
    # margin 0.3: only clip 0 against caption 1: 0.3 - 0.8 + 0.6 = 0.1; / 2 pairs
    assert ranking_loss(audio, caps, 0.3).item() == pytest.approx(0.05)
    # margin 0.6: also caption 1 against clip 0: 0.6 - 1 + 0.6 = 0.2; (0.4 + 0.2) / 2
    assert ranking_loss(audio, caps, 0.6).item() == pytest.approx(0.3)
    # pairs marked as the same clip are not negatives
    assert ranking_loss(audio, caps, 0.6, same=torch.ones(2, 2, dtype=torch.bool)).item() == 0.0
    assert ranking_loss(audio[:1], caps[:1], 0.6).item() == 0.0  # no negative at all


def test_embedding_encoders_ignore_padding():
    torch.manual_seed(0)
    emb = AudioCaptionEmbedding(N_MELS, len(TOKENS), 16)
    feats = torch.randn(1, 10, N_MELS)
    padded = torch.cat([feats, torch.randn(1, 5, N_MELS)], 1)
    a, b = emb.embed_audio(feats, torch.tensor([10])), emb.embed_audio(padded, torch.tensor([10]))
    assert a.shape == (1, 16) and torch.allclose(a, b, atol=1e-6) and a.norm().item() == pytest.approx(1.0)
    c = emb.embed_captions(torch.tensor([[3, 4, 7, 0], [3, 4, 7, 5]]), torch.tensor([3, 3]))
    assert c.shape == (2, 16) and torch.allclose(c[0], c[1], atol=1e-6)
    assert isinstance(emb.audio, FrameEncoder) and isinstance(emb.caption, CaptionEncoder)


def test_reference_tokens_draw_a_reference_and_append_eos():
    model = _model()
    obj = _seed002(model)
    tokens, lens = obj.reference_tokens(["c0", "c2", "c1"], torch.device("cpu"))
    eos = model.eos_id
    assert tokens.tolist()[:2] == [[2, 3, 4, eos], [3, eos, 0, 0]] and lens.tolist()[:2] == [4, 2]
    assert tokens[2].tolist() in ([5, 6, eos, 0], [5, eos, 0, 0])


@pytest.mark.parametrize("value_encoder", ["shared", "separate"])
def test_embedding_reward_warmup_then_joint_training(value_encoder):
    model = _model()
    obj = _seed002(model, warmup_steps=1, value_encoder=value_encoder)
    model.train()
    obj.train()
    for step in range(2):
        model.zero_grad()
        obj.zero_grad()
        actor, own_loss, stats = obj.losses(model, _batch(4))
        assert AC_STATS | {"embedding_loss"} <= set(stats)
        assert -1.0 <= stats["reward"] <= 1.0 and stats["embedding_loss"] >= 0.0
        own_loss.backward(retain_graph=True)
        assert not _grads(model.parameters()), "the critic and embedding losses do not reach the captioner"
        assert _grads(obj.critic.parameters()) and _grads(obj.embedding.parameters())
        if value_encoder == "separate":
            assert _grads(obj.value_encoder.parameters())
        if step == 0:
            assert stats["warmup"] == 1.0 and not actor.requires_grad
        else:
            actor.backward()
            assert stats["warmup"] == 0.0 and _grads(model.decoder.parameters())
    assert obj.reward.calls == [], "the metric reward is not used"


def test_embedding_reward_is_the_cosine_of_the_sampled_caption():
    model = _model()
    obj = _seed002(model, warmup_steps=0, num_samples=3)
    clips, feats, lens = _batch(2)
    torch.manual_seed(5)
    _, _, stats = obj.losses(model, (clips, feats, lens))
    torch.manual_seed(5)  # the same samples again
    out = sample(model, model.encode(feats, lens).repeat_interleave(3, 0), 6)
    with torch.no_grad():
        audio = obj.embedding.embed_audio(feats, lens).repeat_interleave(3, 0)
        r = (audio * obj.embedding.embed_captions(out.tokens, out.mask.sum(1).long())).sum(1)
    assert stats["reward"] == pytest.approx(r.mean().item(), abs=1e-5)


def test_ranking_loss_training_separates_the_clips():
    model = _model()
    obj = _seed002(model, warmup_steps=10 ** 6)
    opt = torch.optim.Adam(obj.embedding.parameters(), lr=0.01)
    losses = []
    for _ in range(40):
        _, own_loss, stats = obj.losses(model, _batch(4))
        opt.zero_grad()
        own_loss.backward()
        opt.step()
        losses.append(stats["embedding_loss"])
    assert np.mean(losses[-5:]) < 0.3 * np.mean(losses[:5])


def test_separate_value_encoder_state_dict_and_resume():
    model = _model()
    default_keys = set(_ac(model).state_dict())
    assert {k.split(".")[0] for k in default_keys} == {"critic", "num_updates"}
    obj = _seed002(model, warmup_steps=3)
    keys = set(obj.state_dict())
    assert {k.split(".")[0] for k in keys} == {"critic", "value_encoder", "embedding", "num_updates"}
    # the critic reads its own encoder's output (critic_size 16), not the captioner's v
    assert obj.critic.init.in_features == obj.value_encoder.output_size == 16
    assert _ac(model).critic.init.in_features == model.encoder.output_size
    obj.train()
    for _ in range(2):
        obj(model, _batch())
    resumed = _seed002(model, warmup_steps=3)
    resumed.load_state_dict(obj.state_dict())
    assert int(resumed.num_updates) == 2 and resumed.in_warmup
    for k, v in obj.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k])
    resumed.train()
    assert resumed(model, _batch())[1]["warmup"] == 1.0
    assert resumed(model, _batch())[1]["warmup"] == 0.0


def test_seed002_options_are_checked():
    model = _model()
    with pytest.raises(ValueError, match="reward_type"):
        _ac(model, reward_type="cider")
    with pytest.raises(ValueError, match="value_encoder"):
        _ac(model, value_encoder="own")
    with pytest.raises(ValueError, match="n_mels"):
        _ac(model, value_encoder="separate")
    with pytest.raises(ValueError, match="n_mels"):
        _ac(model, reward_type="embedding")
    with pytest.raises(ValueError, match="refs"):
        _ac(model, reward_type="embedding", n_mels=N_MELS)  # WordSetReward has no references
    with pytest.raises(ValueError, match="margin"):
        _seed002(model, embedding_margin=-0.1)
    obj = _seed002(model)
    clips, feats, lens = _batch()
    with pytest.raises(ValueError, match="feats"):
        obj.losses_from_embedding(model, clips, model.encode(feats, lens))
