"""The corpus prior: one caption for every clip, the most frequent caption of the training set.

A reference row for results tables (how far a model is above a system that does not
listen): every clip gets the training caption that occurs most often after cleaning
(:func:`captionlib.text.cleaner.clean_caption`); ties go to the caption first in
``LC_ALL=C`` order, so the choice is deterministic.
"""

import logging
from collections import Counter
from pathlib import Path
from typing import Iterable, Union

from captionlib.io.datadir import read_spk2utt, read_text, write_scp
from captionlib.text.cleaner import clean_caption


def most_frequent_caption(captions: Iterable[str]) -> str:
    """The most frequent cleaned caption.

    Raises:
        ValueError: no non-empty caption.
    """
    counts = Counter(c for c in map(clean_caption, captions) if c)
    if not counts:
        raise ValueError("no non-empty caption to choose from")
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8")))[0]


def write_prior_decode(train_text: Union[str, Path], data_dir: Union[str, Path], output_dir: Union[str, Path]) -> str:
    """Write ``<output_dir>/text`` giving every clip of ``data_dir`` (its ``spk2utt``) the most
    frequent caption of ``train_text``; returns that caption.

    Raises:
        OSError / ValueError: missing, unreadable or malformed files (named), an output dir that
            cannot be made, a ``train_text`` without a non-empty caption (named).
    """
    captions = read_text(train_text).values()
    try:
        caption = most_frequent_caption(captions)
    except ValueError as e:
        raise ValueError(f"{train_text}: {e}") from None
    clips = read_spk2utt(Path(data_dir) / "spk2utt")
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    write_scp(Path(output_dir) / "text", {c: caption for c in clips})
    logging.info("corpus prior of %s for %d clips of %s: %r", train_text, len(clips), data_dir, caption)
    return caption
