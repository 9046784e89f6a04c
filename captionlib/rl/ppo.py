"""PPO over sampled captions (``--rl_algo ppo``).

Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347, 2017 (eq. 7, the
clipped surrogate), as sequence generators apply it: one caption is an episode whose reward
comes at its end, every token's advantage is the caption's (Ouyang et al. 2022, InstructGPT;
the reference code followed is ruotianluo/self-critical.pytorch's PPO loss, clip 0.2, KL
coefficient 0.02). For each batch of clips, ``num_samples`` captions per clip are drawn once
(the rollout, under ``no_grad``), scored by the ``--reward``, and given the advantage ``r - b``
of a greedy (self-critical) or leave-one-out mean baseline; then ``ppo_epochs`` optimizer steps
are taken on that rollout (the trainer calls the objective ``updates_per_batch`` times per
batch), each minimising::

    L = -1/N sum_i sum_t [ min(rho_it A_i, clip(rho_it, 1 - eps, 1 + eps) A_i) - kl_coef * KL_it ]

with ``rho_it = pi(w_it) / pi_old(w_it)``, ``pi_old`` the policy that drew the rollout (its
log-probabilities from the first step's teacher-forced pass, detached), and ``KL_it`` the k3
estimate of KL(pi || pi_ref) at the token against the frozen XE model
(:class:`~captionlib.rl.reference.ReferencePolicy`). The tokens' log-probabilities come from a
teacher-forced pass of the current policy over the rollout at every step (the encoder runs again
too, so a trained encoder is updated between the steps).

With ``ppo_epochs: 1`` the ratio is 1 and its clip never binds, and with ``kl_coef: 0`` the
gradient is the policy-gradient estimator of the baseline, REINFORCE+'s
(``tests/captionlib/rl/test_ppo.py``). In train mode the decoder's dropout draws new masks in
each step's pass, so the ratio also carries that noise.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from captionlib.decode.search import sample
from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import (
    RL_CONF,
    SampledConf,
    SampledObjective,
    SamplesConf,
    check_baseline,
    mean_of_others,
    teacher_forced_logprobs,
)
from captionlib.rl.reference import ReferenceConf, ReferencePolicy, k3_kl
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option


@dataclass
class PPOConf(SampledConf, SamplesConf, ReferenceConf):
    """The ``rl_conf`` keys of PPO (``--rl_algo ppo``, Schulman et al. 2017); ``sample_logprobs``
    is not read (a rollout is always drawn without gradients, then recomputed)."""

    ppo_epochs: int = option(4, "optimizer steps on each batch's rollout (Schulman et al.: 3-10 epochs)", RL_CONF,
                             valid=">= 1")
    clip_range: float = option(0.2, "eps of the clipped ratio (Schulman et al., self-critical.pytorch: 0.2)",
                               RL_CONF, valid="> 0")
    kl_coef: float = option(0.02, "weight of the KL term to the XE (reference) policy (self-critical.pytorch: "
                                  "0.02; 0: off)", RL_CONF, valid=">= 0")


def ppo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
             advantage: torch.Tensor, clip_range: float = PPOConf.clip_range,
             kl_coef: float = PPOConf.kl_coef) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """PPO's clipped surrogate with a KL term, summed over each caption's tokens, averaged over
    the captions (see the module docstring).

    Args:
        logprobs: (rows, length) the rollout's token log-probabilities under the current policy.
        old_logprobs: (rows, length) the same under the policy that drew it (no gradient).
        ref_logprobs: (rows, length) the same under the reference policy (no gradient).
        mask: (rows, length) 1 for tokens up to and including eos.
        advantage: (rows,) the captions' advantages (no gradient).
        clip_range, kl_coef: see :class:`PPOConf`.

    Returns:
        (the loss, a scalar; detached stats: ``clip_fraction``, the share of tokens whose ratio
        left [1 - eps, 1 + eps], and ``kl``, the mean k3 KL per token).
    """
    ratio = torch.exp(logprobs - old_logprobs.detach())
    adv = advantage.detach().unsqueeze(1)
    surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * adv)
    kl = k3_kl(logprobs, ref_logprobs) * mask
    loss = -((surrogate - kl_coef * kl) * mask).sum(1).mean()
    ntok = mask.sum().clamp(min=1.0)
    clipped = ((ratio - 1.0).abs() > clip_range).to(mask.dtype) * mask
    return loss, {"clip_fraction": (clipped.sum() / ntok).detach(), "kl": (kl.sum() / ntok).detach()}


@dataclass
class Rollout:
    """One batch's samples, kept for the ``ppo_epochs`` steps on it."""

    clips: List[str]
    out: object  # SampleOutput (rows, length), clip-major
    advantage: torch.Tensor  # (rows,)
    reward: torch.Tensor  # (clips, num_samples)
    baseline: torch.Tensor  # (clips, num_samples)
    ref_logprobs: torch.Tensor  # (rows, length)
    old_logprobs: Optional[torch.Tensor] = None  # (rows, length), from the first step's pass


