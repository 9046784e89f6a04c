"""Sequence-level rewards for the RL objectives: a weighted sum of caption metrics.

The spec string (comma-separated ``metric:weight``, weight 1 when omitted), e.g.
``"cider_d:1.0,bleu_4:0.5"``, names the terms. Metrics: ``cider_d`` (train-set document
frequencies computed once at stage 4, reference vectors cached, every candidate of a
batch scored in one call; the default), ``cider_d_batch`` (CIDEr-D with the document
frequencies of the references of the candidates of one call, i.e. of the mini-batch, as
seed 000 computed it; see :func:`captionlib.metrics.cider_d.batch_cider_d`),
``bleu_1``..``bleu_4`` (sentence BLEU, pycocoevalcap's definition), ``rouge_l``, and
``spice`` / ``spider`` ((CIDEr-D + SPICE) / 2, Liu et al. 2017, seed 003) where SPICE can
run (Java + the Stanford CoreNLP 3.6.0 jars). All metrics see the cleaned words of
candidates and references.

A fluency penalty (``fluency_penalty`` p > 0) multiplies the summed reward of each caption
flagged as disfluent by (1 - p), as SPIDEr-FL penalises a flagged caption's SPIDEr (DCASE
2023 task 6; p = 0.9 there). The flags come from the fluency error detector
(:class:`captionlib.metrics.fluency.FluencyDetector`, trained by ``caption_train_fluency``)
or, without one, from the rule checks (:func:`captionlib.metrics.fluency_rules.rule_flags`).
Every objective scores its samples and baselines through :class:`Reward`, so every one of them
gets the penalty.

The per-batch form is a metric name rather than a mode option of :class:`Reward`: it is
a different statistic (its idf depends on the rest of the batch), so it gets its own key
in the output of :meth:`Reward.__call__`, the run's ``config.yaml`` ``reward:`` line names
it (and so the RESULTS.md ``paper`` column), and no training binary or recipe needs a new
option (``--reward cider_d_batch:1.0``); it can also be weighed against the corpus form.
"""

import tempfile
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from captionlib.rl.options import DEFAULTS

SUPPORTED = ("cider_d", "cider_d_batch", "bleu_1", "bleu_2", "bleu_3", "bleu_4", "rouge_l", "spice", "spider")
#: How each metric is named in reports (RESULTS.md ``paper`` column).
DISPLAY_NAMES = {
    "cider_d": "CIDEr-D",
    "cider_d_batch": "CIDEr-D with per-batch IDF",
    "bleu_1": "BLEU-1",
    "bleu_2": "BLEU-2",
    "bleu_3": "BLEU-3",
    "bleu_4": "BLEU-4",
    "rouge_l": "ROUGE-L",
    "spice": "SPICE",
    "spider": "SPIDEr",
}


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


def check_reward(spec: str, spice_lib_dir: Optional[str] = None) -> List[Tuple[str, float]]:
    """:func:`parse_reward_spec`, and where a term needs SPICE (``spice``, ``spider``), check that
    SPICE can run (Java, the CoreNLP jars in ``spice_lib_dir`` or their default place).

    Raises:
        ValueError: as :func:`parse_reward_spec`, or ``reward '<spec>' needs SPICE, which cannot
            run: <reason>``.
    """
    terms = parse_reward_spec(spec)
    if any(name in ("spice", "spider") for name, _ in terms):
        from captionlib.metrics.spice import spice_unavailable_reason

        reason = spice_unavailable_reason(spice_lib_dir)
        if reason:
            raise ValueError(f"reward {spec!r} needs SPICE, which cannot run: {reason}")
    return terms


def describe_reward(spec: str) -> str:
    """Human-readable reward of a spec: ``"cider_d:1.0"`` -> ``"CIDEr-D"``,
    ``"cider_d:1,bleu_4:0.5"`` -> ``"CIDEr-D + 0.5 BLEU-4"``.

    Raises:
        ValueError: as :func:`parse_reward_spec`.
    """
    return " + ".join(
        DISPLAY_NAMES[name] if weight == 1.0 else f"{weight:g} {DISPLAY_NAMES[name]}"
        for name, weight in parse_reward_spec(spec)
    )


