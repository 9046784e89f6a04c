"""Event libraries: labelled recordings with the caption phrases that describe them.

Two layouts are read by :func:`load_event_library`:

* ``<root>/events.csv`` (the default library, ``shared/data/event_library``): columns
  ``file,label`` and optionally ``noun,verb_3sg,verb_ing`` (e.g. ``dog/dog.flac,dog,a dog,
  barks,barking``); ``file`` is relative to ``<root>``. Other columns are ignored.
* ESC-50 (Piczak 2015): ``<root>/meta/esc50.csv`` (``filename,fold,target,category,...``)
  and ``<root>/audio/<filename>``. The 50 categories get the phrases of
  :data:`ESC50_PHRASES`.

A row without phrases gets them from its label (:func:`phrases_from_label`): the noun is
the label with ``_``/``-`` read as spaces and the verbs are the neutral "sounds" /
"sounding" ("church bells sounds" is not good English: give the columns for real use).
"""

import csv
import os
from dataclasses import dataclass
from typing import Dict, List, Tuple

from captionlib.io.datadir import PathLike

#: Caption phrases (noun, verb_3sg, verb_ing) of the 50 ESC-50 categories.
ESC50_PHRASES: Dict[str, Tuple[str, str, str]] = {
    "dog": ("a dog", "barks", "barking"),
    "rooster": ("a rooster", "crows", "crowing"),
    "pig": ("a pig", "grunts", "grunting"),
    "cow": ("a cow", "moos", "mooing"),
    "frog": ("a frog", "croaks", "croaking"),
    "cat": ("a cat", "meows", "meowing"),
    "hen": ("a hen", "clucks", "clucking"),
    "insects": ("insects", "buzz", "buzzing"),
    "sheep": ("a sheep", "bleats", "bleating"),
    "crow": ("a crow", "caws", "cawing"),
    "rain": ("rain", "falls", "falling"),
    "sea_waves": ("the sea", "crashes on the shore", "crashing on the shore"),
    "crackling_fire": ("a fire", "crackles", "crackling"),
    "crickets": ("crickets", "chirp", "chirping"),
    "chirping_birds": ("birds", "chirp", "chirping"),
    "water_drops": ("water", "drips", "dripping"),
    "wind": ("the wind", "blows", "blowing"),
    "pouring_water": ("water", "is poured", "being poured"),
    "toilet_flush": ("a toilet", "flushes", "flushing"),
    "thunderstorm": ("thunder", "rumbles", "rumbling"),
    "crying_baby": ("a baby", "cries", "crying"),
    "sneezing": ("someone", "sneezes", "sneezing"),
    "clapping": ("someone", "claps", "clapping"),
    "breathing": ("someone", "breathes heavily", "breathing heavily"),
    "coughing": ("someone", "coughs", "coughing"),
    "footsteps": ("someone", "walks", "walking"),
    "laughing": ("someone", "laughs", "laughing"),
    "brushing_teeth": ("someone", "brushes their teeth", "brushing their teeth"),
    "snoring": ("someone", "snores", "snoring"),
    "drinking_sipping": ("someone", "sips a drink", "sipping a drink"),
    "door_wood_knock": ("someone", "knocks on a door", "knocking on a door"),
    "mouse_click": ("a computer mouse", "clicks", "clicking"),
    "keyboard_typing": ("someone", "types on a keyboard", "typing on a keyboard"),
    "door_wood_creaks": ("a door", "creaks", "creaking"),
    "can_opening": ("a can", "is opened", "being opened"),
    "washing_machine": ("a washing machine", "runs", "running"),
    "vacuum_cleaner": ("a vacuum cleaner", "runs", "running"),
    "clock_alarm": ("an alarm clock", "rings", "ringing"),
    "clock_tick": ("a clock", "ticks", "ticking"),
    "glass_breaking": ("glass", "breaks", "breaking"),
    "helicopter": ("a helicopter", "flies over", "flying over"),
    "chainsaw": ("a chainsaw", "runs", "running"),
    "siren": ("a siren", "wails", "wailing"),
    "car_horn": ("a car horn", "honks", "honking"),
    "engine": ("an engine", "runs", "running"),
    "train": ("a train", "passes by", "passing by"),
    "church_bells": ("church bells", "ring", "ringing"),
    "airplane": ("an airplane", "flies over", "flying over"),
    "fireworks": ("fireworks", "explode", "exploding"),
    "hand_saw": ("a hand saw", "cuts wood", "cutting wood"),
}


