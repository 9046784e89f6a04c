"""GRPO: group-relative policy optimisation (``--rl_algo grpo``).

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
Models", arXiv:2402.03300, 2024, sec. 4.1 (eq. 3, outcome supervision); the reference code
followed is TRL's ``GRPOTrainer`` (Hugging Face, ``trl/trainer/grpo_trainer.py``). For each clip,
``num_samples`` captions o_1..o_G are sampled (the group) and scored by the ``--reward``; each
caption's advantage is its reward relative to the group's::

    A_i = (r_i - mean(r)) / (std(r) + eps)                    (scale_rewards: true)
    L = -1/G sum_i 1/|o_i| sum_t [ A_i - beta * KL_t ]         (length_normalise: true)

with ``KL_t`` the k3 estimate of KL(pi || pi_ref) at each sampled token
(:func:`captionlib.rl.reference.k3_kl`) against the frozen XE model
(:class:`~captionlib.rl.reference.ReferencePolicy`), and the gradient of the ratio
``pi / pi_old`` taken at ``pi_old = pi``. This is one update per batch of samples (DeepSeekMath's
mu = 1, TRL's default ``num_iterations=1``): the ratio is then 1, so its PPO-style clip, which
only acts on samples reused for several updates, never binds and is not formed here.

Where it differs from REINFORCE+ with ``baseline: mean`` (:class:`~captionlib.rl.policy_gradient.PolicyGradient`):

* the baseline is the mean of the whole group, the caption's own reward included, where
  REINFORCE+ takes the mean of the *other* samples (leave-one-out, unbiased):
  ``r_i - mean(r) = (G - 1) / G * (r_i - mean_{j != i} r_j)``;
* the advantages are divided by the group's standard deviation (``scale_rewards``), which
  makes every clip's step the same size whatever its reward scale (and biases the gradient);
* each caption's term is averaged over its tokens (``length_normalise``), where REINFORCE+
  sums them;
* the KL term to the reference policy (``beta``).

With ``scale_rewards: false``, ``length_normalise: false`` and ``beta: 0`` the loss is
``(G - 1) / G`` times REINFORCE+'s on the same samples (``tests/captionlib/rl/test_grpo.py``).
"""

from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import RL_CONF, LogprobsConf, SampledObjective
from captionlib.rl.reference import ReferenceConf, ReferencePolicy, k3_kl
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option

#: The eps of the advantage's denominator (TRL: 1e-4).
STD_EPS = 1e-4


@dataclass
class GRPOConf(LogprobsConf, ReferenceConf):
    """The ``rl_conf`` keys of GRPO (``--rl_algo grpo``, Shao et al. 2024)."""

    num_samples: int = option(5, "G, captions sampled per clip (the group)", RL_CONF, valid=">= 2")
    beta: float = option(0.04, "weight of the KL term to the XE (reference) policy (DeepSeekMath: 0.04; 0: off)",
                         RL_CONF, valid=">= 0")
    scale_rewards: bool = option(True, "divide the advantages by the group's reward std (DeepSeekMath, TRL)",
                                 RL_CONF)
    length_normalise: bool = option(True, "average each caption's term over its tokens (DeepSeekMath eq. 3); "
                                          "false: sum them, as SCST and REINFORCE+", RL_CONF)


def group_advantages(rewards: torch.Tensor, scale: bool = GRPOConf.scale_rewards) -> torch.Tensor:
    """GRPO's advantages of (clips, G) rewards: ``r - mean`` over each clip's group, divided by
    the group's (unbiased) standard deviation + :data:`STD_EPS` when ``scale``."""
    adv = rewards - rewards.mean(1, keepdim=True)
    if scale:
        adv = adv / (rewards.std(1, keepdim=True) + STD_EPS)
    return adv


