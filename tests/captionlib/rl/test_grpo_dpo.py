"""GRPO (Shao et al. 2024) and online DPO (Rafailov et al. 2023): their losses against REINFORCE+
and a hand-computed case, the reference policy, learning on a toy reward, and a resume."""

import math

import numpy as np
import pytest
import torch

from captionlib.rl.dpo import DPO, dpo_loss, preference_pairs
from captionlib.rl.grpo import GRPO, STD_EPS, group_advantages, grpo_loss
from captionlib.rl.policy_gradient import PolicyGradient
from captionlib.rl.reference import ReferencePolicy, k3_kl
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward, train_rewards
from rl_doubles import tiny_captioner as _model
from tiny_training import train_tiny_xe


def _batch():
    return ["c1", "c2"], torch.randn(2, 40, 64), torch.tensor([40, 32])


def test_grpo_without_std_scaling_kl_and_length_mean_is_reinforce_plus_mean_times_g_minus_1_over_g():
    """GRPO's group mean includes the caption's own reward: r - mean(r) = (G-1)/G (r - mean of the
    others), REINFORCE+'s leave-one-out advantage; with the std scaling, the token mean and the KL
    term off, its gradient is (G-1)/G times REINFORCE+'s on the same samples (the loss values differ:
    GRPO's is written with the ratio pi / pi_old, 1 at pi_old = pi, REINFORCE+'s with log pi)."""
    g = 4
    batch = _batch()
    losses, grads = {}, {}
    for name in ("reinforce_plus", "grpo"):
        model = _model().train()
        if name == "grpo":
            obj = GRPO(WordSetReward(), Tokenizer(TOKENS), ReferencePolicy(model), num_samples=g, beta=0.0,
                       scale_rewards=False, length_normalise=False, max_len=6)
        else:
            obj = PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=g, baseline="mean", max_len=6)
        torch.manual_seed(3)
        loss, _ = obj(model, batch)
        loss.backward()
        losses[name] = loss.item()
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert losses["reinforce_plus"] != 0 and grads["reinforce_plus"].abs().sum() > 0
    torch.testing.assert_close(grads["grpo"], (g - 1) / g * grads["reinforce_plus"], rtol=1e-4, atol=1e-7)


def test_group_advantages_and_the_grpo_loss_by_hand():
    r = torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    assert group_advantages(r, scale=False).tolist() == [[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    torch.testing.assert_close(group_advantages(r), torch.tensor([[-1.0, 0.0, 1.0], [0.0] * 3]) / (
        torch.tensor([[1.0], [0.0]]) + STD_EPS))
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0, 0.0], [-1.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([2.0, -1.0])
    kl = [[0.0, math.e - 2.0], [math.exp(-1.0)]]  # exp(d) - d - 1, d = ref - logp: 0, 1, -1
    loss, mean_kl = grpo_loss(logp, ref, mask, adv, beta=0.5, length_normalise=True)
    by_hand = (-(2.0 - 0.5 * kl[0][0]) - (2.0 - 0.5 * kl[0][1])) / 2 / 2 + (-(-1.0 - 0.5 * kl[1][0])) / 2
    assert loss.item() == pytest.approx(by_hand) and mean_kl.item() == pytest.approx(sum(map(sum, kl)) / 3)
    loss.backward()
    # the policy-gradient part: -adv / |o| / G per token; the KL part pushes towards the reference
    assert logp.grad[0, 0].item() == pytest.approx(-2.0 / 2 / 2)
    assert logp.grad[0, 2].item() == 0.0  # masked


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere():
    logp = torch.log(torch.tensor([0.2, 0.5, 0.9]))
    assert torch.all(k3_kl(logp, logp) == 0)
    assert torch.all(k3_kl(logp, logp - 0.3) > 0) and torch.all(k3_kl(logp, logp + 0.3) > 0)
    model = _model().eval()  # the policy equal to its reference (eval mode: the same encoder statistics)
    obj = GRPO(WordSetReward(), Tokenizer(TOKENS), ReferencePolicy(model), num_samples=3, max_len=6,
               sample_logprobs="recompute")
    _, stats = obj(model, _batch())
    assert abs(stats["kl"]) < 1e-6
    assert "reference" not in dict(obj.named_modules()) and not list(obj.parameters())  # not trained, not saved


def test_dpo_loss_by_hand_and_the_pairs():
    # (pc - rc) - (pr - rr) = 0.5 - (-1.0) = 1.5; beta 0.5: -log sigmoid(0.75) = log(1 + e^-0.75)
    loss = dpo_loss(torch.tensor([-1.0]), torch.tensor([-2.0]), torch.tensor([-1.5]), torch.tensor([-1.0]), 0.5)
    assert loss.item() == pytest.approx(math.log(1.0 + math.exp(-0.75)))
    assert dpo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1)).item() == pytest.approx(math.log(2))
    chosen, rejected, paired = preference_pairs(torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.3, 0.3], [0.2, 0.25, 0.0]]),
                                                margin=0.1)
    assert chosen.tolist() == [1, 0, 1] and rejected.tolist() == [0, 0, 2] and paired.tolist() == [True, False, True]


