"""Synthetic fluency errors made from clean captions, as FENSE trains its error detector.

FENSE (Zhou, Zhang, Chen, Wu and Yu, "Can Audio Captions Be Evaluated with Image Caption
Metrics?", ICASSP 2022, sec. 3.2) trains a BERT classifier on clean captions and on copies
damaged in five ways, the errors that RL-trained captioners make. Its five labels, plus the
aggregate ``error`` label, are (in the order of its checkpoints' outputs):

* ``add_tail``: an incomplete phrase appended (``... in the background and a``);
* ``repeat_event``: an event of the caption appended again after a conjunction
  (``a dog barks while a man speaks and a dog barks``), slightly altered;
* ``repeat_adv``: an adverb of the caption appended again at the end (``... loudly ... loudly``);
* ``remove_conj``: a conjunction removed (``a dog barks a man speaks``);
* ``remove_verb``: a verb removed (``a dog loudly in the distance``).

Here each error is one function of the caption's ``(word, Penn tag)`` pairs (tags of
:func:`captionlib.text.pos.tag_words`, where FENSE uses spaCy's universal tags) following
FENSE's generation notebook (``make_synthetic_data_clotho.ipynb`` of github.com/blmoistawinde/fense):
the same tail list, the same event conjunctions, the last adverb / conjunction / verb of the
caption. Two differences, both where the notebook's code departs from its evident intent:
``remove_conj`` and ``remove_verb`` remove the conjunction or verb itself (the notebook's loop
variable makes it drop the caption's last word), and the alterations of a repeated event work
on whole words (the notebook's string replacement of ``"a "`` also cuts words ending in ``a``).
Captions are cleaned (:func:`captionlib.text.cleaner.clean_words`: lower case, no punctuation).
Every random choice takes a ``numpy.random.Generator``, so a seed fixes the result.
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np

from captionlib.text.cleaner import clean_words
from captionlib.text.pos import tag_words

#: FENSE's five synthetic error classes (without the aggregate ``error`` label).
ERROR_CLASSES = ("add_tail", "repeat_event", "repeat_adv", "remove_conj", "remove_verb")
#: Incomplete phrases of ``add_tail``: FENSE's list (its ``follow by`` included as written).
USELESS_TAILS = ("in the", "of a", "and", "and a", "and a series of", "follow by", "as", "with", "a", "by a",
                 "on the", "and then")
#: Words and phrases that join two events: where ``repeat_event`` splits a caption into events
#: and (all but ``with``) what it joins the repeated event with (FENSE's list; ``followed by`` for
#: its ``follow by``).
EVENT_CONJUNCTIONS = ("and", "followed by", "while", "before", "after", "as", "with")
#: Subordinating conjunctions that ``remove_conj`` may remove besides the words tagged ``CC``
#: (Penn tags give them ``IN``/``WRB``, like prepositions; FENSE's spaCy tags them ``SCONJ``).
SUBORDINATORS = frozenset("while whilst as because although though whereas until unless when whenever if "
                          "before after since".split())
#: Verbs that ``remove_verb`` keeps: auxiliaries (spaCy's ``AUX``, not ``VERB``).
AUXILIARIES = frozenset("be am is are was were been being have has had having do does did get gets got "
                        "can could will would shall should may might must".split())
#: Words that ``repeat_adv`` does not take for adverbs although they are tagged ``RB``.
NOT_ADVERBS = frozenset("not n't nt".split())

Token = Tuple[str, str]  # (word, Penn Treebank tag)


def tag_caption(caption: str) -> List[Token]:
    """The cleaned words of ``caption`` with their POS tags, the input of the corruptions."""
    words = clean_words(caption)
    return list(zip(words, tag_words(words)))


def add_tail(toks: Sequence[Token], rng: np.random.Generator) -> Optional[List[Token]]:
    """``add_tail``: append one phrase of :data:`USELESS_TAILS`, chosen by ``rng``.

    Returns:
        The damaged caption, or ``None`` for an empty caption.
    """
    if not toks:
        return None
    tail = USELESS_TAILS[int(rng.integers(len(USELESS_TAILS)))]
    return list(toks) + [(w, "X") for w in tail.split()]


def split_events(toks: Sequence[Token]) -> List[List[Token]]:
    """The caption cut at every :data:`EVENT_CONJUNCTIONS` word or phrase; empty pieces dropped."""
    events: List[List[Token]] = [[]]
    i = 0
    while i < len(toks):
        word = toks[i][0]
        if word == "followed" and i + 1 < len(toks) and toks[i + 1][0] == "by":
            events.append([])
            i += 2
            continue
        if word in EVENT_CONJUNCTIONS:
            events.append([])
        else:
            events[-1].append(toks[i])
        i += 1
    return [e for e in events if e]


def _alter_event(event: List[Token], rng: np.random.Generator) -> List[Token]:
    """FENSE's light alteration of a repeated event: kept as is (2 chances in 4), else articles or
    forms of *be* removed when it has some, else ``a`` put before its first or last word."""
    has_article = any(w in ("a", "an") for w, _ in event)
    has_be = any(w in ("is", "are", "be", "being") for w, _ in event)
    choice = int(rng.integers(4))
    if choice == 2:
        out = [t for t in event if t[0] not in ("a", "an")] if has_article else [("a", "DT")] + event
    elif choice == 3:
        out = [t for t in event if t[0] not in ("is", "are", "be", "being")] if has_be else (
            event[:-1] + [("a", "DT")] + event[-1:])
    else:
        out = list(event)
    return out or list(event)


def repeat_event(toks: Sequence[Token], rng: np.random.Generator) -> Optional[List[Token]]:
    """``repeat_event``: append a conjunction and one of the caption's events, lightly altered.

    The events are :func:`split_events`; the conjunction is one of :data:`EVENT_CONJUNCTIONS`
    but ``with``; the alteration is FENSE's (:func:`_alter_event`).

    Returns:
        The damaged caption, or ``None`` for an empty caption.
    """
    events = split_events(toks)
    if not events:
        return None
    event = _alter_event(events[int(rng.integers(len(events)))], rng)
    conj = EVENT_CONJUNCTIONS[int(rng.integers(len(EVENT_CONJUNCTIONS) - 1))]
    return list(toks) + [(w, "CC") for w in conj.split()] + event


def _is_adverb(tok: Token) -> bool:
    return tok[1] in ("RB", "RBR", "RBS") and tok[0] not in NOT_ADVERBS and tok[0].isalpha()


def repeat_adv(toks: Sequence[Token], rng: Optional[np.random.Generator] = None) -> Optional[List[Token]]:
    """``repeat_adv``: append the caption's last adverb (tag ``RB*``) again at its end.

    ``rng`` is unused (the choice is FENSE's: the last adverb).

    Returns:
        The damaged caption, or ``None`` when the caption has no adverb.
    """
    advs = [t for t in toks if _is_adverb(t)]
    return list(toks) + [advs[-1]] if advs else None


def _remove_last(toks: Sequence[Token], keep) -> Optional[List[Token]]:
    """``toks`` without its last token for which ``keep`` is false, or ``None`` if none is (or
    if nothing would be left)."""
    idx = [i for i, t in enumerate(toks) if not keep(t)]
    if not idx or len(toks) < 2:
        return None
    i = idx[-1]
    return list(toks[:i]) + list(toks[i + 1:])


def remove_conj(toks: Sequence[Token], rng: Optional[np.random.Generator] = None) -> Optional[List[Token]]:
    """``remove_conj``: remove the caption's last conjunction (tag ``CC`` or a :data:`SUBORDINATORS` word).

    ``rng`` is unused (FENSE removes the last one).

    Returns:
        The damaged caption, or ``None`` when the caption has no conjunction.
    """
    return _remove_last(toks, lambda t: not (t[1] == "CC" or t[0] in SUBORDINATORS))


def remove_verb(toks: Sequence[Token], rng: Optional[np.random.Generator] = None) -> Optional[List[Token]]:
    """``remove_verb``: remove the caption's last verb (tag ``VB*``, not one of :data:`AUXILIARIES`).

    ``rng`` is unused (FENSE removes the last one).

    Returns:
        The damaged caption, or ``None`` when the caption has no such verb.
    """
    return _remove_last(toks, lambda t: not (t[1].startswith("VB") and t[0] not in AUXILIARIES))


CORRUPTIONS = {
    "add_tail": add_tail,
    "repeat_event": repeat_event,
    "repeat_adv": repeat_adv,
    "remove_conj": remove_conj,
    "remove_verb": remove_verb,
}


def corrupt_tokens(toks: Sequence[Token], kind: str, rng: np.random.Generator) -> Optional[List[Token]]:
    """Apply the error ``kind`` (one of :data:`ERROR_CLASSES`) to tagged words.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in CORRUPTIONS:
        raise ValueError(f"unknown fluency error class {kind!r}; choose from {', '.join(ERROR_CLASSES)}")
    return CORRUPTIONS[kind](toks, rng)


def corrupt(caption: str, kind: str, seed: int = 0) -> Optional[str]:
    """The caption (cleaned) with the error ``kind``, deterministic given ``seed``.

    Example:
        >>> corrupt("A dog barks loudly in the distance.", "repeat_adv")
        'a dog barks loudly in the distance loudly'

    Returns:
        The damaged caption, or ``None`` when ``kind`` does not apply (no adverb, conjunction or
        non-auxiliary verb to repeat or remove; an empty caption).

    Raises:
        ValueError: an unknown ``kind``.
    """
    out = corrupt_tokens(tag_caption(caption), kind, np.random.default_rng(seed))
    return None if out is None else " ".join(w for w, _ in out)


def random_corruption(toks: Sequence[Token], rng: np.random.Generator, second: float = 0.3,
                      weights: Optional[Sequence[float]] = None) -> Tuple[Optional[List[Token]], List[int]]:
    """One training example of the detector: one error class drawn among those that apply (in
    proportion to ``weights``), and with probability ``second`` another one applied after it
    (FENSE applies up to two).

    Args:
        toks: the tagged clean caption.
        rng: the random generator.
        second: probability of a second, different error.
        weights: relative frequency of each class of :data:`ERROR_CLASSES` (``None``: equal).

    Returns:
        ``(damaged caption or None if no class applies, labels)``: ``labels[k]`` is 1 for each
        class of :data:`ERROR_CLASSES` applied.
    """
    labels = [0] * len(ERROR_CLASSES)
    p = None if weights is None else np.asarray(weights, dtype=np.float64) / np.sum(weights)
    out: Optional[List[Token]] = None
    cur = list(toks)
    for n in range(2):
        if n == 1 and rng.random() >= second:
            break
        for k in rng.choice(len(ERROR_CLASSES), size=len(ERROR_CLASSES), replace=False, p=p):
            if labels[k]:
                continue
            res = corrupt_tokens(cur, ERROR_CLASSES[int(k)], rng)
            if res is not None:
                cur, out, labels[int(k)] = res, res, 1
                break
    return out, labels
