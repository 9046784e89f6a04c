"""Online DPO: direct preference optimisation on the policy's own samples (``--rl_algo dpo``).

Rafailov et al., "Direct Preference Optimization: Your Language Model is Secretly a Reward
Model", NeurIPS 2023, eq. 7, in the online form of Guo et al., "Direct Language Model
Alignment from Online AI Feedback", arXiv:2402.04792, 2024 (the preference pairs are drawn
from the current policy and ranked by a scorer, here the ``--reward``); the reference code
followed is TRL's ``DPOTrainer`` / ``OnlineDPOTrainer`` (sigmoid loss). For each clip,
``num_samples`` captions are sampled and scored; the best, y_w, and the worst, y_l, form a
pair when their rewards differ by more than ``margin``, and the loss is::

    L = -log sigmoid( beta * [ (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)) ] )

averaged over the clips with a pair (a clip whose samples all score alike gives none), with
``log pi(y)`` the caption's summed token log-probability and ``pi_ref`` the frozen XE model
(:class:`~captionlib.rl.reference.ReferencePolicy`). The reward's size does not enter the loss,
only its order: DPO learns from which caption is better, not by how much.
"""

from dataclasses import dataclass
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import RL_CONF, LogprobsConf, SampledObjective
from captionlib.rl.reference import ReferenceConf, ReferencePolicy
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option


@dataclass
class DPOConf(LogprobsConf, ReferenceConf):
    """The ``rl_conf`` keys of online DPO (``--rl_algo dpo``, Rafailov et al. 2023)."""

    num_samples: int = option(4, "k, captions sampled per clip; its best and worst form the pair", RL_CONF,
                              valid=">= 2")
    beta: float = option(0.1, "the inverse temperature of the implicit reward, i.e. how near the XE (reference) "
                              "policy the policy is held (Rafailov et al.: 0.1)", RL_CONF, valid="> 0")
    margin: float = option(0.0, "a pair needs the best caption's reward above the worst's by more than this",
                           RL_CONF, valid=">= 0")


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float = DPOConf.beta) -> torch.Tensor:
    """The DPO loss per pair (Rafailov et al. 2023, eq. 7; TRL's ``sigmoid`` loss).

    Args:
        policy_chosen, policy_rejected: (pairs,) summed log-probabilities of the preferred and
            the dispreferred caption under the policy.
        ref_chosen, ref_rejected: (pairs,) the same under the reference policy.
        beta: the implicit reward's inverse temperature.

    Returns:
        (pairs,) ``-log sigmoid(beta * ((pc - rc) - (pr - rr)))``.
    """
    return -F.logsigmoid(beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)))


def preference_pairs(rewards: torch.Tensor, margin: float = DPOConf.margin) -> Tuple[torch.Tensor, ...]:
    """The best and worst sample of each clip of (clips, k) rewards (the first of ties) and
    whether they form a pair (best - worst > ``margin``).

    Returns:
        (chosen index, rejected index, has a pair), each (clips,), indices into the k samples.
    """
    chosen, rejected = rewards.argmax(1), rewards.argmin(1)
    rows = torch.arange(rewards.size(0), device=rewards.device)
    return chosen, rejected, rewards[rows, chosen] - rewards[rows, rejected] > margin


class DPO(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` of online DPO.

    Args:
        reward, tokenizer, max_len, temperature, sample_logprobs: see :class:`SampledObjective`.
        reference: the frozen reference policy (:class:`~captionlib.rl.reference.ReferencePolicy`).
        num_samples, beta, margin: see :class:`DPOConf`.

    Stats: ``reward`` (mean sampled reward), ``baseline`` (mean reward of the rejected captions),
    ``advantage`` (mean reward gap of the pairs), ``pairs`` (fraction of clips with a pair),
    ``margin_logit`` (mean beta-scaled log-ratio difference of the pairs: the implicit reward
    gap), ``entropy`` (per token), ``sample_len``.

    Raises:
        ValueError: ``num_samples < 2``, ``beta <= 0`` or a negative ``margin``.
    """

    row_sharded_randomness = True  # the same random draws on every data-parallel rank
    Conf = DPOConf
    paper = "Rafailov et al. 2023 (DPO, online pairs)"

    def __init__(self, reward: Reward, tokenizer: Tokenizer, reference: ReferencePolicy,
                 num_samples: int = DPOConf.num_samples, beta: float = DPOConf.beta, margin: float = DPOConf.margin,
                 max_len: int = DEFAULTS.max_len, temperature: float = DEFAULTS.temperature,
                 sample_logprobs: str = DPOConf.sample_logprobs):
        super().__init__(reward, tokenizer, max_len, temperature, sample_logprobs=sample_logprobs)
        if num_samples < 2 or not beta > 0 or margin < 0:
            raise ValueError(f"dpo needs num_samples >= 2, beta > 0 and margin >= 0, got {num_samples}, {beta}, "
                             f"{margin}")
        self.reference = reference
        self.num_samples, self.beta, self.margin = num_samples, beta, margin

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "DPO":
        """Online DPO from :class:`captionlib.rl.options.RLOptions` (``max_len``, ``temperature``)
        and its ``rl_conf`` block ``conf`` (:class:`DPOConf`); the reference is a frozen copy of
        ``model`` as given (the XE model of ``init_param``)."""
        reference = ReferencePolicy(model, conf.disable_dropout)
        return cls(reward, tokenizer, reference, conf.num_samples, conf.beta, conf.margin,
                   opts.max_len, opts.temperature, conf.sample_logprobs)

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        self.reference.policy_mode(model)
        n = self.num_samples
        clips, feats, lens, out, r = self.scored_samples(model, batch, n)
        chosen, rejected, paired = preference_pairs(r, self.margin)
        seq = (out.logprobs * out.mask).sum(1).view(len(clips), n)
        ref = (self.reference.logprobs(feats, lens, out, self.max_len, n) * out.mask).sum(1).view(len(clips), n)
        rows = torch.arange(len(clips), device=r.device)
        losses = dpo_loss(seq[rows, chosen], seq[rows, rejected], ref[rows, chosen], ref[rows, rejected], self.beta)
        # the mean over the clips with a pair; none: 0, with the graph kept (every rank steps together)
        loss = (losses * paired).sum() / paired.sum().clamp(min=1)
        logit = self.beta * ((seq[rows, chosen] - ref[rows, chosen]) - (seq[rows, rejected] - ref[rows, rejected]))
        ntok = out.mask.sum()
        npairs = max(int(paired.sum()), 1)
        return loss, {
            "reward": r.mean().item(),
            "baseline": r[rows, rejected].mean().item(),
            "advantage": ((r[rows, chosen] - r[rows, rejected]) * paired).sum().item() / npairs,
            "pairs": paired.float().mean().item(),
            "margin_logit": (logit.detach() * paired).sum().item() / npairs,
            "entropy": (out.entropy.sum() / ntok).item(),
            "sample_len": (ntok / out.mask.size(0)).item(),
        }
