"""Sequence-level exploration (SLE): self-critical precision term + diversity term.

Chen, Yuan and Jin, "Better Captioning with Sequence-Level Exploration", CVPR 2020
(seed 001), eq. 8-16 and Algorithm 1 (its XE epochs are our stage 5; this module is the
RL phase). For each clip ``x_i`` we draw ``s`` captions ``y_1..y_s`` (multinomial sampling
at ``temperature``) and minimise the surrogate loss of eq. 15-16 with baselines::

    L_i = (1/s) sum_j [ alpha * A_j^prec + (1 - alpha) * A_j^div ] * (-log p(y_j | x_i))

    A_j^prec = r(y_j) - r(y_greedy)                 (self-critical baseline, sec. 4.3)
    A_j^div  = 2 * (q_j - b_j)                      (see "diversity estimator" below)

``r`` is the configured sequence reward (CIDEr-D by default, the paper's Delta), the greedy
caption is decoded in eval mode under ``no_grad``, ``log p(y_j | x_i)`` is the sum of the
sampled tokens' log-probabilities up to and including eos, and the loss is averaged over
the clips of the batch. Its expected gradient is that of
``-(alpha * E r(y) + (1 - alpha) * D)`` (eq. 9), ``D = E_{y,y'~p(.|x_i)} d(y, y')`` (eq. 12),
averaged over clips (exactly so for ``diversity_baseline="leave_one_out"``).

Distance (option ``distance``; sec. 4.3: "we use BLEU3 + BLEU4 to calculate d(y, y')",
sec. 4.1: d "measures the difference" of two captions)::

    bleu34_sum  (default): d(y, y') = 2 - BLEU-3(y | ref y') - BLEU-4(y | ref y'),  in [0, 2]
    bleu34_mean:           d(y, y') = 1 - (BLEU-3 + BLEU-4)(y | ref y') / 2,        in [0, 1]
    both: d(y, y') = 0 if y == y';   dbar(y, y') = (d(y, y') + d(y', y)) / 2

BLEU-k is the sentence BLEU of pycocoevalcap (:func:`captionlib.metrics.bleu.pairwise_bleu`,
y' the single reference, brevity penalty and 1e-15/1e-9 smoothing included); BLEU is a
similarity in [0, 1], so ``2 - B3 - B4`` is the distance made of the paper's sum.
``bleu34_mean`` is half of it, which halves the diversity weight: with ``alpha = 0.75`` it
acts like ``alpha = 6/7 ~ 0.86`` with ``bleu34_sum``. Identical captions get d = 0 exactly:
pycocoevalcap's smoothed BLEU-4 of a caption shorter than 4 words against itself is
~0.03, not 1, and a distance must vanish on equal arguments. BLEU with y' as reference is
*not* symmetric in general (guess counts and the brevity penalty use the hypothesis
length); it is for captions of equal length. Only ``dbar`` enters the estimator.

Diversity estimator (option ``diversity_baseline``). Derivation of ``leave_one_out``
(default, unbiased). For one clip, with p = p(.|x_i) and iid samples y_1..y_s ~ p::

    D     = E_{y,y'} d(y, y') = E_{y,y'} dbar(y, y')                               (eq. 12)
    grad D = E_{y,y'}[d(y, y') (grad log p(y) + grad log p(y'))]                   (eq. 13)
           = 2 E_{y,y'}[dbar(y, y') grad log p(y)]

The U-statistic ``U = 1/(s(s-1)) sum_{j != k} dbar(y_j, y_k)`` has ``E U = D`` for every
theta, so by the score-function identity for the joint density prod_j p(y_j),
``grad D = E[U sum_j grad log p(y_j)]``. For each j split U into the 2(s-1) ordered pairs
that involve j and the (s-1)(s-2) pairs that do not::

    U = 2/(s(s-1)) sum_{k != j} dbar(y_j, y_k) + 1/(s(s-1)) sum_{k != l; k, l != j} dbar(y_k, y_l)

The second part is a function of y_{-j} (the other samples) only, which is independent of
y_j, so ``E[f(y_{-j}) grad log p(y_j)] = E f * E grad log p(y_j) = 0``: it may be dropped
or replaced by any baseline ``b_j(y_{-j})``. With the factor 1/s of eq. 15 this gives::

    grad D = E[(1/s) sum_j A_j^div grad log p(y_j)],   A_j^div = 2 (q_j - b_j)
    q_j = 1/(s-1) sum_{k != j} dbar(y_j, y_k)                           (diversity "reward")
    b_j = 1/((s-1)(s-2)) sum_{k != l; k, l != j} dbar(y_k, y_l)         (0 when s = 2)

``E[q_j | y_j] = E_{y'} dbar(y_j, y')`` is y_j's exact diversity reward, and ``b_j``, the
mean distance between the *other* samples, is an unbiased estimate of its mean D; for
s >= 3, ``sum_j b_j = sum_j q_j = s U``, so A^div still sums to 0 over the samples of a
clip (for s = 2 no pair is left without j: b = 0, still unbiased, higher variance).

``all_pairs`` is the form of the paper's sec. 4.3 text: eq. 14's multiplier with k = j
included, ``q_j = (1/s) sum_k dbar(y_j, y_k)``, and the baseline "the average of all the
pairwise distances between sampled captions" ``b = (1/s^2) sum_j sum_k dbar(y_j, y_k)``,
``A_j^div = 2 (q_j - b)``. The baseline contains y_j's own distances, so it is not
independent of y_j: ``A_j = 2(s-2)/s^2 sum_{k != j} dbar(y_j, y_k) - (2/s^2) sum_{pairs
without j}``, whose expected gradient is ``(s-1)(s-2)/s^2 * grad D`` (0.48 at s = 5, 2/9 at
s = 3, 0 at s = 2): a biased estimator that shrinks the diversity weight (exact
enumeration in ``tests/captionlib/rl/test_estimators.py``); at s = 5, alpha = 0.75 it acts
like an unbiased estimator with alpha = 0.75 / (0.75 + 0.25 * 0.48) ~ 0.86. (Eq. 14 alone,
without a baseline, gives ``(s-1)/s * grad D``: its k = j term is 0, which the 1/(s-1) of
``leave_one_out``'s q_j accounts for.)
"""

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from captionlib.metrics.bleu import pairwise_bleu
from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import RL_CONF, SampledConf, SampledObjective
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option

