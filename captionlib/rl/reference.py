"""The reference policy of the KL-regularised objectives (GRPO, DPO): a frozen copy of the
captioner RL starts from (the XE model of ``init_param``).

Shao et al. 2024 (DeepSeekMath, GRPO) and Rafailov et al. 2023 (DPO) keep the policy near a
frozen reference, ``pi_ref``; TRL's trainers copy the initial model for it. So does
:class:`ReferencePolicy`: it is made from the captioner before any update, kept in eval mode
(no dropout, BatchNorm running statistics), without gradients, and out of the objective's
``state_dict`` and optimizer (it is not an ``nn.Module`` attribute). A resumed run rebuilds it
from the same XE model file, so it is the same reference.

The policy is trained in eval mode too (``rl_conf: {disable_dropout: true}``, the default of
these objectives, as TRL's ``disable_dropout``): in training mode its dropout and BatchNorm batch
statistics would make it another network than the reference at the same weights. At the XE
weights of the plain Transformer of ``egs/soundscapes`` (dropout 0.2-0.3; 32 clips, 5 samples
each), training mode gave a k3 KL of 0.25 per token to the reference, and a second teacher-forced
pass of the same samples put 35% of the tokens' ratios outside PPO's [0.8, 1.2]; eval mode gave
a KL of 0.0001 and none.
"""

import copy
from dataclasses import dataclass

import torch

from captionlib.rl.policy_gradient import RL_CONF, teacher_forced_logprobs
from captionlib.train.options import option


@dataclass
class ReferenceConf:
    """The ``rl_conf`` key of the objectives held near a reference policy (PPO, GRPO, DPO)."""

    disable_dropout: bool = option(
        True, "train the policy in eval mode (no dropout, BatchNorm running statistics), as its reference runs, so "
              "that the ratio to the sampling policy and the KL to the reference compare one network (TRL's "
              "disable_dropout); false: training mode, as SCST and REINFORCE+", RL_CONF)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) at the sampled tokens, the unbiased, non-negative
    "k3" estimator of Schulman (2020) that GRPO uses (Shao et al. 2024, eq. 4):
    ``exp(ref - logp) - (ref - logp) - 1``.

    Args:
        logprobs: (rows, length) log-probabilities of the sampled tokens under the policy.
        ref_logprobs: (rows, length) the same under the reference policy (no gradient).

    Returns:
        (rows, length), 0 where the two agree (mask it with the samples' mask).
    """
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


class ReferencePolicy:
    """A frozen copy of a captioner, for the log-probabilities of sampled captions under ``pi_ref``.

    Args:
        model: the captioner before RL (a :class:`~captionlib.models.captioner.Captioner`); it is
            deep-copied, so later updates of ``model`` do not reach the copy.
    """

    def __init__(self, model: torch.nn.Module, disable_dropout: bool = False):
        self.model = copy.deepcopy(model).eval()
        self.model.requires_grad_(False)
        self.disable_dropout = bool(disable_dropout)

    def policy_mode(self, model: torch.nn.Module) -> None:
        """Put the policy ``model`` in eval mode for this step when :attr:`disable_dropout` (its
        gradients are unaffected; the trainer's ``train()`` of each epoch is undone here)."""
        if self.disable_dropout and model.training:
            model.eval()

    def to(self, device) -> "ReferencePolicy":
        """Move the copy to ``device``; returns ``self``."""
        self.model.to(device)
        return self

    @torch.no_grad()
    def logprobs(self, feats: torch.Tensor, lens: torch.Tensor, out, max_len: int, n: int) -> torch.Tensor:
        """The log-probabilities (rows, length) of ``out``'s sampled tokens under the reference.

        Args:
            feats: (batch, frames, n_mels) the clips' features; lens: (batch,) their lengths.
            out: :class:`~captionlib.decode.search.SampleOutput` of ``batch * n`` rows, clip-major.
            max_len: the ``max_len`` the samples were drawn with (a forced eos has log-prob 0).
            n: samples per clip.
        """
        self.model.to(feats.device)
        v = self.model.encode(feats, lens).repeat_interleave(n, 0)
        return teacher_forced_logprobs(self.model, v, out, max_len).logprobs
