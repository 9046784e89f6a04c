"""ROUGE-L as computed by pycocoevalcap (Lin, "ROUGE", 2004; COCO caption variant).

For one hypothesis and its references: ``P = max_r LCS(h, r) / |h|``,
``R = max_r LCS(h, r) / |r|`` (maxima taken separately, as pycocoevalcap does) and
``ROUGE-L = (1 + beta^2) P R / (R + beta^2 P)`` with ``beta = 1.2`` (0 when P or R is 0).
The corpus score is the mean over clips. An empty word list counts as one empty token,
reproducing pycocoevalcap's ``"".split(" ") == [""]``.
"""

from typing import Dict, Mapping, Sequence, Tuple

import numpy as np

BETA = 1.2


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (O(|a| |b|))."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def sentence_rouge_l(hyp: Sequence[str], refs: Sequence[Sequence[str]], beta: float = BETA) -> float:
    """ROUGE-L of one hypothesis against >= 1 references (see module docstring).

    Raises:
        ValueError: without references.
    """
    if len(refs) == 0:
        raise ValueError("sentence_rouge_l needs at least one reference")
    h = list(hyp) or [""]
    prec, rec = [], []
    for ref in refs:
        r = list(ref) or [""]
        lcs = lcs_length(r, h)
        prec.append(lcs / float(len(h)))
        rec.append(lcs / float(len(r)))
    p, r_ = max(prec), max(rec)
    if p != 0 and r_ != 0:
        return ((1 + beta**2) * p * r_) / float(r_ + beta**2 * p)
    return 0.0


def corpus_rouge_l(
    refs: Mapping[str, Sequence[Sequence[str]]], hyps: Mapping[str, Sequence[str]]
) -> Tuple[float, Dict[str, float]]:
    """Mean ROUGE-L over clips (equal to ``pycocoevalcap.rouge.Rouge().compute_score``).

    Returns:
        ``(mean, {clip_id: score})``.

    Raises:
        ValueError: if the clip sets differ or are empty.
    """
    if set(refs) != set(hyps) or not refs:
        raise ValueError("refs and hyps must hold the same, non-empty set of clips")
    per = {c: sentence_rouge_l(hyps[c], refs[c]) for c in refs}
    return float(np.mean(np.array(list(per.values())))), per
