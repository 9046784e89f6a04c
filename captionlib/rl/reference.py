"""The reference policy of the KL-regularised objectives (GRPO, DPO): a frozen copy of the
captioner RL starts from (the XE model of ``init_param``).

Shao et al. 2024 (DeepSeekMath, GRPO) and Rafailov et al. 2023 (DPO) keep the policy near a
frozen reference, ``pi_ref``; TRL's trainers copy the initial model for it. So does
:class:`ReferencePolicy`: it is made from the captioner before any update, kept in eval mode
(no dropout, BatchNorm running statistics), without gradients, and out of the objective's
``state_dict`` and optimizer (it is not an ``nn.Module`` attribute). A resumed run rebuilds it
from the same XE model file, so it is the same reference.
"""

import copy

import torch

from captionlib.rl.policy_gradient import teacher_forced_logprobs


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

    def __init__(self, model: torch.nn.Module):
        self.model = copy.deepcopy(model).eval()
        self.model.requires_grad_(False)

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