#: d(y, y') of the diversity term and its baseline (see the module docstring).
DISTANCES = ("bleu34_sum", "bleu34_mean")
DIVERSITY_BASELINES = ("leave_one_out", "all_pairs")


@dataclass
class SLEConf(SampledConf):
    """The ``rl_conf`` keys of SLE (``--rl_algo sle``, seed 001)."""

    num_samples: int = option(5, "s, captions sampled per clip (seed 001: 5); the diversity term needs pairs",
                              RL_CONF, valid=">= 2")
    alpha: float = option(0.75, "weight of the precision term (seed 001: 0.75; 1: SCST with s samples)", RL_CONF,
                          valid="[0, 1]")
    distance: str = option(
        "bleu34_sum", "d(y, y') = 2 - BLEU-3 - BLEU-4 (bleu34_sum, seed 001 sec. 4.3) or 1 - (BLEU-3 + BLEU-4) / 2 "
                      "(bleu34_mean: half the diversity weight)", RL_CONF, DISTANCES)
    diversity_baseline: str = option(
        "leave_one_out", "diversity baseline = mean distance between the other samples (leave_one_out, unbiased) "
                         "or of all pairs (all_pairs, seed 001 sec. 4.3: scales the diversity gradient by "
                         "(s-1)(s-2)/s^2, 0.48 at s=5)", RL_CONF, DIVERSITY_BASELINES)


def _check(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"sle {name} must be one of {tuple(allowed)}, got {value!r}")


def _check_num_samples(num_samples: int) -> None:
    if num_samples < 2:
        raise ValueError(f"sle needs num_samples >= 2 (pairs of samples), got {num_samples}")


