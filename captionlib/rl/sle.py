"""Sequence-level exploration (SLE): self-critical precision term + diversity term.

Chen, Yuan and Jin, "Better Captioning with Sequence-Level Exploration", CVPR 2020
(seed 001), eq. 8-16 and Algorithm 1 (its XE epochs are our stage 5; this module is the
RL phase). For each clip ``x_i`` we draw ``s`` captions ``y_1..y_s`` (multinomial sampling
at ``temperature``) and minimise the surrogate loss of eq. 15-16 with the baselines of
sec. 4.3::

    L_i = (1/s) sum_j [ alpha * A_j^prec + (1 - alpha) * A_j^div ] * (-log p(y_j | x_i))

    A_j^prec = r(y_j) - r(y_greedy)                           (self-critical baseline)
    q_j      = (1/s) sum_k dbar(y_j, y_k)                     (diversity "reward" of y_j)
    A_j^div  = 2 * (q_j - (1/s^2) sum_j' sum_k dbar(y_j', y_k))

``r`` is the configured sequence reward (CIDEr-D by default, the paper's Delta), the greedy
caption is decoded in eval mode under ``no_grad``, ``log p(y_j | x_i)`` is the sum of the
sampled tokens' log-probabilities up to and including eos, and the loss is averaged over
the clips of the batch.

The distance (sec. 4.3: "we use BLEU3 + BLEU4 to calculate d(y, y')"; sec. 4.1: d
"measures the difference" of two captions)::

    d(y, y')    = 1 - (BLEU-3(y | ref y') + BLEU-4(y | ref y')) / 2,   0 if y == y'
    dbar(y, y') = (d(y, y') + d(y', y)) / 2

BLEU-k is the sentence BLEU of pycocoevalcap (:func:`captionlib.metrics.bleu.pairwise_bleu`,
y' the single reference, brevity penalty and 1e-15/1e-9 smoothing included). BLEU is a
similarity in [0, 1], so 1 - mean(BLEU-3, BLEU-4) is the matching distance in [0, 1]
(the sum BLEU3 + BLEU4 is halved to keep d in the unit range; this only rescales the
diversity term). Identical captions get d = 0 exactly: pycocoevalcap's smoothed BLEU-4 of
a caption shorter than 4 words against itself is ~0.03, not 1, and a distance must vanish
on equal arguments. BLEU with y' as reference is *not* symmetric in general (guess counts
and the brevity penalty use the hypothesis length); it is symmetric for captions of equal
length. The gradient of the diversity objective E_y E_y' d(y, y') (eq. 12-13) is
``E_y[(E_y' d(y, y') + E_y' d(y', y)) grad log p(y)]``, so the unbiased Monte-Carlo
multiplier of sample j is ``(1/s) sum_k (d(y_j, y_k) + d(y_k, y_j)) = (2/s) sum_k
dbar(y_j, y_k)``: exactly eq. 16's ``(2/s) sum_k d(y_j, y_k)`` whenever d is symmetric,
and the correct estimator when it is not. The k = j term is kept as in eq. 14 (it is 0).

Baseline of the diversity term: sec. 4.3 sets it to the average of all pairwise distances
``(1/s^2) sum_j sum_k d`` = the mean over j of the per-sample diversity reward
``q_j = (1/s) sum_k d(y_j, y_k)``; eq. 16's factor 2 (from the product p(y) p(y') in
eq. 12) multiplies the difference, so ``A^div`` sums to 0 over the samples of a clip.
"""

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from captionlib.decode.search import sample
from captionlib.metrics.bleu import pairwise_bleu
from captionlib.rl.policy_gradient import SampledObjective
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer


def bleu_distances(captions: Sequence[Sequence[str]]) -> np.ndarray:
    """Directed BLEU distances ``d(y_j, y_k)`` between the captions of one clip.

    Args:
        captions: ``s`` word lists.

    Returns:
        float64 ``(s, s)``: ``[j, k] = 1 - (BLEU-3 + BLEU-4)(y_j | ref y_k) / 2``, 0 where
        ``y_j == y_k`` (so the diagonal is 0). In [0, 1].
    """
    s = len(captions)
    if s == 0:
        return np.zeros((0, 0))
    bleu = pairwise_bleu(captions, n=4)
    dist = 1.0 - (bleu[:, :, 2] + bleu[:, :, 3]) / 2.0
    for j in range(s):
        for k in range(s):
            if list(captions[j]) == list(captions[k]):
                dist[j, k] = 0.0
    return np.clip(dist, 0.0, 1.0)


def symmetric_distances(captions: Sequence[Sequence[str]]) -> np.ndarray:
    """``dbar = (d + d^T) / 2`` of :func:`bleu_distances`, float64 ``(s, s)``."""
    d = bleu_distances(captions)
    return (d + d.T) / 2.0