@dataclass(frozen=True)
class EventFile:
    """One recording of an event library.

    Attributes:
        path: absolute path of the audio file.
        label: class label (files of one class share it).
        noun, verb_3sg, verb_ing: caption phrases ("a dog", "barks", "barking").
        where: ``<csv>:<line>`` the row came from (for error messages).
    """

    path: str
    label: str
    noun: str
    verb_3sg: str
    verb_ing: str
    where: str = ""


def phrases_from_label(label: str) -> Tuple[str, str, str]:
    """``(noun, verb_3sg, verb_ing)`` for a label without phrases: ``("<label words>",
    "sounds", "sounding")``."""
    return " ".join(label.replace("_", " ").replace("-", " ").split()), "sounds", "sounding"


def _read_rows(csv_path: str, required: Tuple[str, ...]) -> List[Tuple[int, Dict[str, str]]]:
    with open(csv_path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{csv_path}:1: missing column(s) {', '.join(missing)} (header: {reader.fieldnames})")
        return [(reader.line_num, {k: (v or "").strip() for k, v in row.items() if k}) for row in reader]


def load_event_library(root: PathLike) -> List[EventFile]:
    """Read an event library (``events.csv`` layout or ESC-50 layout, see the module doc).

    Args:
        root: library directory.

    Returns:
        The recordings, in the order of the CSV.

    Raises:
        FileNotFoundError: neither ``events.csv`` nor ``meta/esc50.csv`` under ``root``, or
            a listed audio file is missing (naming the CSV line).
        ValueError: a missing column, an empty label or file name, or only some of the
            three phrase cells filled (naming the CSV line); an empty library.
    """
    root = os.path.abspath(os.fspath(root))
    events_csv = os.path.join(root, "events.csv")
    esc50_csv = os.path.join(root, "meta", "esc50.csv")
    out: List[EventFile] = []
    if os.path.isfile(events_csv):
        for line, row in _read_rows(events_csv, ("file", "label")):
            where = f"{events_csv}:{line}"
            if not row["file"] or not row["label"]:
                raise ValueError(f"{where}: empty file or label")
            phrases = tuple(row.get(k, "") for k in ("noun", "verb_3sg", "verb_ing"))
            if any(phrases) and not all(phrases):
                raise ValueError(f"{where}: noun, verb_3sg and verb_ing must be all given or all empty")
            if not any(phrases):
                phrases = phrases_from_label(row["label"])
            out.append(EventFile(os.path.join(root, row["file"]), row["label"], *phrases, where=where))
    elif os.path.isfile(esc50_csv):
        for line, row in _read_rows(esc50_csv, ("filename", "category")):
            where = f"{esc50_csv}:{line}"
            label = row["category"]
            if not row["filename"] or not label:
                raise ValueError(f"{where}: empty filename or category")
            phrases = ESC50_PHRASES.get(label) or phrases_from_label(label)
            out.append(EventFile(os.path.join(root, "audio", row["filename"]), label, *phrases, where=where))
    else:
        raise FileNotFoundError(f"{root}: no events.csv and no meta/esc50.csv (not an event library)")
    for e in out:
        if not os.path.isfile(e.path):
            raise FileNotFoundError(f"{e.where}: audio file {e.path} not found")
    if not out:
        raise ValueError(f"{root}: the event library lists no recording")
    return out


def split_recordings(
    library: List[EventFile], heldout_fraction: float = 0.2
) -> Tuple[List[EventFile], List[EventFile]]:
    """Split recordings into (development, evaluation) pools.

    A class with at least two files gives ``max(1, round(heldout_fraction * n))`` of them
    (the last ones in CSV order, so the split is stable) to evaluation only; a class with
    one file is in both pools. Evaluation clips of such classes therefore contain
    recordings never heard in training.

    Raises:
        ValueError: ``heldout_fraction`` outside [0, 1).
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    by_label: Dict[str, List[EventFile]] = {}
    for e in library:
        by_label.setdefault(e.label, []).append(e)
    dev: List[EventFile] = []
    ev: List[EventFile] = []
    for files in by_label.values():
        if len(files) < 2 or heldout_fraction == 0.0:
            dev += files
            ev += files
            continue
        k = min(len(files) - 1, max(1, int(round(heldout_fraction * len(files)))))
        dev += files[: len(files) - k]
        ev += files[len(files) - k:]
    return dev, ev