def grpo_loss(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, advantage: torch.Tensor,
              beta: float = GRPOConf.beta,
              length_normalise: bool = GRPOConf.length_normalise) -> Tuple[torch.Tensor, torch.Tensor]:
    """The GRPO loss of one update per batch of samples (see the module docstring).

    Args:
        logprobs: (rows, length) the samples' token log-probabilities under the policy, with gradients.
        ref_logprobs: (rows, length) the same under the reference policy.
        mask: (rows, length) 1 for tokens up to and including eos.
        advantage: (rows,) the samples' advantages (no gradient flows through them).
        beta: weight of the KL term; length_normalise: average (true) or sum over tokens.

    Returns:
        (the loss, a scalar; the mean KL per token, detached).
    """
    ratio = torch.exp(logprobs - logprobs.detach())  # pi / pi_old at pi_old = pi: 1, with pi's gradient
    kl = k3_kl(logprobs, ref_logprobs) * mask
    per_token = -(ratio * advantage.detach().unsqueeze(1) - beta * kl) * mask
    lengths = mask.sum(1)
    per_sample = per_token.sum(1) / lengths.clamp(min=1.0) if length_normalise else per_token.sum(1)
    return per_sample.mean(), (kl.sum() / lengths.sum().clamp(min=1.0)).detach()


class GRPO(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` of GRPO.

    Args:
        reward, tokenizer, max_len, temperature, sample_logprobs: see :class:`SampledObjective`.
        reference: the frozen reference policy (:class:`~captionlib.rl.reference.ReferencePolicy`).
        num_samples, beta, scale_rewards, length_normalise: see :class:`GRPOConf`.

    Stats: ``reward`` (mean sampled reward), ``baseline`` (mean group mean, i.e. the same),
    ``advantage`` (mean |A|), ``kl`` (mean k3 KL per token to the reference), ``entropy`` (per
    token), ``sample_len``.

    Raises:
        ValueError: ``num_samples < 2`` (a group needs two) or a negative ``beta``.
    """

    row_sharded_randomness = True  # the same random draws on every data-parallel rank
    Conf = GRPOConf
    paper = "Shao et al. 2024 (GRPO)"

    def __init__(self, reward: Reward, tokenizer: Tokenizer, reference: ReferencePolicy,
                 num_samples: int = GRPOConf.num_samples, beta: float = GRPOConf.beta,
                 scale_rewards: bool = GRPOConf.scale_rewards, length_normalise: bool = GRPOConf.length_normalise,
                 max_len: int = DEFAULTS.max_len, temperature: float = DEFAULTS.temperature,
                 sample_logprobs: str = GRPOConf.sample_logprobs):
        super().__init__(reward, tokenizer, max_len, temperature, sample_logprobs=sample_logprobs)
        if num_samples < 2:
            raise ValueError(f"grpo num_samples must be >= 2 (a group), got {num_samples}")
        if beta < 0:
            raise ValueError(f"grpo beta must be >= 0, got {beta}")
        self.reference = reference
        self.num_samples, self.beta = num_samples, beta
        self.scale_rewards, self.length_normalise = scale_rewards, length_normalise

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "GRPO":
        """GRPO from :class:`captionlib.rl.options.RLOptions` (``max_len``, ``temperature``) and its
        ``rl_conf`` block ``conf`` (:class:`GRPOConf`); the reference is a frozen copy of ``model``
        as given (the XE model of ``init_param``)."""
        reference = ReferencePolicy(model, conf.disable_dropout)
        return cls(reward, tokenizer, reference, conf.num_samples, conf.beta, conf.scale_rewards,
                   conf.length_normalise, opts.max_len, opts.temperature, conf.sample_logprobs)

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        self.reference.policy_mode(model)
        n = self.num_samples
        clips, feats, lens, out, r = self.scored_samples(model, batch, n)
        adv = group_advantages(r, self.scale_rewards).reshape(-1)
        ref = self.reference.logprobs(feats, lens, out, self.max_len, n)
        loss, kl = grpo_loss(out.logprobs, ref, out.mask, adv, self.beta, self.length_normalise)
        ntok = out.mask.sum()
        return loss, {
            "reward": r.mean().item(),
            "baseline": r.mean().item(),
            "advantage": adv.abs().mean().item(),
            "kl": kl.item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "sample_len": (ntok / out.mask.size(0)).item(),
        }
