"""Transparent fluency rules and the -FL penalty of per-caption scores (no model, no torch).

RL-trained captioners learn to game CIDEr-D with disfluent endings and repetitions
(``... in the background and a``, ``whistling whistling``). The rules below catch those
patterns anyone can read: a floor under the trained detector of :mod:`captionlib.metrics.fluency`
(FENSE's approach, Zhou et al., ICASSP 2022), and the flagger of ``caption_score --metrics fluency``
when no detector is given. :func:`fluency_penalised` forms the -FL scores (FENSE divides a flagged
caption's score by 10; SPIDEr-FL, DCASE 2023 task 6a, does the same to SPIDEr).

Captions are compared as :func:`captionlib.text.cleaner.clean_words` gives them (lower case, no
punctuation), the words a captioner emits.
"""

from typing import Dict, List, Mapping, Sequence, Tuple, Union

import numpy as np

from captionlib.text.cleaner import clean_words

#: Factor of a flagged caption's score in the -FL scores (SPIDEr-FL: ``score * (1 - 0.9 * flag)``).
FL_PENALTY = 0.1

# ----------------------------------------------------------------------------- rules
#: Last words that leave a caption unfinished: articles, coordinating conjunctions, possessive
#: determiners, and prepositions that cannot end an English clause as a particle can
#: (``passing by``, ``turned on``, ``joins in``, ``moving about`` are fluent, so ``by``, ``on``,
#: ``in``, ``about``, ``off``, ``up``, ``out``, ``over``, ``through`` are not here). On the Clotho v2.1
#: development captions 6 of 19,195 end in one of them (``to listen to``, ``to play with``).
FUNCTION_WORD_ENDINGS = frozenset(
    "a an the and or but nor of with from at for into onto to as than very its their my our your".split()
)
#: Last two words that leave a caption unfinished although the last word alone may end a caption
#: (``every now and then`` is fluent: ``and then`` after ``now`` does not count).
FUNCTION_BIGRAM_ENDINGS = frozenset({("followed", "by"), ("follow", "by"), ("and", "then")})
#: Names of the rules, in the order of :func:`rule_flags`' columns.
RULES = ("function_word_end", "repeated_word", "repeated_trigram")


def caption_words(caption: Union[str, Sequence[str]]) -> List[str]:
    """The words of a raw caption (:func:`captionlib.text.cleaner.clean_words`) or of a word list (as is)."""
    return clean_words(caption) if isinstance(caption, str) else list(caption)


def fluency_rules(caption: Union[str, Sequence[str]]) -> List[str]:
    """The rules of :data:`RULES` that fire for one caption.

    * ``function_word_end``: the last word is in :data:`FUNCTION_WORD_ENDINGS` or the last two
      are in :data:`FUNCTION_BIGRAM_ENDINGS` (but ``now and then``);
    * ``repeated_word``: a word follows itself (``whistling whistling``);
    * ``repeated_trigram``: a word 3-gram occurs twice (``a dog barks and a dog barks``).

    Example:
        >>> fluency_rules("Birds chirp in the background and a")
        ['function_word_end']
        >>> fluency_rules("a bird is whistling whistling")
        ['repeated_word']

    Args:
        caption: a raw caption (cleaned here) or its words.

    Returns:
        The names of the rules that fire, in :data:`RULES` order (empty: none).
    """
    w = caption_words(caption)
    fired = []
    last2 = tuple(w[-2:])
    if w and (w[-1] in FUNCTION_WORD_ENDINGS or (last2 in FUNCTION_BIGRAM_ENDINGS and w[-3:-2] != ["now"])):
        fired.append("function_word_end")
    if any(a == b for a, b in zip(w, w[1:])):
        fired.append("repeated_word")
    grams = list(zip(w, w[1:], w[2:]))
    if len(set(grams)) < len(grams):
        fired.append("repeated_trigram")
    return fired


def rule_flags(captions: Sequence[Union[str, Sequence[str]]]) -> np.ndarray:
    """Which rules fire for each caption: bool array of shape (N, len(:data:`RULES`)).

    A caption is rule-flagged when any of its row is True (``rule_flags(c).any(axis=1)``).
    """
    out = np.zeros((len(captions), len(RULES)), dtype=bool)
    for i, cap in enumerate(captions):
        for name in fluency_rules(cap):
            out[i, RULES.index(name)] = True
    return out


def fluency_penalised(scores: Mapping[str, float], flagged: Mapping[str, bool],
                      factor: float = FL_PENALTY) -> Tuple[float, Dict[str, float]]:
    """The -FL form of per-caption scores: a flagged caption's score times ``factor``, then the mean.

    SPIDEr-FL (aac-metrics' ``spider_fl``) is ``mean_i SPIDEr_i * (1 - 0.9 * flag_i)``: with the
    default ``factor`` 0.1 this is that formula applied to any per-caption score (CIDEr-D-FL from
    the per-clip CIDEr-D).

    Example:
        >>> fluency_penalised({"a": 1.0, "b": 0.5}, {"a": True, "b": False})
        (0.3, {'a': 0.1, 'b': 0.5})

    Args:
        scores: ``{clip_id: score}``.
        flagged: ``{clip_id: bool}`` for the same clips.
        factor: what a flagged caption's score is multiplied by.

    Returns:
        ``(mean penalised score, {clip_id: penalised score})``.

    Raises:
        ValueError: no clip, or the two mappings cover different clips.
    """
    if not scores:
        raise ValueError("no score to penalise")
    if set(scores) != set(flagged):
        raise ValueError("scores and fluency flags must cover the same clips")
    out = {c: float(s) * (factor if flagged[c] else 1.0) for c, s in scores.items()}
    return float(np.mean(list(out.values()))), out
