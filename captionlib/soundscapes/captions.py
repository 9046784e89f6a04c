"""Captions of a synthetic soundscape, written the way Clotho / AudioCaps annotators write them.

A clip is described by its 1-3 foreground events (:class:`EventMention`); the quiet background
is mentioned only now and then ("... in a quiet place"). :func:`write_captions` turns them into
``num_captions`` distinct captions:

* events are told in onset order; two consecutive events *overlap* when the later one starts at
  least ``overlap_s`` seconds before the earlier one ends ("X while Y", "X with Y in the
  background"), otherwise they are *in sequence* ("X and then Y", "Y after X");
* an event heard 2 times is told "twice", 3 or more times "several times", "repeatedly", ...;
  a loud one "loudly", "nearby", ..., a distant one "in the distance", "faintly", ...;
* the wording comes from the template tables below (data, not code): a caption template joins
  the events' slots ``{i:T}`` (``i``: event index in onset order, ``T``: slot type), and each
  slot is filled with a sentence frame of that type ("{n} can be heard {ving}{m}", ...).
  Templates and the frames of the first slot are drawn without replacement across the captions.

Every caption mentions each event as its noun followed, maybe after "is" / "can be heard", by
one of its verb forms ("a dog barks", "a dog can be heard barking"), and no other event.
"""

import re
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

LOUDNESS = ("loud", "normal", "distant")

#: Frames of one event: ``{n}`` noun, ``{v3}`` / ``{ving}`` verb forms, ``{be}`` is/are,
#: ``{m}`` its repetition / loudness adverbs (with a leading space, or empty).
CLAUSES = ("{n} {v3}{m}", "{n} {be} {ving}{m}", "{n} can be heard {ving}{m}",
           "there {be} {n} {ving}{m}", "you can hear {n} {ving}{m}")
NOUN_PHRASES = ("the sound of {n} {ving}{m}", "{n} {ving}{m}")
#: Only for a distant event at the start of a caption; its ``{m}`` has no loudness adverb.
DISTANT_FRAME = "in the distance, {n} {v3}{m}"
#: Slot types: F any frame, C clause, N noun phrase (F, C: caption start, so may be
#: ``DISTANT_FRAME``), c clause inside, s simple clause, p plain clause, g gerund phrase.
SLOTS: Dict[str, Tuple[str, ...]] = {"F": CLAUSES + NOUN_PHRASES, "C": CLAUSES, "N": NOUN_PHRASES,
                                     "c": CLAUSES, "s": CLAUSES[:2], "p": CLAUSES[:1],
                                     "g": NOUN_PHRASES[1:]}

#: Two events in sequence (0 before 1) / overlapping.
SEQUENCE = ("{0:C} and then {1:p}", "{0:F}, followed by {1:g}", "first {0:c}, then {1:p}",
            "{1:C} after {0:p}", "{0:C} before {1:p}", "{0:g} is followed by {1:g}",
            "{0:C}, after which {1:p}")
OVERLAP = ("{0:C} while {1:s}", "{0:C} as {1:s}", "{0:C} and at the same time {1:p}",
           "{0:F} with {1:g} in the background", "{0:p} and {1:p} at the same time",
           "{0:g} and {1:g} at the same time", "{0:N} mixed with {1:g}",
           "{0:p} and {1:p} simultaneously")
#: Third event appended to a two-event clause template: (text, regex of head words it avoids).
TAILS = {"seq": ((", and then {2:p}", "then"), (", followed by {2:g}", "followed by"),
                 (", and finally {2:p}", "finally"), (", after which {2:p}", "after which")),
         "ovl": ((" while {2:s}", "while"), (" as {2:s}", " as |simultaneously"),
                 (", and at the same time {2:p}", "at the same time|simultaneously"),
                 (" with {2:g} in the background", "background"))}
#: Whole three-event templates.
TRIPLES = {("seq", "seq"): ("first {0:c}, then {1:p}, and finally {2:p}",
                            "{0:C}, followed by {1:g} and then {2:g}"),
           ("ovl", "ovl"): ("{0:C} while {1:p} and {2:p}",
                            "{0:g}, {1:g} and {2:g} at the same time",
                            "{0:p}, {1:p} and {2:p} simultaneously")}

REPEATED = ("several times", "repeatedly", "a few times", "over and over")
ADVERBS = {"loud": ("loudly", "nearby", "close by", "close to the microphone"),
           "distant": ("in the distance", "far away", "faintly", "from afar"), "normal": ("",)}
BACKGROUND = (" in a quiet place", " against quiet background noise", " in a quiet environment")
BACKGROUND_P = 0.25
_SLOT = re.compile(r"\{(\d):([A-Za-z])\}")


@dataclass(frozen=True)
class EventMention:
    """One foreground sound source of a clip, as the captions describe it.

    ``onset_s`` / ``offset_s``: start of its first and end of its last occurrence, in seconds
    from the clip start; ``count``: occurrences (> 1: it repeats); ``loudness``: one of
    :data:`LOUDNESS`. The noun keeps its article ("a dog", "an owl", "thunder", "someone").
    """

    noun: str
    verb_3sg: str
    verb_ing: str
    onset_s: float
    offset_s: float
    count: int = 1
    loudness: str = "normal"