def diversity_advantages(dbar: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Diversity reward, baseline and advantage of eq. 16 with the sec. 4.3 baseline.

    Args:
        dbar: (clips, s, s) symmetric distances between the samples of each clip.

    Returns:
        ``(q, b, adv)``, each (clips, s): ``q_j = (1/s) sum_k dbar[j, k]``,
        ``b = (1/s^2) sum_{j,k} dbar`` (broadcast) and ``adv = 2 * (q - b)``.
    """
    q = dbar.mean(2)
    b = q.mean(1, keepdim=True).expand_as(q)
    return q, b, 2.0 * (q - b)


def sle_loss(
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    greedy_rewards: torch.Tensor,
    dbar: torch.Tensor,
    alpha: float,
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """Surrogate loss of eq. 15-16 (averaged over clips) from sampled log-probs.

    Args:
        logprobs: (clips * s, length) log-probs of the sampled tokens, samples of a clip
            consecutive (``repeat_interleave`` order).
        mask: (clips * s, length) 1.0 up to and including eos.
        rewards: (clips, s) sequence rewards r(y_j) (e.g. CIDEr-D).
        greedy_rewards: (clips,) rewards of the greedy captions (self-critical baseline).
        dbar: (clips, s, s) symmetric distances (:func:`symmetric_distances`).
        alpha: weight of the precision term in [0, 1].

    Returns:
        ``(loss, parts)``; ``parts`` holds (clips, s) tensors ``prec_adv``, ``div_reward``,
        ``div_baseline``, ``div_adv``, ``adv`` (all detached).
    """
    clips, s = rewards.shape
    prec_adv = rewards - greedy_rewards.view(-1, 1)
    q, b, div_adv = diversity_advantages(dbar)
    adv = (alpha * prec_adv + (1.0 - alpha) * div_adv).detach()
    seq_logp = (logprobs * mask).sum(1).view(clips, s)
    loss = -(adv * seq_logp).mean()
    return loss, {"prec_adv": prec_adv, "div_reward": q, "div_baseline": b, "div_adv": div_adv, "adv": adv}


class SLE(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` of seed 001.

    Args:
        reward, tokenizer, max_len, temperature, baseline_encoding: see
            :class:`SampledObjective` (reward = the paper's Delta, CIDEr-D by default).
        num_samples: ``s`` samples per clip (paper: 5); >= 2 (the diversity term needs pairs).
        alpha: weight of the precision term (paper: 0.75); ``alpha = 1`` is SCST with
            ``s`` samples and the greedy baseline.

    Stats (floats, batch means): ``reward`` (sampled captions), ``baseline`` (greedy
    captions), ``advantage`` (combined ``alpha A^prec + (1-alpha) A^div``), ``entropy``
    (per token, nats), ``sample_len``, ``precision_advantage`` (mean ``A^prec``),
    ``diversity`` (mean ``dbar`` over pairs of *distinct* samples j != k; the diversity
    baseline equals ``(s-1)/s`` times it because the diagonal is 0), ``diversity_baseline``,
    ``diversity_advantage`` (mean ``|A^div|``; its signed mean is 0 by construction).

    Raises:
        ValueError: ``num_samples < 2`` or ``alpha`` outside [0, 1].
    """

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        num_samples: int = 5,
        alpha: float = 0.75,
        max_len: int = 30,
        temperature: float = 1.0,
        baseline_encoding: str = "shared",
    ):
        super().__init__(reward, tokenizer, max_len, temperature, baseline_encoding)
        if num_samples < 2:
            raise ValueError(f"sle needs num_samples >= 2 (pairs of samples), got {num_samples}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"sle alpha must be in [0, 1], got {alpha}")
        self.num_samples, self.alpha = num_samples, float(alpha)

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        clips, feats, lens = self.inputs(model, batch)
        s = self.num_samples
        v = model.encode(feats, lens)
        greedy_words = self.greedy_words(model, v, feats, lens)
        out = sample(model, v.repeat_interleave(s, 0), self.max_len, temperature=self.temperature)
        keys: List[str] = [c for c in clips for _ in range(s)]
        words = self.words(out.tokens)
        r_all = self.rewards(keys + clips, words + greedy_words, v.device)
        r = r_all[: len(keys)].view(len(clips), s)
        g = r_all[len(keys):]
        dbar = torch.as_tensor(
            np.stack([symmetric_distances(words[i * s : (i + 1) * s]) for i in range(len(clips))]),
            dtype=torch.float32,
            device=v.device,
        )
        loss, parts = sle_loss(out.logprobs, out.mask, r, g, dbar, self.alpha)
        ntok = out.mask.sum()
        off_diag = dbar.sum((1, 2)) / (s * (s - 1))
        return loss, {
            "reward": r.mean().item(),
            "baseline": g.mean().item(),
            "advantage": parts["adv"].mean().item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "sample_len": (ntok / out.mask.size(0)).item(),
            "precision_advantage": parts["prec_adv"].mean().item(),
            "diversity": off_diag.mean().item(),
            "diversity_baseline": parts["div_baseline"].mean().item(),
            "diversity_advantage": parts["div_adv"].abs().mean().item(),
        }
