"""Re-ranking of candidate captions (``caption_decode --rerank N``): minimum Bayes risk by
consensus CIDEr-D among a clip's candidates, optionally with the decoder's log-likelihood.

Kumar & Byrne, "Minimum Bayes-Risk Decoding for Statistical Machine Translation", NAACL 2004:
the candidate with the highest expected similarity to the others, here their mean CIDEr-D, is
the consensus choice; the DCASE 2023 task 6 winner and EnCLAP++ (DCASE 2024) re-rank sampled
captions this way, EnCLAP++ with a fluency filter, which the fluency penalty here follows.
:func:`captionlib.decode.inference.decode_feats_scp` draws the candidates.
"""

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from captionlib.metrics.cider_d import CiderD, DocumentFrequency


def consensus_cider_d(candidate_sets: Sequence[Sequence[Sequence[str]]], n: int = 4,
                      sigma: float = 6.0) -> List[np.ndarray]:
    """Mean CIDEr-D of each candidate against the other candidates of its clip, all clips in
    one vectorised call.

    CIDEr-D against several references is the mean of its similarities to each, so a
    candidate's score is its mean CIDEr-D against each other candidate. Document frequencies:
    those of ``candidate_sets``, one document per clip (all its candidates), as
    :func:`~captionlib.metrics.cider_d.corpus_cider_d` takes them from the references.

    Args:
        candidate_sets: per clip, its candidates as word lists (at least 2 per clip).
        n, sigma: CIDEr-D parameters.

    Returns:
        per clip, float64 (candidates,) scores (pycocoevalcap scale, x10).

    Raises:
        ValueError: no clip, or a clip with fewer than 2 candidates.
    """
    if not candidate_sets:
        raise ValueError("no candidates to re-rank")
    few = [i for i, cands in enumerate(candidate_sets) if len(cands) < 2]
    if few:
        raise ValueError(f"consensus CIDEr-D needs >= 2 candidates per clip; clip {few[0]} has "
                         f"{len(candidate_sets[few[0]])}")
    df = DocumentFrequency.from_references({str(i): cands for i, cands in enumerate(candidate_sets)}, n=n)
    refs, ids, cands = {}, [], []
    for i, clip_cands in enumerate(candidate_sets):
        for j, cand in enumerate(clip_cands):
            key = f"{i}#{j}"
            refs[key] = [other for k, other in enumerate(clip_cands) if k != j]
            ids.append(key)
            cands.append(cand)
    scores = CiderD(df, n=n, sigma=sigma, refs=refs).score(ids, cands)
    bounds = np.cumsum([0] + [len(c) for c in candidate_sets])
    return [scores[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def mbr_select(candidate_sets: Sequence[Sequence[str]], lm_scores: Optional[Sequence[Sequence[float]]] = None,
               lm_weight: float = 0.0, flags: Optional[Sequence[Sequence[bool]]] = None,
               fluency_weight: float = 0.0) -> Tuple[List[int], List[np.ndarray]]:
    """The MBR choice among each clip's candidate captions (see the module docstring).

    Args:
        candidate_sets: per clip, its candidate captions (strings, split at white space).
        lm_scores: per clip, each candidate's length-normalised log-likelihood
            (:func:`sequence_logprobs`); read only when ``lm_weight`` is non-zero.
        lm_weight: weight of ``lm_scores`` added to the mean CIDEr-D.
        flags: per clip, whether each candidate is disfluent
            (:func:`captionlib.metrics.fluency.fluency_flags`); read only when ``fluency_weight``
            is non-zero.
        fluency_weight: subtracted from the score of a flagged candidate (EnCLAP++'s fluency
            filter, as a penalty: a large weight filters).

    Returns:
        per clip the index of the chosen candidate (ties: the first, so the first candidate
        wins when all score alike; an empty candidate only when all are empty), and per clip
        the scores it was chosen by (-inf for an empty candidate beside non-empty ones).
    """
    scores = consensus_cider_d([[c.split() for c in cands] for cands in candidate_sets])
    if lm_weight:
        if lm_scores is None:
            raise ValueError("lm_weight without lm_scores")
        scores = [s + lm_weight * np.asarray(lm, dtype=np.float64) for s, lm in zip(scores, lm_scores)]
    if fluency_weight:
        if flags is None:
            raise ValueError("fluency_weight without flags")
        scores = [s - fluency_weight * np.asarray(f, dtype=np.float64) for s, f in zip(scores, flags)]
    # an empty caption (a sample that ended at once) is never chosen over a non-empty one
    scores = [np.where([not c.split() for c in cands], -np.inf, s) if any(c.split() for c in cands) else s
              for s, cands in zip(scores, candidate_sets)]
    return [int(np.argmax(s)) for s in scores], scores


@torch.no_grad()
def sequence_logprobs(model: Any, v: Any, tokens: torch.Tensor) -> torch.Tensor:
    """Length-normalised log-likelihood of given captions under a step-wise decoder (teacher
    forcing through ``first_step`` / ``step``, as :func:`~captionlib.decode.search.sample`).

    Args:
        model: a Captioner or Ensemble (eval mode); v: (rows, ...) encodings.
        tokens: (rows, length) ids, eos included, 0 after it (as ``sample`` and
            ``beam_search`` return them); a row without eos counts all its tokens.

    Returns:
        (rows,) the sum of the tokens' log-probabilities (eos included) divided by their number.
    """
    eos = model.eos_id
    ended = (tokens == eos).long().cumsum(1)
    alive = (ended == 0) | ((ended == 1) & (tokens == eos))  # up to and including the first eos
    n = int(alive.any(0).sum())  # the columns where some row is alive are a prefix
    tokens, alive = tokens[:, :n], alive[:, :n]
    total = torch.zeros(tokens.size(0), dtype=torch.float64, device=tokens.device)
    logp, state = model.first_step(v)
    for t in range(tokens.size(1)):
        if t > 0:
            logp, state = model.step(tokens[:, t - 1], state)
        lp = logp.gather(1, tokens[:, t : t + 1]).squeeze(1).double()
        total += torch.where(alive[:, t], lp, torch.zeros_like(lp))
    return total / alive.sum(1).clamp(min=1)
