"""BLEU-1..4 as computed by pycocoevalcap (Papineni et al., ACL 2002; COCO caption variant).

Definitions (identical to ``pycocoevalcap.bleu.BleuScorer`` with ``option="closest"``,
which ``pycocoevalcap.bleu.Bleu`` uses):

* clipped n-gram matches ``correct_k = sum_g min(count_hyp(g), max_r count_r(g))`` and
  ``guess_k = max(0, len_hyp - k + 1)``;
* effective reference length: the reference length closest to the hypothesis length
  (the shorter one on ties);
* ``BLEU-k = (prod_{i<=k} (correct_i + 1e-15) / (guess_i + 1e-9)) ** (1/k)``, times the
  brevity penalty ``exp(1 - 1/ratio)`` when ``ratio = (len_hyp + 1e-15) / (reflen + 1e-9) < 1``.

The *corpus* score sums lengths, matches and guesses over all clips first; the *sentence*
score applies the same formula to one clip (pycocoevalcap's per-image list). The smoothing
constants make an empty match give a tiny, not zero, score, exactly as in pycocoevalcap.
Sentence BLEU-3/4 between sampled captions is the distance of the diversity objective of
Chen and Jin (seed 001); :func:`pairwise_bleu` computes it for a set of captions.
"""

import math
from collections import Counter
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

_TINY = 1e-15
_SMALL = 1e-9


def _ngram_counts(words: Sequence[str], n: int) -> Counter:
    counts: Counter = Counter()
    for k in range(1, n + 1):
        for i in range(len(words) - k + 1):
            counts[tuple(words[i : i + k])] += 1
    return counts


def _stats(
    hyp: Sequence[str], refs: Sequence[Sequence[str]], n: int
) -> Tuple[int, int, List[int], List[int]]:
    """(hyp length, closest reference length, guesses per order, clipped matches per order)."""
    maxcounts: Dict[Tuple[str, ...], int] = {}
    for ref in refs:
        for g, c in _ngram_counts(ref, n).items():
            if c > maxcounts.get(g, 0):
                maxcounts[g] = c
    testlen = len(hyp)
    reflen = min((abs(len(r) - testlen), len(r)) for r in refs)[1]
    guess = [max(0, testlen - k + 1) for k in range(1, n + 1)]
    correct = [0] * n
    for g, c in _ngram_counts(hyp, n).items():
        correct[len(g) - 1] += min(maxcounts.get(g, 0), c)
    return testlen, reflen, guess, correct


def _combine(testlen: float, reflen: float, guess: Sequence[float], correct: Sequence[float]) -> np.ndarray:
    n = len(guess)
    out = np.zeros(n)
    prod = 1.0
    for k in range(n):
        prod *= (float(correct[k]) + _TINY) / (float(guess[k]) + _SMALL)
        out[k] = prod ** (1.0 / (k + 1))
    ratio = (testlen + _TINY) / (reflen + _SMALL)
    if ratio < 1:
        out *= math.exp(1 - 1 / ratio)
    return out


def sentence_bleu(hyp: Sequence[str], refs: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """BLEU-1..n of one hypothesis against its references.

    Args:
        hyp: hypothesis words.
        refs: >= 1 reference word lists.
        n: highest order.

    Returns:
        float64 ``(n,)``: BLEU-1..BLEU-n (pycocoevalcap's per-image values).

    Raises:
        ValueError: without references.
    """
    if len(refs) == 0:
        raise ValueError("sentence_bleu needs at least one reference")
    return _combine(*_stats(hyp, refs, n))


def corpus_bleu(
    refs: Mapping[str, Sequence[Sequence[str]]], hyps: Mapping[str, Sequence[str]], n: int = 4
) -> Tuple[List[float], Dict[str, np.ndarray]]:
    """Corpus BLEU-1..n (equal to ``pycocoevalcap.bleu.Bleu(n).compute_score``).

    Args:
        refs: ``{clip_id: [reference word list, ...]}``.
        hyps: ``{clip_id: hypothesis word list}``; same clips.

    Returns:
        ``([BLEU-1, ..., BLEU-n], {clip_id: sentence BLEU-1..n (n,)})``.

    Raises:
        ValueError: if the clip sets differ or are empty.
    """
    if set(refs) != set(hyps) or not refs:
        raise ValueError("refs and hyps must hold the same, non-empty set of clips")
    tot_test = tot_ref = 0.0
    tot_guess = [0] * n
    tot_correct = [0] * n
    per: Dict[str, np.ndarray] = {}
    for clip in refs:
        testlen, reflen, guess, correct = _stats(hyps[clip], refs[clip], n)
        tot_test += testlen
        tot_ref += reflen
        for k in range(n):
            tot_guess[k] += guess[k]
            tot_correct[k] += correct[k]
        per[clip] = _combine(testlen, reflen, guess, correct)
    return _combine(tot_test, tot_ref, tot_guess, tot_correct).tolist(), per


def pairwise_bleu(captions: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """Sentence BLEU of every caption against every other single caption.

    Args:
        captions: ``S`` word lists (e.g. the samples of one clip).

    Returns:
        float64 ``(S, S, n)``; ``[i, j, k-1]`` = BLEU-k of caption ``i`` with caption ``j``
        as the only reference; the diagonal is computed too (self-BLEU, 1 for non-empty
        captions of length >= k).
    """
    counts = [_ngram_counts(c, n) for c in captions]
    s = len(captions)
    out = np.zeros((s, s, n))
    for i in range(s):
        li = len(captions[i])
        guess = [max(0, li - k + 1) for k in range(1, n + 1)]
        for j in range(s):
            cj = counts[j]
            correct = [0] * n
            for g, c in counts[i].items():
                m = cj.get(g, 0)
                if m:
                    correct[len(g) - 1] += min(m, c)
            out[i, j] = _combine(li, len(captions[j]), guess, correct)
    return out
