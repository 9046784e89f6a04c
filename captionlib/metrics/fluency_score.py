"""The fluency part of ``caption_score --metrics ...,fluency``: error rates and -FL scores.

For the hypotheses of one system (one caption per clip):

* ``FER (rules)``: the fraction of captions that :func:`captionlib.metrics.fluency_rules.fluency_rules`
  flags (any rule);
* ``FER (detector)``: the fraction that a trained :class:`~captionlib.metrics.fluency.FluencyDetector`
  flags (``--fluency_model``; aac-metrics calls this rate FER); ``None`` without a detector;
* ``CIDEr-D-FL``: the mean over clips of the clip's CIDEr-D, times 0.1 where its caption is
  flagged (:func:`captionlib.metrics.fluency_rules.fluency_penalised`);
* ``SPIDEr-FL``: the same of the clip's SPIDEr = (CIDEr-D + SPICE) / 2, as aac-metrics' SPIDEr-FL
  (DCASE 2023 task 6a), where SPICE ran.

The -FL scores use the detector's flags when a detector is given, else the rules' (said in
``skipped["fluency"]``, printed as a note of ``result.txt``).
"""

from typing import TYPE_CHECKING, Dict, Mapping, Optional

import numpy as np

from captionlib.metrics.fluency_rules import fluency_penalised, rule_flags

if TYPE_CHECKING:  # the detector needs torch, slow to import: caption_score without --fluency_model never does
    from captionlib.metrics.fluency import FluencyDetector

FLUENCY_KEYS = ("FER (detector)", "FER (rules)", "CIDEr-D-FL", "SPIDEr-FL")
NO_DETECTOR_REASON = ("no fluency detector (--fluency_model, made by caption_train_fluency): "
                      "the -FL scores use the rules alone")


def fluency_scores(
    hyps: Mapping[str, str],
    detector: Optional["FluencyDetector"],
    cider: Optional[Mapping[str, float]],
    spice: Optional[Mapping[str, float]],
    skipped: Dict[str, str],
    per_clip: Optional[Dict[str, Dict[str, float]]] = None,
    detector_name: str = "",
) -> Dict[str, Optional[float]]:
    """The :data:`FLUENCY_KEYS` of one system (module docstring).

    Args:
        hyps: ``{clip_id: raw caption}``.
        detector: the detector, or ``None`` (rules alone).
        cider: ``{clip_id: CIDEr-D}`` of the same clips, or ``None`` (then no -FL score).
        spice: ``{clip_id: SPICE}``, or ``None`` (then no SPIDEr-FL).
        skipped: updated in place: the reason of every ``None``, and ``fluency``: which flags
            the -FL scores use.
        per_clip: if given, receives ``{"CIDEr-D-FL": {clip_id: score}, "SPIDEr-FL": {...}}``
            for those computed, and each clip's flags as 1.0 / 0.0 under ``FER (rules)`` and
            ``FER (detector)`` (their means are the rates: the input of a paired bootstrap on
            the error rate, :mod:`captionlib.metrics.significance`).
        detector_name: how the detector is named in ``skipped["fluency"]`` (its path).

    Returns:
        ``{key: float or None for key in FLUENCY_KEYS}``; rates are fractions in [0, 1].

    Raises:
        ValueError: no hypothesis, or per-clip scores of other clips.
    """
    if not hyps:
        raise ValueError("no caption to check for fluency")
    clips = sorted(hyps)
    caps = [hyps[c] for c in clips]
    rules = rule_flags(caps).any(axis=1)
    out: Dict[str, Optional[float]] = {k: None for k in FLUENCY_KEYS}
    out["FER (rules)"] = float(np.mean(rules))
    if detector is None:
        flags = rules
        skipped["FER (detector)"] = NO_DETECTOR_REASON
        skipped["fluency"] = "-FL scores: captions flagged by the rules alone (no --fluency_model)"
    else:
        flags = detector.flag(caps)[0]
        out["FER (detector)"] = float(np.mean(flags))
        skipped["fluency"] = (f"-FL scores: captions flagged by the detector {detector_name} "
                              f"(threshold {detector.threshold:.4f})")
    flagged = dict(zip(clips, (bool(f) for f in flags)))
    if per_clip is not None:
        per_clip["FER (rules)"] = {c: float(f) for c, f in zip(clips, rules)}
        if detector is not None:
            per_clip["FER (detector)"] = {c: float(f) for c, f in flagged.items()}
    if cider is None:
        skipped["CIDEr-D-FL"] = "CIDEr-D-FL needs the per-clip CIDEr-D"
    else:
        out["CIDEr-D-FL"], clip_scores = fluency_penalised(cider, flagged)
        if per_clip is not None:
            per_clip["CIDEr-D-FL"] = clip_scores
    if cider is None or spice is None:
        skipped["SPIDEr-FL"] = f"SPIDEr-FL needs SPIDEr: {skipped.get('SPIDEr', 'not computed')}"
    else:
        spider = {c: (cider[c] + spice[c]) / 2.0 for c in cider}
        out["SPIDEr-FL"], clip_scores = fluency_penalised(spider, flagged)
        if per_clip is not None:
            per_clip["SPIDEr-FL"] = clip_scores
    return out
