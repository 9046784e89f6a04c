"""Sequence-level rewards for the RL objectives: a weighted sum of caption metrics.

The spec string ``"cider_d:1.0"`` (comma-separated ``metric:weight``) names the terms.
CIDEr-D uses the train-set document frequencies computed once at stage 4
(``cider_df.pkl``) and caches each clip's reference vectors, so every candidate of a
batch (samples and baselines) is scored in one call.
"""

from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

SUPPORTED = ("cider_d",)


def parse_reward_spec(spec: str) -> List[Tuple[str, float]]:
    """Parse ``"cider_d:1.0,bleu_4:0.5"`` into ``[("cider_d", 1.0), ("bleu_4", 0.5)]``.

    Raises:
        ValueError: malformed term, unknown metric, or no term.
    """
    terms = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, weight = part.partition(":")
        if name not in SUPPORTED:
            raise ValueError(f"reward {spec!r}: unknown metric {name!r} (supported: {', '.join(SUPPORTED)})")
        try:
            terms.append((name, float(weight) if weight else 1.0))
        except ValueError:
            raise ValueError(f"reward {spec!r}: bad weight {weight!r}") from None
    if not terms:
        raise ValueError(f"reward {spec!r}: no metric given")
    return terms


class Reward:
    """Weighted sum of metrics of each candidate against all references of its clip.

    Args:
        spec: see :func:`parse_reward_spec`.
        refs: ``{clip_id: [[word, ...], ...]}`` cleaned references of the training clips.
        cider_df: path of the document frequencies (``caption_compute_cider_df`` output).
    """

    def __init__(self, spec: str, refs: Mapping[str, Sequence[Sequence[str]]], cider_df: str):
        from captionlib.metrics.cider_d import CiderD, DocumentFrequency

        self.terms = parse_reward_spec(spec)
        self.cider = CiderD(DocumentFrequency.load(cider_df))
        self.cider.add_refs(refs)

    def __call__(self, clip_ids: Sequence[str], candidates: Sequence[Sequence[str]]) -> Dict[str, np.ndarray]:
        """Score candidates (lists of words) of the given clips.

        Returns:
            ``{"reward": (num_candidates,), <metric>: (num_candidates,) ...}``.
        """
        out: Dict[str, np.ndarray] = {}
        total = np.zeros(len(candidates))
        for name, weight in self.terms:
            if name == "cider_d":
                out[name] = np.asarray(self.cider.score(clip_ids, candidates), dtype=np.float64)
            total += weight * out[name]
        out["reward"] = total
        return out