def test_dpo_with_no_pair_has_zero_loss_and_gradient():
    model = _model().train()
    obj = DPO(WordSetReward(constant=0.5), Tokenizer(TOKENS), ReferencePolicy(model), num_samples=3, max_len=6)
    loss, stats = obj(model, _batch())
    loss.backward()
    assert loss.item() == 0.0 and stats["pairs"] == 0.0
    assert all(torch.count_nonzero(p.grad) == 0 for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("algo", ["grpo", "dpo"])
def test_training_increases_the_reward(algo):
    torch.manual_seed(0)
    model = _model()
    reference = ReferencePolicy(model)
    if algo == "grpo":
        obj = GRPO(WordSetReward(), Tokenizer(TOKENS), reference, num_samples=4, beta=0.01, max_len=5)
    else:
        obj = DPO(WordSetReward(), Tokenizer(TOKENS), reference, num_samples=4, beta=0.5, max_len=5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    rewards = train_rewards(obj, model, _batch(), opt, 40)
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.5, rewards


@pytest.mark.parametrize("algo", ["grpo", "dpo"])
def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_model(algo, tmp_path, monkeypatch):
    """The reference is rebuilt from init_param on the resume, so the resumed run equals one that
    was never stopped (killed in the middle of epoch 2 of 2)."""
    from captionlib.rl import objective_class
    from captionlib.rl.options import RLOptions
    from captionlib.rl.train import train_rl

    data = train_tiny_xe(tmp_path)

    def opts(out):
        return RLOptions(rl_algo=algo, init_param=str(tmp_path / "xe" / "valid.cider_d.best.pth"),
                         cider_df=str(tmp_path / "cider_df.npz"), train_data_dir=str(data), valid_data_dir=str(data),
                         output_dir=str(tmp_path / out), batch_size=2, max_epoch=2, max_len=6, num_iters_per_epoch=3,
                         rl_conf={"num_samples": 3}, lr=1e-3)

    train_rl(opts("whole"))
    cls = objective_class(algo)
    forward, calls = cls.forward, []

    def killed_in_epoch_2(self, model, batch):
        calls.append(1)
        if len(calls) == 5:  # the second update of epoch 2
            raise KeyboardInterrupt("killed")
        return forward(self, model, batch)

    monkeypatch.setattr(cls, "forward", killed_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train_rl(opts("killed"))
    monkeypatch.setattr(cls, "forward", forward)
    train_rl(opts("killed"))
    whole = torch.load(tmp_path / "whole" / "latest.pth", weights_only=True)["model"]
    resumed = torch.load(tmp_path / "killed" / "latest.pth", weights_only=True)["model"]
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)


def test_disable_dropout_makes_the_policy_its_reference_at_the_same_weights():
    """In training mode, dropout alone puts a KL between the policy and its eval-mode reference;
    with disable_dropout (the rl_conf default) the policy runs in eval mode and the KL is 0."""
    from captionlib.models.captioner import Captioner
    from captionlib.rl.grpo import GRPOConf

    assert GRPOConf().disable_dropout is True
    kls = {}
    for disable in (False, True):
        torch.manual_seed(0)
        model = Captioner(len(TOKENS), decoder_conf={"hidden_size": 16, "dropout": 0.5}, encoder_conf={"dropout": 0.5})
        model.train()
        obj = GRPO(WordSetReward(), Tokenizer(TOKENS), ReferencePolicy(model, disable), num_samples=3, max_len=6,
                   sample_logprobs="recompute")
        _, stats = obj(model, _batch())
        kls[disable] = stats["kl"]
        assert model.training is not disable
    assert kls[False] > 1e-3 and abs(kls[True]) < 1e-6
