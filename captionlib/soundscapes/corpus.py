"""Write a captioned soundscape corpus in the official Clotho layout (stage 0 of egs/soundscapes).

Output under ``output_dir``::

    clotho_captions_<split>.csv     file_name,caption_1,...,caption_5 (Clotho v2.1 layout)
    <split>/<split>_<NNNNN>.flac    16-bit FLAC clips
    annotations_<split>.jsonl       one SoundscapeSpec (JSON) per clip, in CSV order
    corpus.json                     the options, library and counts it was made from
    LICENSES/, EVENT_LIBRARY_README.md   the event library's licence notices (copied)

so that ``captionbin.caption_prepare_clotho`` prepares it like Clotho. Clip ``i`` of split
``s`` depends only on (``seed``, ``s``, ``i``), the library and the options: a larger
corpus extends a smaller one. Development and validation draw from the development
recording pool, evaluation from the evaluation pool (see
:func:`captionlib.soundscapes.library.split_recordings`).
"""

import csv
import functools
import io
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf

from captionlib.audio.io import load_audio
from captionlib.io.datadir import PathLike, write_lines_atomic
from captionlib.soundscapes.captions import write_captions
from captionlib.soundscapes.library import EventFile, load_event_library, split_recordings
from captionlib.soundscapes.mixer import SoundscapeConfig, render, sample_soundscape

SPLITS = ("development", "validation", "evaluation")
NUM_CAPTIONS = 5


def make_soundscape_corpus(
    event_root: PathLike,
    output_dir: PathLike,
    num_clips: Mapping[str, int],
    seed: int = 0,
    config: SoundscapeConfig = SoundscapeConfig(),
    heldout_fraction: float = 0.2,
    classes: Optional[Sequence[str]] = None,
    log_interval: int = 200,
) -> Dict[str, int]:
    """Generate the corpus (skipped when ``corpus.json`` says it was made with the same options).

    Args:
        event_root: event library (``events.csv`` or ESC-50 layout).
        output_dir: corpus root to write.
        num_clips: clips per split, e.g. ``{"development": 1500, "validation": 200,
            "evaluation": 300}`` (keys from :data:`SPLITS`).
        seed: corpus seed.
        config: clip distributions (length, events, SNRs, ...).
        heldout_fraction: share of each multi-file class's recordings kept for evaluation.
        classes: use only the recordings of these labels (``None``: all).
        log_interval: clips between progress lines.

    Returns:
        Clips written per split.

    Raises:
        ValueError: unknown split or a negative count, a class not in the library; errors
            of the library reader.
    """
    bad = [s for s in num_clips if s not in SPLITS]
    if bad or any(n < 0 for n in num_clips.values()):
        raise ValueError(f"num_clips: splits must be among {SPLITS} with counts >= 0, got {dict(num_clips)}")
    event_root = os.path.abspath(os.fspath(event_root))
    output_dir = os.fspath(output_dir)
    options = {
        "event_root": event_root, "num_clips": dict(num_clips), "seed": seed,
        "config": asdict(config), "heldout_fraction": heldout_fraction,
        "classes": sorted(classes) if classes else None,
    }
    info_path = os.path.join(output_dir, "corpus.json")
    if _made_with(info_path, options):
        logging.info("%s: already generated with these options", output_dir)
        write_label_csvs(output_dir)
        return dict(num_clips)
    library = _select_classes(load_event_library(event_root), classes, event_root)
    dev_pool, eval_pool = split_recordings(library, heldout_fraction)

    @functools.lru_cache(maxsize=None)
    def load(path: str) -> np.ndarray:
        return load_audio(path, fs=config.sample_rate)[0]

    durations = {e.path: len(load(e.path)) / config.sample_rate for e in library}
    os.makedirs(output_dir, exist_ok=True)
    if os.path.exists(info_path):
        os.remove(info_path)  # the corpus is being rewritten: not done until corpus.json is back
    writer = _SplitWriter(event_root, output_dir, seed, config, durations, load, log_interval)
    for split_index, split in enumerate(SPLITS):
        if num_clips.get(split, 0) > 0:
            writer.write(split_index, split, num_clips[split], eval_pool if split == "evaluation" else dev_pool)
    copy_notices(event_root, output_dir)
    write_label_csvs(output_dir)
    labels = sorted({e.label for e in library})
    info = {"options": options, "num_recordings": len(library), "num_classes": len(labels), "classes": labels}
    write_lines_atomic(info_path, json.dumps(info, indent=1).splitlines())
    return dict(num_clips)


def _made_with(info_path: str, options: Mapping[str, object]) -> bool:
    """Whether ``corpus.json`` exists and was written with ``options`` (compared as JSON)."""
    if not os.path.isfile(info_path):
        return False
    with open(info_path, encoding="utf-8") as f:
        return json.load(f).get("options") == json.loads(json.dumps(options))


def _select_classes(library: List[EventFile], classes: Optional[Sequence[str]], event_root: str) -> List[EventFile]:
    """The recordings of ``classes`` (all of ``library`` when ``None`` or empty).

    Raises:
        ValueError: a class without recording in the library at ``event_root``.
    """
    if not classes:
        return library
    unknown = sorted(set(classes) - {e.label for e in library})
    if unknown:
        raise ValueError(f"{event_root}: no recording of class(es) {', '.join(unknown)}")
    return [e for e in library if e.label in set(classes)]


