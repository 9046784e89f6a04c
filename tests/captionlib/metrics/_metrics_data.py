"""Real Clotho v2.1 captions for the metric tests (``../shared/data/clotho_captions_v2.1``)."""

import csv
import functools
import os

import pytest

from captionlib.text.cleaner import clean_words

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CAPTIONS_DIR = os.environ.get(
    "CAPTIONLIB_CLOTHO_CAPTIONS",
    os.path.join(os.path.dirname(REPO), "shared", "data", "clotho_captions_v2.1"),
)


@functools.lru_cache(maxsize=None)
def clotho_split(split: str):
    """``(clip ids, rows of 5 raw captions)`` of one split; skips the test if absent."""
    path = os.path.join(CAPTIONS_DIR, f"clotho_captions_{split}.csv")
    if not os.path.isfile(path):
        pytest.skip(f"Clotho caption CSV not found: {path}")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    ids = [f"clotho-{split}-{i + 1:05d}" for i in range(len(rows))]
    return ids, [[r[f"caption_{k}"] for k in range(1, 6)] for r in rows]


@functools.lru_cache(maxsize=None)
def eval_parity_set():
    """Caption 1 of each evaluation clip as hypothesis, captions 2-5 as references (words)."""
    ids, caps = clotho_split("evaluation")
    hyps = {c: clean_words(r[0]) for c, r in zip(ids, caps)}
    refs = {c: [clean_words(x) for x in r[1:]] for c, r in zip(ids, caps)}
    return refs, hyps


def as_pycoco(refs, hyps):
    """pycocoevalcap's input format: ``gts = {id: [str]}``, ``res = {id: [str]}``."""
    gts = {c: [" ".join(w) for w in rs] for c, rs in refs.items()}
    res = {c: [" ".join(hyps[c])] for c in refs}
    return gts, res
