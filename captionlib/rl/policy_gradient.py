"""REINFORCE with a baseline over sampled captions: SCST and REINFORCE+.

* SCST (Rennie et al., "Self-critical sequence training for image captioning", CVPR 2017;
  seed 000 eq. 4): one multinomial sample per clip, baseline = reward of the greedy
  caption decoded under ``no_grad`` in eval mode.
* REINFORCE+ (seed 004): ``num_samples`` samples per clip; baseline the greedy reward or
  the mean reward of the *other* samples of the same clip.

Loss = -mean over samples of (r - b) * sum_t log p(w_t | w_<t, x), i.e. minus a sample
estimate of the gradient of the expected reward.
"""

from typing import Dict, List, Tuple

import torch
from torch import nn

from captionlib.decode.search import greedy_search, sample
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer


def mean_of_others(rewards: torch.Tensor) -> torch.Tensor:
    """Leave-one-out mean baseline: for (clips, samples) rewards, each entry's baseline is
    the mean of the other samples of its clip (needs samples >= 2).

    Raises:
        ValueError: fewer than 2 samples per clip.
    """
    n = rewards.size(1)
    if n < 2:
        raise ValueError("the mean baseline needs at least 2 samples per clip")
    return (rewards.sum(1, keepdim=True) - rewards) / (n - 1)


def policy_gradient_loss(logprobs: torch.Tensor, mask: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """-mean_i advantage_i * sum_t logprobs_it.

    Args:
        logprobs: (batch, length) log-probs of the sampled tokens.
        mask: (batch, length) 1 for tokens up to and including eos.
        advantage: (batch,) reward minus baseline (no gradient flows through it).
    """
    return -(advantage.detach() * (logprobs * mask).sum(1)).mean()


class PolicyGradient(nn.Module):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` for SCST/REINFORCE+.

    Args:
        reward: scores candidates of the train clips.
        tokenizer: token ids -> words for the reward.
        num_samples: samples per clip (SCST: 1).
        baseline: ``greedy`` (self-critical) or ``mean`` (of the other samples).
        max_len: maximum caption length in tokens (eos included).
        temperature: sampling temperature (1.0 keeps the estimator unbiased).
    """

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        num_samples: int = 1,
        baseline: str = "greedy",
        max_len: int = 30,
        temperature: float = 1.0,
    ):
        super().__init__()
        if baseline not in ("greedy", "mean"):
            raise ValueError(f"baseline must be greedy or mean, got {baseline!r}")
        if baseline == "mean" and num_samples < 2:
            raise ValueError("baseline 'mean' needs num_samples >= 2")
        self.reward, self.tokenizer = reward, tokenizer
        self.num_samples, self.baseline = num_samples, baseline
        self.max_len, self.temperature = max_len, temperature

    def words(self, tokens: torch.Tensor) -> List[List[str]]:
        """Token id rows -> lists of words (cut at eos)."""
        return [self.tokenizer.ids2text(row).split() for row in tokens.tolist()]

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        clips, feats, lens = batch
        dev = next(model.parameters()).device
        feats, lens = feats.to(dev), lens.to(dev)
        n = self.num_samples
        greedy_words: List[List[str]] = []
        if self.baseline == "greedy":
            was_training = model.training
            model.eval()
            with torch.no_grad():
                greedy_words = self.words(greedy_search(model, model.encode(feats, lens), self.max_len))
            model.train(was_training)
        v = model.encode(feats, lens)
        out = sample(model, v.repeat_interleave(n, 0), self.max_len, temperature=self.temperature)
        sample_words = self.words(out.tokens)
        keys: List[str] = [c for c in clips for _ in range(n)]
        scores = self.reward(keys + list(clips[: len(greedy_words)]), sample_words + greedy_words)
        r_all = torch.as_tensor(scores["reward"], dtype=torch.float32, device=dev)
        r = r_all[: len(keys)].view(len(clips), n)
        b = r_all[len(keys):].view(-1, 1).expand_as(r) if self.baseline == "greedy" else mean_of_others(r)
        adv = (r - b).reshape(-1)
        loss = policy_gradient_loss(out.logprobs, out.mask, adv)
        ntok = out.mask.sum()
        return loss, {
            "reward": r.mean().item(),
            "baseline": b.mean().item(),
            "advantage": adv.mean().item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "sample_len": (ntok / out.mask.size(0)).item(),
        }

