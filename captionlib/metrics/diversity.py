"""Set-level diversity metrics of captioning (seed 001, Chen and Jin; after Wang and Chan 2019).

For the set ``Y`` of captions generated for one clip (e.g. 5 samples or the 5-best beam):

* ``Div-1``: number of distinct unigrams in ``Y`` / number of words in ``Y``;
* ``Div-2``: number of distinct bigrams in ``Y`` / number of words in ``Y``;
* ``mBLEU-4``: mean over captions of the sentence BLEU-4
  (:func:`captionlib.metrics.bleu.sentence_bleu`, pycocoevalcap's definition) of the caption
  against the *other* captions of ``Y`` as references. Lower is more diverse.

Each is averaged over clips. Corpus-level extras: vocabulary size (distinct words over all
generated captions) and the share of generated captions that do not occur verbatim (as
word sequences) among the training captions.
"""

from typing import Dict, Iterable, Mapping, Optional, Sequence

import numpy as np

from captionlib.metrics.bleu import sentence_bleu


def div_n(captions: Sequence[Sequence[str]], n: int) -> float:
    """Distinct n-grams of a caption set divided by its number of words (0.0 when empty)."""
    words = sum(len(c) for c in captions)
    if words == 0:
        return 0.0
    grams = {tuple(c[i : i + n]) for c in captions for i in range(len(c) - n + 1)}
    return len(grams) / float(words)


def mbleu(captions: Sequence[Sequence[str]], n: int = 4) -> float:
    """Mean sentence BLEU-n of each caption against the others of the set.

    Raises:
        ValueError: with fewer than 2 captions.
    """
    if len(captions) < 2:
        raise ValueError("mBLEU needs at least two captions per clip")
    scores = [
        sentence_bleu(captions[i], [c for j, c in enumerate(captions) if j != i], n)[n - 1]
        for i in range(len(captions))
    ]
    return float(np.mean(scores))


def diversity_metrics(
    captions: Mapping[str, Sequence[Sequence[str]]],
    train_captions: Optional[Iterable[Sequence[str]]] = None,
) -> Dict[str, float]:
    """Div-1, Div-2, mBLEU-4 (means over clips), vocabulary size and novelty.

    Args:
        captions: ``{clip_id: [generated word list, ...]}``; mBLEU-4 uses the clips with
            at least two captions (NaN if none).
        train_captions: training captions (word lists); when given, ``novel`` is the share
            of generated captions not found among them.

    Returns:
        ``{"Div-1", "Div-2", "mBLEU-4", "vocab_size", "num_captions"[, "novel"]}``.
    """
    sets = list(captions.values())
    multi = [s for s in sets if len(s) >= 2]
    out: Dict[str, float] = {
        "Div-1": float(np.mean([div_n(s, 1) for s in sets])) if sets else float("nan"),
        "Div-2": float(np.mean([div_n(s, 2) for s in sets])) if sets else float("nan"),
        "mBLEU-4": float(np.mean([mbleu(s, 4) for s in multi])) if multi else float("nan"),
        "vocab_size": float(len({w for s in sets for c in s for w in c})),
        "num_captions": float(sum(len(s) for s in sets)),
    }
    if train_captions is not None:
        seen = {tuple(c) for c in train_captions}
        all_caps = [tuple(c) for s in sets for c in s]
        out["novel"] = (
            float(np.mean([c not in seen for c in all_caps])) if all_caps else float("nan")
        )
    return out
