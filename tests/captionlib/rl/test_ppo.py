"""PPO (Schulman et al. 2017) over sampled captions: its gradient against REINFORCE+'s, the clip,
several steps on one rollout through the trainer, learning, and a resume."""

import json

import numpy as np
import pytest
import torch

from captionlib.rl.policy_gradient import PolicyGradient
from captionlib.rl.ppo import PPO, ppo_loss
from captionlib.rl.reference import ReferencePolicy
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward, train_rewards
from rl_doubles import tiny_captioner as _model
from tiny_training import train_tiny_xe


def _batch():
    return ["c1", "c2"], torch.randn(2, 40, 64), torch.tensor([40, 32])


@pytest.mark.parametrize("baseline, n", [("greedy", 1), ("greedy", 3), ("mean", 3)])
def test_one_epoch_without_kl_is_the_policy_gradient_of_its_baseline(baseline, n):
    """ppo_epochs 1: the ratio is 1 (its clip never binds); kl_coef 0: the gradient is
    REINFORCE+'s with the same baseline on the same samples (SCST for one sample)."""
    batch, grads = _batch(), {}
    for name in ("reinforce_plus", "ppo"):
        model = _model().train()
        if name == "ppo":
            obj = PPO(WordSetReward(), Tokenizer(TOKENS), ReferencePolicy(model), num_samples=n, baseline=baseline,
                      ppo_epochs=1, kl_coef=0.0, max_len=6)
        else:
            obj = PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=n, baseline=baseline, max_len=6,
                                 sample_logprobs="recompute")
        torch.manual_seed(5)
        loss, stats = obj(model, batch)
        loss.backward()
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        if name == "ppo":
            assert stats["clip_fraction"] == 0.0
    assert grads["reinforce_plus"].abs().sum() > 0
    torch.testing.assert_close(grads["ppo"], grads["reinforce_plus"], rtol=1e-4, atol=1e-7)


def test_the_clipped_surrogate_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.9], [0.5, 0.1]])).requires_grad_()
    old = torch.log(torch.tensor([[0.25, 0.9], [0.5, 0.5]]))
    mask = torch.ones(2, 2)
    adv = torch.tensor([1.0, -1.0])
    # ratios: [[2, 1], [1, 0.2]]; A > 0 caps the ratio at 1.2, A < 0 floors it at 0.8
    loss, stats = ppo_loss(logp, old, logp.detach(), mask, adv, clip_range=0.2, kl_coef=0.0)
    assert loss.item() == pytest.approx(-((1.2 + 1.0) + (-1.0 * 1.0 - 0.8)) / 2)
    assert stats["clip_fraction"].item() == pytest.approx(0.5)
    loss.backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[1, 1].item() == 0.0  # clipped tokens: no gradient
    assert logp.grad[0, 1].item() == pytest.approx(-0.5)  # -A * ratio / N


def test_several_steps_on_one_rollout_move_the_ratio_and_hold_the_samples():
    torch.manual_seed(0)
    model = _model().train()
    obj = PPO(WordSetReward(), Tokenizer(TOKENS), ReferencePolicy(model), num_samples=3, ppo_epochs=3, max_len=6)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    batch, rollouts, kls = _batch(), [], []
    for _ in range(6):  # two batches of 3 steps each, as the trainer calls it
        loss, stats = obj(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rollouts.append(obj._rollout)
        kls.append(stats["kl"])
    assert rollouts[0] is rollouts[1] is rollouts[2] and rollouts[3] is not rollouts[2]
    assert kls[2] > kls[0]  # the steps on one rollout move the policy away from the reference


def test_ppo_training_increases_reward():
    torch.manual_seed(0)
    model = _model()
    obj = PPO(WordSetReward(), Tokenizer(TOKENS), ReferencePolicy(model), num_samples=4, baseline="mean",
              ppo_epochs=2, kl_coef=0.01, max_len=5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rewards = train_rewards(obj, model, _batch(), opt, 40)
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.5, rewards


def test_ppo_takes_ppo_epochs_steps_per_batch_and_resumes_mid_epoch(tmp_path, monkeypatch):
    from captionlib.rl.options import RLOptions
    from captionlib.rl.train import train_rl

    data = train_tiny_xe(tmp_path)

    def opts(out):
        return RLOptions(rl_algo="ppo", init_param=str(tmp_path / "xe" / "valid.cider_d.best.pth"),
                         cider_df=str(tmp_path / "cider_df.npz"), train_data_dir=str(data), valid_data_dir=str(data),
                         output_dir=str(tmp_path / out), batch_size=2, max_epoch=2, max_len=6, num_iters_per_epoch=2,
                         rl_conf={"num_samples": 2, "ppo_epochs": 3}, lr=1e-3, scheduler="warmup_cosine",
                         warmup_steps=2)
    train_rl(opts("whole"))
    hist = json.loads((tmp_path / "whole" / "history.json").read_text())
    assert [h["steps"] for h in hist] == [2, 2] and all(np.isfinite(h["train_clip_fraction"]) for h in hist)
    forward, calls = PPO.forward, []

    def killed_in_epoch_2(self, model, batch):
        calls.append(1)
        if len(calls) == 8:  # the second step on epoch 2's second batch
            raise KeyboardInterrupt("killed")
        return forward(self, model, batch)

    monkeypatch.setattr(PPO, "forward", killed_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train_rl(opts("killed"))
    monkeypatch.setattr(PPO, "forward", forward)
    train_rl(opts("killed"))
    whole = torch.load(tmp_path / "whole" / "latest.pth", weights_only=True)
    resumed = torch.load(tmp_path / "killed" / "latest.pth", weights_only=True)
    assert all(torch.equal(whole["model"][k], resumed["model"][k]) for k in whole["model"])
    assert whole["scheduler"]["last_epoch"] == 2 * 2 * 3  # 3 optimizer steps per batch