def _check(events: Sequence[EventMention]) -> None:
    if not 1 <= len(events) <= 3:
        raise ValueError(f"a clip has 1 to 3 foreground events, got {len(events)}")
    for e in events:
        for name in ("noun", "verb_3sg", "verb_ing"):
            if not isinstance(getattr(e, name), str) or not getattr(e, name).strip():
                raise ValueError(f"empty {name} in {e!r}")
        if e.count < 1:
            raise ValueError(f"count must be >= 1, got {e.count} in {e!r}")
        if e.loudness not in LOUDNESS:
            raise ValueError(f"loudness must be one of {LOUDNESS}, got {e.loudness!r}")
        if not e.offset_s >= e.onset_s:
            raise ValueError(f"offset_s {e.offset_s} < onset_s {e.onset_s} in {e!r}")


def _templates(relations: Sequence[str], evs: Sequence[EventMention],
               rng: np.random.Generator) -> List[str]:
    """Caption templates for the relations between consecutive events ("seq" / "ovl")."""
    if not relations:
        return ["{0:F}"]
    pairs = SEQUENCE if relations[0] == "seq" else OVERLAP
    out = list(pairs) if len(relations) == 1 else list(TRIPLES.get(tuple(relations), ()))
    if len(relations) == 2:
        # A clause head for events 0, 1 (not the reversed "after"), each with a fitting tail.
        heads = [t.replace(":F}", ":C}") for t in pairs
                 if "{1:C}" not in t and t[:4] not in ("{0:g", "{0:N")]
        tails = [TAILS[relations[1]][j] for j in rng.permutation(len(TAILS[relations[1]]))]
        for k, i in enumerate(rng.permutation(len(heads))):
            fits = [t for t, avoid in tails if not re.search(avoid, heads[i]) and _fits(t, evs)]
            out += [heads[i] + fits[k % len(fits)]] if fits else []
    return [t for t in out if _fits(t, evs)]


def _fits(template: str, evs: Sequence[EventMention]) -> bool:
    """A background event ("with X in the background") must be neither loud nor distant."""
    return all(evs[int(i)].loudness == "normal"
               for i in re.findall(r"\{(\d):g\} in the background", template))


def onset_order(event) -> Tuple[float, str, str]:
    """Sort key of a clip's events (:class:`EventMention` or the mixer's ``PlacedEvent``):
    onset in seconds, then noun and verb, so ties are ordered the same everywhere."""
    return (event.onset_s, event.noun, event.verb_3sg)


def write_captions(events: Sequence[EventMention], rng: np.random.Generator,
                   num_captions: int = 5, overlap_s: float = 0.25) -> List[str]:
    """``num_captions`` captions of one clip with the foreground ``events`` (seconds).

    Events are told in onset order (ties by noun); consecutive ones overlap when the later
    starts at least ``overlap_s`` seconds before the earlier one's ``offset_s``. Captions are
    pairwise distinct where the templates allow it, and depend only on ``events`` and the
    state of ``rng`` (all randomness is drawn from it).

    Raises:
        ValueError: no events or more than 3, count < 1, an unknown loudness,
            offset_s < onset_s, an empty noun or verb, or num_captions < 1.
    """
    _check(events)
    if num_captions < 1:
        raise ValueError(f"num_captions must be >= 1, got {num_captions}")
    evs = sorted(events, key=onset_order)
    relations = ["ovl" if b.onset_s <= a.offset_s - overlap_s else "seq"
                 for a, b in zip(evs, evs[1:])]
    templates = _templates(relations, evs, rng)
    templates = [templates[i] for i in rng.permutation(len(templates))]
    # Frames of the first slot (per slot type and event) and adverbs (per kind, so that two
    # events of a caption get different ones) are drawn without replacement, then cycled.
    orders: Dict[tuple, List[str]] = {}
    used: Dict[tuple, int] = {}

    def draw(key: tuple, options: Sequence[str]) -> str:
        if key not in orders:
            orders[key] = [options[i] for i in rng.permutation(len(options))]
        used[key] = used.get(key, 0) + 1
        return orders[key][(used[key] - 1) % len(options)]

    def fill(match: "re.Match") -> str:
        i, slot, start = int(match.group(1)), match.group(2), match.start() == 0
        e = evs[i]
        frames = SLOTS[slot]
        if slot in "FC" and start and e.loudness == "distant":
            frames = frames + (DISTANT_FRAME,)
        if start or slot == "c":  # the first clause: frames without replacement
            frame = draw((slot, i), frames)
        else:
            frame = frames[int(rng.integers(len(frames)))]
        loud = "" if frame == DISTANT_FRAME else draw((e.loudness,), ADVERBS[e.loudness])
        rep = "" if e.count == 1 else "twice" if e.count == 2 else draw(("rep",), REPEATED)
        if loud in ("loudly", "faintly"):  # "barks loudly twice", "barks loudly and repeatedly"
            mods = (loud, "and " + rep) if rep == "repeatedly" else (loud, rep)
        else:  # "barks twice nearby"
            mods = (rep, loud)
        verb = e.verb_3sg.split()[0].lower()
        plural = verb in ("are", "were") or not verb.endswith("s")  # "insects buzz"
        return frame.format(n=e.noun.strip(), v3=e.verb_3sg.strip(), ving=e.verb_ing.strip(),
                            be="are" if plural else "is", m="".join(" " + w for w in mods if w))

    captions: List[str] = []
    for k in range(num_captions):
        for attempt in range(50):
            first = k < len(templates) and attempt == 0
            template = templates[k] if first else templates[int(rng.integers(len(templates)))]
            text = _SLOT.sub(fill, template)
            if "background" not in template and rng.random() < BACKGROUND_P:
                text += BACKGROUND[int(rng.integers(len(BACKGROUND)))]
            text = " ".join(text.split())
            text = text[0].upper() + text[1:] + "."
            if text not in captions:
                break
        captions.append(text)
    return captions