@dataclass
class _SplitWriter:
    """Writes the clips, CSV and annotations of one split after another (see :func:`make_soundscape_corpus`).

    Attributes:
        event_root: the event library (annotations name its files relative to it).
        output_dir: the corpus root.
        seed: corpus seed; clip ``i`` of split number ``s`` draws from ``default_rng([seed, s, i])``.
        config: clip distributions.
        durations: ``{recording path: seconds}`` of the library.
        load: ``path -> (samples,)`` mono audio at ``config.sample_rate`` (cached).
        log_interval: clips between progress lines.
    """

    event_root: str
    output_dir: str
    seed: int
    config: SoundscapeConfig
    durations: Dict[str, float]
    load: Callable[[str], np.ndarray]
    log_interval: int

    def write(self, split_index: int, split: str, n: int, pool: Sequence[EventFile]) -> None:
        """Write ``<split>/<split>_<NNNNN>.flac`` (n clips drawn from ``pool``), the CSV and the annotations."""
        audio_dir = os.path.join(self.output_dir, split)
        os.makedirs(audio_dir, exist_ok=True)
        rows, annotations = [], []
        t0 = time.time()
        for i in range(1, n + 1):
            rng = np.random.default_rng([self.seed, split_index, i])
            row, annotation = self._write_clip(rng, pool, audio_dir, f"{split}_{i:05d}.flac")
            rows.append(row)
            annotations.append(annotation)
            if i % self.log_interval == 0 or i == n:
                rate = i / max(time.time() - t0, 1e-9)
                logging.info("%s: %d/%d clips (%.1f clips/s, ETA %.0f s)", split, i, n, rate, (n - i) / rate)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["file_name"] + [f"caption_{k}" for k in range(1, NUM_CAPTIONS + 1)])
        writer.writerows(rows)
        write_lines_atomic(os.path.join(self.output_dir, f"clotho_captions_{split}.csv"), buf.getvalue().splitlines())
        write_lines_atomic(os.path.join(self.output_dir, f"annotations_{split}.jsonl"), annotations)

    def _write_clip(self, rng: np.random.Generator, pool: Sequence[EventFile], audio_dir: str,
                    name: str) -> Tuple[List[str], str]:
        """Draw, caption and render one clip into ``<audio_dir>/<name>`` (16-bit FLAC).

        Returns:
            ``([name, caption_1, ..., caption_5], annotation JSON line)``.
        """
        spec = sample_soundscape(rng, pool, self.durations, self.config)
        captions = write_captions([e.mention() for e in spec.events], rng, NUM_CAPTIONS)
        sf.write(os.path.join(audio_dir, name), render(spec, self.load), self.config.sample_rate, subtype="PCM_16")
        d = spec.to_dict()
        for e in d["events"]:
            e["file"] = os.path.relpath(e["file"], self.event_root)
        return [name, *captions], json.dumps({"file_name": name, **d}, sort_keys=True)


def copy_notices(event_root: str, output_dir: str) -> None:
    """Keep the library's licence notices beside the derived audio."""
    lic = os.path.join(event_root, "LICENSES")
    if os.path.isdir(lic):
        shutil.copytree(lic, os.path.join(output_dir, "LICENSES"), dirs_exist_ok=True)
    for name in ("README.md", "LICENSE", "LICENSE.txt"):
        src = os.path.join(event_root, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(output_dir, f"EVENT_LIBRARY_{name}"))


#: the event labels of each clip, as Clotho's metadata gives keywords (caption_pretrain_tagging's labels)
LABELS_CSV = "soundscapes_metadata_{split}.csv"


def write_label_csvs(output_dir: str) -> None:
    """Write ``soundscapes_metadata_<split>.csv`` (columns ``file_name``, ``keywords``: the
    clip's event labels, ``;``-separated, as in Clotho's ``clotho_metadata_<split>.csv``) from
    each ``annotations_<split>.jsonl`` of the corpus: the labels of audio tagging pretraining
    (``caption_pretrain_tagging --train_labels``). Derived, so rewritten every time.

    Raises:
        ValueError: as :func:`read_annotations`.
    """
    for split in SPLITS:
        path = os.path.join(output_dir, f"annotations_{split}.jsonl")
        if not os.path.isfile(path):
            continue
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["file_name", "keywords"])
        for name, spec in read_annotations(path).items():
            writer.writerow([name, ";".join(sorted({e["label"] for e in spec["events"]}))])
        write_lines_atomic(os.path.join(output_dir, LABELS_CSV.format(split=split)), buf.getvalue().splitlines())


def read_annotations(path: PathLike) -> Dict[str, dict]:
    """``annotations_<split>.jsonl`` as ``{file_name: spec dict}``.

    Raises:
        ValueError: a line that is not JSON (naming file and line).
    """
    out: Dict[str, dict] = {}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not JSON: {e}") from None
            out[d.pop("file_name")] = d
    return out


def parse_num_clips(spec: str) -> Dict[str, int]:
    """``"development:1500,validation:200,evaluation:300"`` -> dict.

    Raises:
        ValueError: malformed item or unknown split.
    """
    out: Dict[str, int] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, value = item.partition(":")
        if not sep or name not in SPLITS or not value.strip().isdigit():
            raise ValueError(f"bad --num_clips item {item!r}; expected <split>:<count> with split in {SPLITS}")
        out[name] = int(value)
    return out
