import numpy as np
import pytest
import torch

from captionlib.decode.search import greedy_search
from captionlib.rl.policy_gradient import PolicyGradient, mean_of_others, policy_gradient_loss
from captionlib.rl.rewards import parse_reward_spec
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward, train_rewards
from rl_doubles import tiny_captioner as _model


def _batch():
    return ["c1", "c2"], torch.randn(2, 40, 64), torch.tensor([40, 32])


def test_gradient_is_zero_when_reward_equals_baseline():
    model = _model()
    obj = PolicyGradient(WordSetReward(constant=0.7), Tokenizer(TOKENS), max_len=6)
    model.train()
    loss, stats = obj(model, _batch())
    loss.backward()
    assert stats["advantage"] == 0.0 and stats["reward"] == pytest.approx(0.7)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.count_nonzero(g) == 0 for g in grads)


def test_positive_advantage_raises_the_sampled_caption_probability():
    torch.manual_seed(1)
    model = _model()
    logp = torch.randn(3, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1.0]])
    adv = torch.tensor([1.0, 0.0, -1.0])
    policy_gradient_loss(logp, mask, adv).backward()
    # minimising the loss moves log-probs along -grad: up for adv > 0, down for adv < 0, not for 0
    assert (-logp.grad[0, :3] > 0).all() and (logp.grad[1] == 0).all() and (-logp.grad[2] < 0).all()
    assert (logp.grad[0, 3] == 0)  # masked position
    del model


def test_scst_training_increases_reward():
    torch.manual_seed(0)
    model = _model()
    obj = PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=4, baseline="mean", max_len=5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    batch = _batch()
    rewards = train_rewards(obj, model, batch, opt, 40)
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.5


def test_mean_of_others():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    assert mean_of_others(r).tolist() == [[2.5, 2.0, 1.5]]
    with pytest.raises(ValueError):
        mean_of_others(torch.ones(2, 1))


def test_reward_spec():
    assert parse_reward_spec("cider_d:0.5") == [("cider_d", 0.5)]
    assert parse_reward_spec("cider_d") == [("cider_d", 1.0)]
    with pytest.raises(ValueError, match="unknown metric"):
        parse_reward_spec("meteor:1")
    with pytest.raises(ValueError, match="bad weight"):
        parse_reward_spec("cider_d:x")


@pytest.mark.parametrize("encoding, passes", [("shared", 1), ("separate", 2)])
def test_greedy_baseline_reuses_the_sampling_pass_encoding(encoding, passes):
    torch.manual_seed(0)
    model = _model()
    calls = []
    model.encoder.register_forward_hook(lambda _m, _i, out: calls.append((model.training, out[0].detach())))
    obj = PolicyGradient(WordSetReward(), Tokenizer(TOKENS), max_len=6, baseline_encoding=encoding)
    model.train()
    obj(model, _batch())
    assert [training for training, _ in calls] == [True, False][:passes] and model.training
    # the baseline is the greedy caption (decoder in eval mode) of the train-mode embedding
    # (shared) or of the eval-mode one (separate)
    greedy = obj.words(greedy_search(model.eval(), calls[-1][1], 6))
    assert obj.reward.calls[-1][1][2:] == greedy
    with pytest.raises(ValueError, match="baseline_encoding"):
        PolicyGradient(WordSetReward(), Tokenizer(TOKENS), baseline_encoding="twice")