def bleu_distances(captions: Sequence[Sequence[str]], distance: str = SLEConf.distance) -> np.ndarray:
    """Directed BLEU distances ``d(y_j, y_k)`` between the captions of one clip.

    Args:
        captions: ``s`` word lists.
        distance: ``bleu34_sum`` (``2 - B3 - B4``, in [0, 2]) or ``bleu34_mean``
            (``1 - (B3 + B4) / 2``, in [0, 1]); ``B-n = BLEU-n(y_j | ref y_k)``.

    Returns:
        float64 ``(s, s)``: ``[j, k] = d(y_j, y_k)``, 0 where ``y_j == y_k`` (so the
        diagonal is 0).

    Raises:
        ValueError: unknown ``distance``.
    """
    _check("distance", distance, DISTANCES)
    s = len(captions)
    if s == 0:
        return np.zeros((0, 0))
    bleu = pairwise_bleu(captions, n=4)
    b34 = bleu[:, :, 2] + bleu[:, :, 3]
    dist, top = (2.0 - b34, 2.0) if distance == "bleu34_sum" else (1.0 - b34 / 2.0, 1.0)
    for j in range(s):
        for k in range(s):
            if list(captions[j]) == list(captions[k]):
                dist[j, k] = 0.0
    return np.clip(dist, 0.0, top)


def symmetric_distances(captions: Sequence[Sequence[str]], distance: str = SLEConf.distance) -> np.ndarray:
    """``dbar = (d + d^T) / 2`` of :func:`bleu_distances`, float64 ``(s, s)``."""
    d = bleu_distances(captions, distance)
    return (d + d.T) / 2.0