class PPO(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` of PPO, called
    :attr:`updates_per_batch` times per batch by the trainer.

    Args:
        reward, tokenizer, max_len, temperature, baseline_encoding: see :class:`SampledObjective`.
        reference: the frozen reference policy (:class:`~captionlib.rl.reference.ReferencePolicy`).
        num_samples, baseline, ppo_epochs, clip_range, kl_coef: see :class:`PPOConf`.

    Stats: ``reward``, ``baseline``, ``advantage`` (means over the rollout), ``clip_fraction``,
    ``kl``, ``entropy`` (per token), ``sample_len``.

    Raises:
        ValueError: ``baseline: mean`` with one sample, ``ppo_epochs < 1``, ``clip_range <= 0``
            or a negative ``kl_coef``.
    """

    row_sharded_randomness = True  # the same random draws on every data-parallel rank
    Conf = PPOConf
    paper = "Schulman et al. 2017 (PPO)"

    def __init__(self, reward: Reward, tokenizer: Tokenizer, reference: ReferencePolicy,
                 num_samples: int = PPOConf.num_samples, baseline: str = PPOConf.baseline,
                 ppo_epochs: int = PPOConf.ppo_epochs, clip_range: float = PPOConf.clip_range,
                 kl_coef: float = PPOConf.kl_coef, max_len: int = DEFAULTS.max_len,
                 temperature: float = DEFAULTS.temperature, baseline_encoding: str = PPOConf.baseline_encoding):
        super().__init__(reward, tokenizer, max_len, temperature, baseline_encoding, sample_logprobs="recompute")
        check_baseline(baseline, num_samples)
        if ppo_epochs < 1 or not clip_range > 0 or kl_coef < 0:
            raise ValueError(f"ppo needs ppo_epochs >= 1, clip_range > 0 and kl_coef >= 0, got {ppo_epochs}, "
                             f"{clip_range}, {kl_coef}")
        self.reference = reference
        self.num_samples, self.baseline = num_samples, baseline
        self.updates_per_batch, self.clip_range, self.kl_coef = ppo_epochs, clip_range, kl_coef
        self._calls, self._rollout = 0, None

    @classmethod
    def check_options(cls, opts, conf) -> None:
        """Raises ValueError: ``baseline: mean`` with ``num_samples`` < 2, or ``accum_grad`` > 1
        (each of PPO's steps is one batch's)."""
        check_baseline(conf.baseline, conf.num_samples)
        if opts.accum_grad > 1 and conf.ppo_epochs > 1:
            raise ValueError(f"ppo takes ppo_epochs optimizer steps per batch: give accum_grad 1, not "
                             f"{opts.accum_grad}")

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "PPO":
        """PPO from :class:`captionlib.rl.options.RLOptions` (``max_len``, ``temperature``) and its
        ``rl_conf`` block ``conf`` (:class:`PPOConf`); the reference is a frozen copy of ``model``
        as given (the XE model of ``init_param``)."""
        reference = ReferencePolicy(model, conf.disable_dropout)
        return cls(reward, tokenizer, reference, conf.num_samples, conf.baseline, conf.ppo_epochs,
                   conf.clip_range, conf.kl_coef, opts.max_len, opts.temperature, conf.baseline_encoding)

    def rollout(self, model, clips: List[str], v: torch.Tensor, feats: torch.Tensor, lens: torch.Tensor) -> Rollout:
        """Draw and score a batch's samples (without gradients) and their advantages."""
        n = self.num_samples
        greedy_words = self.greedy_words(model, v, feats, lens) if self.baseline == "greedy" else []
        with torch.no_grad():
            out = sample(model, v.repeat_interleave(n, 0), self.max_len, temperature=self.temperature)
        words = self.words(out.tokens)
        keys = [c for c in clips for _ in range(n)]
        r_all = self.rewards(keys + clips[: len(greedy_words)], words + greedy_words, v.device)
        r = r_all[: len(keys)].view(len(clips), n)
        b = r_all[len(keys):].view(-1, 1).expand_as(r) if self.baseline == "greedy" else mean_of_others(r)
        ref = self.reference.logprobs(feats, lens, out, self.max_len, n)
        return Rollout(clips, out, (r - b).reshape(-1), r, b, ref)

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        self.reference.policy_mode(model)
        clips, feats, lens = self.inputs(model, batch)
        v = model.encode(feats, lens)
        # the trainer calls it updates_per_batch times per batch: a new batch starts a new rollout
        if self._calls % self.updates_per_batch == 0 or self._rollout is None or self._rollout.clips != clips:
            self._rollout = self.rollout(model, clips, v, feats, lens)
        self._calls += 1
        rollout = self._rollout
        out = teacher_forced_logprobs(model, v.repeat_interleave(self.num_samples, 0), rollout.out, self.max_len)
        if rollout.old_logprobs is None:  # the rollout's first step: pi_old is this pass's policy
            rollout.old_logprobs = out.logprobs.detach()
        loss, extra = ppo_loss(out.logprobs, rollout.old_logprobs, rollout.ref_logprobs, out.mask, rollout.advantage,
                               self.clip_range, self.kl_coef)
        ntok = out.mask.sum()
        return loss, {
            "reward": rollout.reward.mean().item(),
            "baseline": rollout.baseline.mean().item(),
            "advantage": rollout.advantage.mean().item(),
            "clip_fraction": extra["clip_fraction"].item(),
            "kl": extra["kl"].item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "sample_len": (ntok / out.mask.size(0)).item(),
        }