def test_sampled_entropy_is_the_policy_entropy_with_its_gradient():
    """The per-step entropy of ``sample`` equals -sum p log p of the step distributions
    (recomputed by replaying the sampled tokens) and carries their gradient."""
    from captionlib.decode.search import sample

    torch.manual_seed(3)
    model = _model().eval()
    _, feats, lens = _batch()
    v = model.encode(feats, lens)
    out = sample(model, v, max_len=6)
    logp, state = model.first_step(v)
    expected = []
    for t in range(out.tokens.size(1)):
        expected.append(torch.distributions.Categorical(logits=logp).entropy())
        logp, state = model.step(out.tokens[:, t].clamp(min=1), state)
    expected = torch.stack(expected, 1) * out.mask
    assert torch.allclose(out.entropy, expected, atol=1e-5)
    assert out.entropy.requires_grad
    grads = torch.autograd.grad(out.entropy.sum(), [q for q in model.parameters() if q.requires_grad],
                                allow_unused=True)
    assert all(g is None or torch.isfinite(g).all() for g in grads)  # no NaN from the -inf padding logit
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_sll_me_subtracts_the_weighted_entropy_and_raises_it():
    """SLL-ME (seed 001, table 2): loss = SCST loss - w * mean over samples of sum_t H_t; with a
    constant reward (no policy gradient) training raises the policy's entropy."""
    from captionlib.rl.policy_gradient import SCST

    batch = _batch()
    losses = {}
    for w in (0.0, 0.5):
        model = _model().train()
        torch.manual_seed(5)
        obj = SCST(WordSetReward(constant=0.7), Tokenizer(TOKENS), 1, "greedy", max_len=6, entropy_weight=w)
        torch.manual_seed(6)
        losses[w], stats = obj(model, batch)
    assert losses[0.0].item() == 0.0  # reward = baseline: no policy-gradient term
    assert losses[0.5].item() < 0 and stats["entropy"] > 0
    model = _model().train()
    obj = SCST(WordSetReward(constant=0.7), Tokenizer(TOKENS), 1, "greedy", max_len=6, entropy_weight=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    entropies = []
    for _ in range(30):
        loss, stats = obj(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        entropies.append(stats["entropy"])
    assert np.mean(entropies[-5:]) > np.mean(entropies[:5])
    with pytest.raises(ValueError, match="entropy_weight must be >= 0"):
        SCST(WordSetReward(), Tokenizer(TOKENS), entropy_weight=-0.1)


def test_entropy_weight_is_refused_where_the_objective_does_not_read_it():
    from captionlib.rl.options import RLOptions
    from captionlib.rl.train import train_rl

    with pytest.raises(ValueError, match=r"rl_conf \(rl_algo sle\): unknown key 'entropy_weight'; its keys: "):
        train_rl(RLOptions(rl_algo="sle", rl_conf={"entropy_weight": 0.01}, init_param="x.pth", cider_df="df.npz",
                           train_data_dir="d", valid_data_dir="d", output_dir="o"))


def test_cuda_graphs_with_gradients_through_the_sampling_loop_are_warned_about(caplog):
    """--decode_compile reduce-overhead with the loop's log-probabilities was 9-11x slower than
    eager sampling on an H100 (CUDA graph trees' slow path), with no word about it."""
    import logging

    from captionlib.rl import objective_class
    from captionlib.rl.options import RLOptions
    from captionlib.rl.train import warn_cuda_graphs_with_loop_gradients

    def warn(rl_algo, rl_conf=None, **opts):
        cls = objective_class(rl_algo)
        warn_cuda_graphs_with_loop_gradients(RLOptions(rl_algo=rl_algo, **opts), cls.Conf(**(rl_conf or {})))

    with caplog.at_level(logging.WARNING):
        warn("scst", {"sample_logprobs": "recompute"}, decode_compile="reduce-overhead")
        warn("scst", {"sample_logprobs": "recompute"}, decode_compile="cuda-graph")
        warn("scst", decode_compile="aot_eager")
        warn("mc_pg")
        assert not caplog.records
        warn("scst", decode_compile="reduce-overhead")
        warn("mc_pg", decode_compile="max-autotune")
        warn("reinforce_plus", {"num_samples": 2}, decode_compile="cuda-graph")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[2].startswith("decode_compile cuda-graph replays the passes without gradients only: the samples of "
                              "rl_algo reinforce_plus (sample_logprobs loop) are drawn eagerly"), msgs
    assert len(msgs) == 3 and msgs[0].startswith("decode_compile reduce-overhead with gradients through the "
                                                 "sampling loop (rl_algo scst, sample_logprobs loop)"), msgs
    assert "rl_algo mc_pg" in msgs[1] and "--rl_conf sample_logprobs=recompute" in msgs[1], msgs