def diversity_advantages(
    dbar: torch.Tensor, baseline: str = SLEConf.diversity_baseline
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Diversity reward, baseline and advantage (module docstring, eq. 14-16).

    Args:
        dbar: (clips, s, s) symmetric distances between the samples of each clip; the
            diagonal is ignored (d(y, y) = 0).
        baseline: ``leave_one_out`` (unbiased) or ``all_pairs`` (sec. 4.3 text, biased).

    Returns:
        ``(q, b, adv)``, each (clips, s), ``adv = 2 * (q - b)``. ``leave_one_out``:
        ``q_j = 1/(s-1) sum_{k != j} dbar[j, k]``, ``b_j`` = mean of ``dbar[k, l]`` over
        ``k != l`` both ``!= j`` (0 when s = 2). ``all_pairs``: ``q_j = (1/s) sum_k
        dbar[j, k]``, ``b = (1/s^2) sum_{j,k} dbar`` (broadcast).

    Raises:
        ValueError: unknown ``baseline``.
    """
    _check("diversity_baseline", baseline, DIVERSITY_BASELINES)
    s = dbar.size(-1)
    dbar = dbar.masked_fill(torch.eye(s, dtype=torch.bool, device=dbar.device), 0.0)
    row = dbar.sum(2)
    if baseline == "all_pairs":
        q = row / s
        b = q.mean(1, keepdim=True).expand_as(q)
    else:
        q = row / (s - 1)
        others = dbar.sum((1, 2)).unsqueeze(1) - 2.0 * row  # ordered pairs without j
        b = others / ((s - 1) * (s - 2)) if s > 2 else torch.zeros_like(q)
    return q, b, 2.0 * (q - b)


def sle_loss(
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    greedy_rewards: torch.Tensor,
    dbar: torch.Tensor,
    alpha: float,
    diversity_baseline: str = SLEConf.diversity_baseline,
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
        diversity_baseline: see :func:`diversity_advantages`.

    Returns:
        ``(loss, parts)``; ``parts`` holds (clips, s) tensors ``prec_adv``, ``div_reward``,
        ``div_baseline``, ``div_adv``, ``adv`` (all detached).
    """
    clips, s = rewards.shape
    prec_adv = rewards - greedy_rewards.view(-1, 1)
    q, b, div_adv = diversity_advantages(dbar, diversity_baseline)
    adv = (alpha * prec_adv + (1.0 - alpha) * div_adv).detach()
    seq_logp = (logprobs * mask).sum(1).view(clips, s)
    loss = -(adv * seq_logp).mean()
    return loss, {"prec_adv": prec_adv, "div_reward": q, "div_baseline": b, "div_adv": div_adv, "adv": adv}


class SLE(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` of seed 001.

    Args:
        reward, tokenizer, max_len, temperature, baseline_encoding, sample_logprobs: see
            :class:`SampledObjective` (reward = the paper's Delta, CIDEr-D by default).
        num_samples: ``s`` samples per clip (paper: 5); >= 2 (the diversity term needs pairs).
        alpha: weight of the precision term (paper: 0.75); ``alpha = 1`` is SCST with
            ``s`` samples and the greedy baseline.
        distance: d(y, y') of the diversity term: ``bleu34_sum`` (default, the paper's
            BLEU3 + BLEU4: ``2 - B3 - B4``) or ``bleu34_mean`` (``1 - (B3 + B4) / 2``, half
            the diversity weight).
        diversity_baseline: ``leave_one_out`` (default; unbiased for the gradient of eq. 12)
            or ``all_pairs`` (the paper's sec. 4.3 baseline, mean of all pairwise distances;
            its expected gradient is ``(s-1)(s-2)/s^2`` times eq. 12's).

    Stats (floats, batch means): ``reward`` (sampled captions), ``baseline`` (greedy
    captions), ``advantage`` (combined ``alpha A^prec + (1-alpha) A^div``), ``entropy``
    (per token, nats), ``sample_len``, ``precision_advantage`` (mean ``A^prec``),
    ``diversity`` (mean ``dbar`` over pairs of *distinct* samples j != k, the U-statistic
    estimate of eq. 12's D), ``diversity_baseline`` (mean ``b``: equal to ``diversity``
    for ``leave_one_out``, ``(s-1)/s`` times it for ``all_pairs`` because the diagonal is
    0), ``diversity_advantage`` (mean ``|A^div|``; its signed mean is 0 by construction).

    Raises:
        ValueError: ``num_samples < 2``, ``alpha`` outside [0, 1], unknown ``distance``
            or ``diversity_baseline``.
    """

    row_sharded_randomness = True  # the same random draws on every data-parallel rank
    Conf = SLEConf
    paper = "Chen & Jin 2020 (SLE)"

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        num_samples: int = SLEConf.num_samples,
        alpha: float = SLEConf.alpha,
        max_len: int = DEFAULTS.max_len,
        temperature: float = DEFAULTS.temperature,
        baseline_encoding: str = SLEConf.baseline_encoding,
        distance: str = SLEConf.distance,
        diversity_baseline: str = SLEConf.diversity_baseline,
        sample_logprobs: str = SLEConf.sample_logprobs,
    ):
        super().__init__(reward, tokenizer, max_len, temperature, baseline_encoding, sample_logprobs)
        _check_num_samples(num_samples)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"sle alpha must be in [0, 1], got {alpha}")
        _check("distance", distance, DISTANCES)
        _check("diversity_baseline", diversity_baseline, DIVERSITY_BASELINES)
        self.num_samples, self.alpha = num_samples, float(alpha)
        self.distance, self.diversity_baseline = distance, diversity_baseline

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "SLE":
        """SLE (``--rl_algo sle``) from :class:`captionlib.rl.options.RLOptions` (``max_len``,
        ``temperature``) and its ``rl_conf`` block ``conf`` (:class:`SLEConf`).

        Raises:
            ValueError: see the class.
        """
        return cls(
            reward, tokenizer, num_samples=conf.num_samples, alpha=conf.alpha, max_len=opts.max_len,
            temperature=opts.temperature, baseline_encoding=conf.baseline_encoding, distance=conf.distance,
            diversity_baseline=conf.diversity_baseline, sample_logprobs=conf.sample_logprobs,
        )

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        clips, feats, lens = self.inputs(model, batch)
        s = self.num_samples
        v = model.encode(feats, lens)
        greedy_words, words, out = self.baseline_and_samples(model, v, feats, lens, s)
        keys: List[str] = [c for c in clips for _ in range(s)]
        r_all = self.rewards(keys + clips, words + greedy_words, v.device)
        r = r_all[: len(keys)].view(len(clips), s)
        g = r_all[len(keys):]
        dbar = torch.as_tensor(
            np.stack([symmetric_distances(words[i * s : (i + 1) * s], self.distance) for i in range(len(clips))]),
            dtype=torch.float32,
            device=v.device,
        )
        loss, parts = sle_loss(out.logprobs, out.mask, r, g, dbar, self.alpha, self.diversity_baseline)
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