class Reward:
    """Weighted sum of metrics of each candidate against all references of its clip.

    Args:
        spec: see :func:`parse_reward_spec`.
        refs: ``{clip_id: [[word, ...], ...]}`` cleaned references of the training clips.
        cider_df: path of the document frequencies (``caption_compute_cider_df`` output) of
            the ``cider_d`` and ``spider`` terms (``cider_d_batch`` counts its own).
        spice_lib_dir: CoreNLP jars for ``spice``/``spider`` terms (see
            :mod:`captionlib.metrics.spice`); ``spice_cache_dir`` keeps SPICE's parse cache.
        trust_pickle: also read a pickled ``cider_df`` of older versions (numpy arrays and
            numbers only, nothing in it run; for files you made yourself; see
            :meth:`captionlib.metrics.cider_d.DocumentFrequency.load`).
        fluency_penalty: p in [0, 1]: a flagged caption's reward is multiplied by (1 - p)
            (see the module docstring); 0: off.
        fluency_model: the detector file of the flags (``None``: the rule checks).

    Raises:
        ValueError: bad spec, a SPICE term where SPICE cannot run (with the reason), a
            ``cider_df`` that is not an ``.npz`` document-frequency file (named; a pickle
            without ``trust_pickle``, with the command that converts it), a penalty outside
            [0, 1], or a detector file that cannot be loaded (named).
    """

    def __init__(
        self,
        spec: str,
        refs: Mapping[str, Sequence[Sequence[str]]],
        cider_df: str,
        spice_lib_dir: Optional[str] = None,
        spice_cache_dir: Optional[str] = None,
        trust_pickle: bool = DEFAULTS.trust_pickle,
        fluency_penalty: float = DEFAULTS.fluency_penalty,
        fluency_model: Optional[str] = DEFAULTS.fluency_model,
    ):
        from captionlib.metrics.cider_d import CiderD, DocumentFrequency

        if not 0.0 <= fluency_penalty <= 1.0:
            raise ValueError(f"fluency_penalty must be in [0, 1], got {fluency_penalty}")
        self.fluency_penalty, self.detector = fluency_penalty, None
        if fluency_penalty > 0 and fluency_model:
            from captionlib.metrics.fluency import FluencyDetector  # torch and the tagger: only when used

            self.detector = FluencyDetector.load(fluency_model)
        self.terms = check_reward(spec, spice_lib_dir)
        self.refs = refs
        self.cider = CiderD(DocumentFrequency.load(cider_df, trust_pickle=trust_pickle))
        self.cider.add_refs(refs)
        self.spice_lib_dir, self.spice_cache_dir = spice_lib_dir, spice_cache_dir

    def _spice(self, clip_ids: Sequence[str], candidates: Sequence[Sequence[str]]) -> np.ndarray:
        from captionlib.metrics.spice import compute_spice

        keys = [str(i) for i in range(len(candidates))]
        refs = {k: [" ".join(r) for r in self.refs[c]] for k, c in zip(keys, clip_ids)}
        hyps = {k: " ".join(w) for k, w in zip(keys, candidates)}
        with tempfile.TemporaryDirectory() as tmp:
            _, per = compute_spice(refs, hyps, self.spice_cache_dir, self.spice_lib_dir, tmp_dir=tmp)
        return np.nan_to_num(np.array([per[k] for k in keys], dtype=np.float64))

    def __call__(self, clip_ids: Sequence[str], candidates: Sequence[Sequence[str]]) -> Dict[str, np.ndarray]:
        """Score candidates (lists of words) of the given clips.

        Everything scored together (e.g. the samples and the greedy baselines of a batch)
        goes in one call: ``cider_d_batch`` takes its document frequencies from this call's
        candidates (one document per candidate).

        Returns:
            ``{"reward": (num_candidates,), <metric>: (num_candidates,) ...}``; with a fluency
            penalty also ``"fluency_error"``: 1.0 for each flagged caption, else 0.0.
        """
        from captionlib.metrics.bleu import sentence_bleu
        from captionlib.metrics.cider_d import batch_cider_d
        from captionlib.metrics.rouge import sentence_rouge_l

        names = {n for n, _ in self.terms}
        out: Dict[str, np.ndarray] = {}
        if names & {"cider_d", "spider"}:
            out["cider_d"] = np.asarray(self.cider.score(clip_ids, candidates), dtype=np.float64)
        if "cider_d_batch" in names:
            out["cider_d_batch"] = batch_cider_d(self.refs, clip_ids, candidates)
        if names & {"spice", "spider"}:
            out["spice"] = self._spice(clip_ids, candidates)
        if "spider" in names:
            out["spider"] = (out["cider_d"] + out["spice"]) / 2
        if any(n.startswith("bleu_") for n in names):
            bleu = np.array([sentence_bleu(c, self.refs[k]) for k, c in zip(clip_ids, candidates)]).reshape(-1, 4)
            for i in range(4):
                out[f"bleu_{i + 1}"] = bleu[:, i]
        if "rouge_l" in names:
            out["rouge_l"] = np.array([sentence_rouge_l(c, self.refs[k]) for k, c in zip(clip_ids, candidates)])
        total = np.zeros(len(candidates))
        for name, weight in self.terms:
            total += weight * out[name]
        if self.fluency_penalty > 0:
            flags = self.fluency_flags(candidates)
            out["fluency_error"] = flags.astype(np.float64)
            total = np.where(flags, total * (1.0 - self.fluency_penalty), total)
        out["reward"] = total
        return out

    def fluency_flags(self, candidates: Sequence[Sequence[str]]) -> np.ndarray:
        """``(num_candidates,)`` bools: the detector's flags, or the rule checks' without one
        (:func:`captionlib.metrics.fluency.fluency_flags`)."""
        from captionlib.metrics.fluency import fluency_flags

        return fluency_flags(candidates, self.detector)
