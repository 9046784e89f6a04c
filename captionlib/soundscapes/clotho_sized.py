"""A corpus of Clotho v2.1's size for pipeline benchmarks: real captions, mixed audio.

The corpus has Clotho v2.1's split sizes (:data:`CLOTHO_V21_CLIPS`, times ``scale``), its
clip lengths (15-30 s, drawn uniformly to 0.1 s: the Clotho paper, Drossos et al., ICASSP
2020, and the Zenodo record give only the range) and its real captions: clip ``i`` of a
split gets row ``i`` of the official ``clotho_captions_<split>.csv`` (file name and five
captions). The audio is NOT Clotho's: each clip is a soundscape of :mod:`captionlib.soundscapes.mixer` (a coloured-noise
background plus 1-3 events of the event library) as long as the clip. **The captions do not
describe the audio: the corpus measures speed (run time, memory), not learning.**

Output under ``output_dir`` (the official Clotho v2.1 layout, read by ``egs/clotho``)::

    clotho_captions_<split>.csv      file_name,caption_1,...,caption_5 (the official rows, in order)
    <split>/<file_name>              44.1 kHz 16-bit mono WAV, as the official clips
    README.txt                       what the corpus is (and is not)
    LICENSE_clotho_captions.txt      the captions' licence (kept beside them, as it asks)
    LICENSES/, EVENT_LIBRARY_*       the event library's licence notices
    clotho_sized.json                options and sizes (the corpus is complete when it says so)

Clip ``i`` of split ``s`` depends only on (``seed``, ``s``, ``i``), the library and the
options (its generator is ``numpy.random.default_rng([seed, s, i])``, as in
:mod:`captionlib.soundscapes.corpus`), so clips can be made in any order by any number of
processes, a larger ``scale`` extends a smaller corpus, and a killed run resumes by skipping
the clips already written (each is written to a temporary name, then renamed).
"""

import csv
import dataclasses
import functools
import io
import json
import logging
import multiprocessing
import os
import shutil
import time
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import soundfile as sf

from captionlib.audio.io import load_audio
from captionlib.io.datadir import PathLike, write_lines_atomic
from captionlib.soundscapes.corpus import NUM_CAPTIONS, SPLITS, copy_notices
from captionlib.soundscapes.library import EventFile, load_event_library, split_recordings
from captionlib.soundscapes.mixer import SoundscapeConfig, check_sample_rate, render, sample_soundscape

#: Clips per split of Clotho v2.1 (Zenodo record 4783391).
CLOTHO_V21_CLIPS: Dict[str, int] = {"development": 3839, "validation": 1045, "evaluation": 1045}
CAPTIONS_LICENCE = "LICENSE_clotho_captions.txt"
INFO_FILE = "clotho_sized.json"
HEADER = ["file_name"] + [f"caption_{k}" for k in range(1, NUM_CAPTIONS + 1)]
NOT_FOR_LEARNING = ("the captions do NOT describe the audio: this corpus measures speed (run time, memory), "
                    "not learning; its scores mean nothing")
README_TEXT = """Clotho-sized benchmark corpus (captionlib.soundscapes.clotho_sized)

THE CAPTIONS DO NOT DESCRIBE THE AUDIO. This corpus measures speed (run time, memory) of a
captioning pipeline at Clotho v2.1's size; it is useless for learning, and any score of a
model trained or evaluated on it means nothing.

* Sizes: Clotho v2.1's (development 3839, validation 1045, evaluation 1045 clips) times the
  --scale in clotho_sized.json.
* Captions: the official Clotho v2.1 rows, in order (clotho_captions_<split>.csv; licence:
  LICENSE_clotho_captions.txt, Tampere University, which must stay beside them).
* Audio: NOT Clotho's. The file names are Clotho's (so that the layout is the official one),
  but every clip is a synthetic soundscape (coloured-noise background + 1-3 events of an event
  library, licence notices in LICENSES/ and EVENT_LIBRARY_*) of a length drawn uniformly
  (to 0.1 s) in the duration range of clotho_sized.json, written as 16-bit mono WAV.
"""


@dataclasses.dataclass(frozen=True)
class ClothoSizedOptions:
    """What the clips depend on (with the library and the caption CSVs).

    Attributes:
        seed: corpus seed.
        scale: fraction of each split's Clotho v2.1 clip count, in (0, 1]; every split has
            at least one clip.
        min_duration_s, max_duration_s: clip lengths are uniform in this range (seconds).
        sample_rate: Hz of the written WAVs (44100 as Clotho; the library is resampled).
        heldout_fraction: share of each multi-file class's recordings heard only in
            evaluation clips (:func:`captionlib.soundscapes.library.split_recordings`).
    """

    seed: int = 0
    scale: float = 1.0
    min_duration_s: float = 15.0
    max_duration_s: float = 30.0
    sample_rate: int = 44100
    heldout_fraction: float = 0.2

    def check(self) -> None:
        """Raises ValueError: a scale outside (0, 1], an empty or negative duration range, a
        sample rate that is not an integer above twice the mixer's highest low-pass cut-off
        (:func:`~captionlib.soundscapes.mixer.check_sample_rate`: 6000 Hz), naming the option."""
        if not 0.0 < self.scale <= 1.0:
            raise ValueError(f"scale must be in (0, 1], got {self.scale}")
        if not 0.0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError(f"need 0 < min_duration_s <= max_duration_s, got {self.min_duration_s}, "
                             f"{self.max_duration_s}")
        check_sample_rate(self.sample_rate)


def split_sizes(scale: float) -> Dict[str, int]:
    """Clips per split: ``max(1, round(scale * clotho_v21_count))``, e.g. 0.01 -> 38 / 10 / 10."""
    return {s: max(1, int(round(scale * n))) for s, n in CLOTHO_V21_CLIPS.items()}


def read_caption_rows(captions_dir: PathLike, split: str, n: int) -> List[List[str]]:
    """The first ``n`` data rows of ``<captions_dir>/clotho_captions_<split>.csv``.

    Returns:
        ``n`` rows ``[file_name, caption_1, ..., caption_5]``.

    Raises:
        FileNotFoundError: no such CSV.
        ValueError: a header other than ``file_name,caption_1..caption_5``, a row without 6
            cells, a file name that is empty, has a directory part or repeats (naming file
            and line), fewer than ``n`` rows.
    """
    path = os.path.join(os.fspath(captions_dir), f"clotho_captions_{split}.csv")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: Clotho caption CSV not found")
    rows: List[List[str]] = []
    names = set()
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != HEADER:
            raise ValueError(f"{path}:1: header must be {','.join(HEADER)}, got {header}")
        for row in reader:
            if len(rows) == n:
                break
            if len(row) != len(HEADER) or row[0] in ("", ".", "..") or os.path.basename(row[0]) != row[0]:
                raise ValueError(f"{path}:{reader.line_num}: expected a file name (no directory) and "
                                 f"{NUM_CAPTIONS} captions, got {row}")
            if row[0] in names:
                raise ValueError(f"{path}:{reader.line_num}: file name {row[0]!r} repeated")
            names.add(row[0])
            rows.append(row)
    if len(rows) < n:
        raise ValueError(f"{path}: {len(rows)} clips, {n} needed")
    return rows


@functools.lru_cache(maxsize=None)
def _load(path: str, sample_rate: int) -> np.ndarray:
    """``(samples,)`` float32 mono audio of a library file at ``sample_rate`` (cached per process)."""
    return load_audio(path, fs=sample_rate)[0]


@functools.lru_cache(maxsize=2)
def _library(event_root: str, sample_rate: int,
             heldout_fraction: float) -> Tuple[List[EventFile], List[EventFile], Dict[str, float]]:
    """(development pool, evaluation pool, ``{path: seconds}``) of the library (cached per process)."""
    library = load_event_library(event_root)
    dev_pool, eval_pool = split_recordings(library, heldout_fraction)
    durations = {e.path: len(_load(e.path, sample_rate)) / sample_rate for e in library}
    return dev_pool, eval_pool, durations


def render_clip(event_root: str, options: ClothoSizedOptions, split_index: int, index: int) -> np.ndarray:
    """The audio of clip ``index`` (1-based) of split ``SPLITS[split_index]``.

    Its generator ``default_rng([seed, split_index, index])`` draws the length (uniform in
    the options' range, rounded to 0.1 s: a sample count of 4410 k at 44.1 kHz keeps the
    mixer's background FFT about 7x cheaper than an arbitrary count), then the soundscape
    (:func:`captionlib.soundscapes.mixer.sample_soundscape` with the default
    :class:`SoundscapeConfig` at that length); evaluation clips draw from the evaluation
    pool, the others from the development pool.

    Returns:
        ``(round(length * sample_rate),)`` float32 in [-0.99, 0.99].

    Raises:
        ValueError, FileNotFoundError: from the library reader or the mixer.
    """
    dev_pool, eval_pool, durations = _library(event_root, options.sample_rate, options.heldout_fraction)
    rng = np.random.default_rng([options.seed, split_index, index])
    length = min(max(round(float(rng.uniform(options.min_duration_s, options.max_duration_s)), 1),
                     options.min_duration_s), options.max_duration_s)
    config = SoundscapeConfig(duration_s=length, sample_rate=options.sample_rate)
    pool = eval_pool if SPLITS[split_index] == "evaluation" else dev_pool
    spec = sample_soundscape(rng, pool, durations, config)
    return render(spec, functools.partial(_load, sample_rate=options.sample_rate))


def _write_clip(task: Tuple[str, ClothoSizedOptions, int, int, str]) -> Tuple[float, float]:
    """Render one clip and write it as 16-bit WAV (temporary name, then renamed).

    Returns:
        (CPU seconds of this process for the clip, clip length in seconds).
    """
    event_root, options, split_index, index, path = task
    t0 = time.process_time()
    audio = render_clip(event_root, options, split_index, index)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.partial")
    try:
        sf.write(tmp, audio, options.sample_rate, subtype="PCM_16", format="WAV")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return time.process_time() - t0, len(audio) / options.sample_rate


def make_clotho_sized_corpus(
    event_root: PathLike,
    captions_dir: PathLike,
    output_dir: PathLike,
    options: ClothoSizedOptions = ClothoSizedOptions(),
    nj: int = 1,
    log_interval: int = 200,
) -> Dict[str, float]:
    """Write (or complete) the corpus; see the module doc for the layout.

    Args:
        event_root: event library (``events.csv`` or ESC-50 layout).
        captions_dir: directory with the official ``clotho_captions_<split>.csv`` and
            ``LICENSE_clotho_captions.txt``.
        output_dir: corpus root to write.
        options: seed, scale, clip lengths, sample rate, held-out fraction.
        nj: worker processes rendering clips (``spawn`` start method; 1: this process).
        log_interval: clips between progress lines (rate and ETA).

    Returns:
        Summary: ``clips``, ``written``, ``skipped`` (already there), ``wall_s``,
        ``wall_s_per_clip`` (wall time over written clips, with ``nj`` workers),
        ``cpu_s_per_clip`` (CPU time of one clip), ``audio_hours`` (written), ``nj``.

    Raises:
        ValueError: bad options, ``nj`` or ``log_interval`` < 1; ``output_dir`` holds a Clotho
            layout not made here (e.g. the real Clotho) or one made with other options; too
            little free disk space; errors of the caption CSVs, the library or the mixer.
        FileNotFoundError: a caption CSV, the captions' licence or the library is missing.
    """
    options.check()
    if nj < 1 or log_interval < 1:
        raise ValueError(f"nj and log_interval must be >= 1, got {nj} and {log_interval}")
    event_root, output_dir = os.path.abspath(os.fspath(event_root)), os.fspath(output_dir)
    licence = os.path.join(os.fspath(captions_dir), CAPTIONS_LICENCE)
    if not os.path.isfile(licence):
        raise FileNotFoundError(f"{licence}: the captions' licence is missing (it must be kept beside them)")
    sizes = split_sizes(options.scale)
    rows = {s: read_caption_rows(captions_dir, s, n) for s, n in sizes.items()}
    _check_output_dir(output_dir, options, event_root)
    _library(event_root, options.sample_rate, options.heldout_fraction)  # library errors before any work
    tasks = _pending_clips(output_dir, event_root, options, rows)
    _check_disk(output_dir, len(tasks), options)
    info = {"options": dataclasses.asdict(options), "event_root": event_root, "clips": sizes,
            "note": NOT_FOR_LEARNING, "complete": False}
    write_lines_atomic(os.path.join(output_dir, INFO_FILE), json.dumps(info, indent=1).splitlines())
    logging.warning("%s: %s", output_dir, NOT_FOR_LEARNING)
    wall, cpu, audio = _run_tasks(tasks, nj, log_interval)
    for split in SPLITS:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([HEADER] + rows[split])
        write_lines_atomic(os.path.join(output_dir, f"clotho_captions_{split}.csv"), buf.getvalue().split("\n")[:-1])
    shutil.copyfile(licence, os.path.join(output_dir, CAPTIONS_LICENCE))
    copy_notices(event_root, output_dir)
    write_lines_atomic(os.path.join(output_dir, "README.txt"), README_TEXT.splitlines())
    total = sum(sizes.values())
    summary = {"clips": total, "written": len(tasks), "skipped": total - len(tasks), "wall_s": round(wall, 2),
               "wall_s_per_clip": round(wall / max(len(tasks), 1), 4),
               "cpu_s_per_clip": round(cpu / max(len(tasks), 1), 4),
               "audio_hours": round(audio / 3600.0, 3), "nj": nj}
    info["complete"] = True  # no timing here: same seed and options, same bytes
    write_lines_atomic(os.path.join(output_dir, INFO_FILE), json.dumps(info, indent=1).splitlines())
    logging.info("%s: %d clips (%s), %d written, %d already there, in %.1f s: %.3f s wall per clip with %d "
                 "worker(s), %.3f s CPU per clip; %s", output_dir, total,
                 " / ".join(f"{s} {n}" for s, n in sizes.items()), len(tasks), total - len(tasks), wall,
                 summary["wall_s_per_clip"], nj, summary["cpu_s_per_clip"], NOT_FOR_LEARNING)
    return summary


def _check_output_dir(output_dir: str, options: ClothoSizedOptions, event_root: str) -> None:
    """Refuse a Clotho layout not made here (it may be the real corpus) or made with other clip options.

    Raises:
        ValueError: naming the directory and the differing options.
    """
    info_path = os.path.join(output_dir, INFO_FILE)
    if not os.path.isfile(info_path):
        found = [n for n in (os.listdir(output_dir) if os.path.isdir(output_dir) else [])
                 if n.startswith("clotho_captions_") or (n in SPLITS and os.listdir(os.path.join(output_dir, n)))]
        if found:
            raise ValueError(f"{output_dir}: holds {', '.join(sorted(found))} but no {INFO_FILE}: not a corpus of "
                             "this generator (the real Clotho?); refusing to write into it")
        return
    with open(info_path, encoding="utf-8") as f:
        old = json.load(f)
    keys = [k for k in dataclasses.asdict(options) if k != "scale"]  # a larger scale extends a corpus
    new = {k: v for k, v in dataclasses.asdict(options).items() if k in keys}
    new["event_root"] = event_root
    before = {k: old.get("options", {}).get(k) for k in keys}
    before["event_root"] = old.get("event_root")
    if before != new:
        raise ValueError(f"{info_path}: the corpus was made with {before}, now {new}: give another output dir "
                         "or delete this one")


def _pending_clips(output_dir: str, event_root: str, options: ClothoSizedOptions,
                   rows: Mapping[str, Sequence[List[str]]]) -> List[Tuple[str, ClothoSizedOptions, int, int, str]]:
    """The tasks of :func:`_write_clip` for the clips not yet written (removing stale temporary files)."""
    tasks = []
    for split_index, split in enumerate(SPLITS):
        audio_dir = os.path.join(output_dir, split)
        os.makedirs(audio_dir, exist_ok=True)
        for name in os.listdir(audio_dir):
            if name.startswith(".") and name.endswith(".partial"):
                os.remove(os.path.join(audio_dir, name))  # left by a killed run
        for index, row in enumerate(rows[split], start=1):
            path = os.path.join(audio_dir, row[0])
            if not os.path.isfile(path):
                tasks.append((event_root, options, split_index, index, path))
    return tasks


def _check_disk(output_dir: str, num_clips: int, options: ClothoSizedOptions) -> None:
    """Raises ValueError: less free space under ``output_dir`` than ``num_clips`` clips of mean
    length take as 16-bit WAV."""
    need = num_clips * (options.min_duration_s + options.max_duration_s) / 2 * options.sample_rate * 2
    free = shutil.disk_usage(output_dir).free
    if need > free:
        raise ValueError(f"{output_dir}: {num_clips} clips need about {need / 2**30:.1f} GiB, "
                         f"{free / 2**30:.1f} GiB free")
    logging.info("%s: %d clips to write, about %.2f GiB (%.1f GiB free)", output_dir, num_clips, need / 2**30,
                 free / 2**30)


def _run_tasks(tasks: Sequence[Tuple], nj: int, log_interval: int) -> Tuple[float, float, float]:
    """Run :func:`_write_clip` over ``tasks`` with ``nj`` processes, logging progress.

    Returns:
        (wall seconds, CPU seconds summed over clips, audio seconds written).
    """
    t0, cpu, audio = time.time(), 0.0, 0.0
    pool = None
    if nj > 1 and len(tasks) > 1:
        pool = multiprocessing.get_context("spawn").Pool(min(nj, len(tasks)))
    try:
        results = pool.imap_unordered(_write_clip, tasks) if pool is not None else map(_write_clip, tasks)
        for done, (clip_cpu, clip_audio) in enumerate(results, start=1):
            cpu, audio = cpu + clip_cpu, audio + clip_audio
            if done % log_interval == 0 or done == len(tasks):
                rate = done / max(time.time() - t0, 1e-9)
                logging.info("%d/%d clips (%.2f clips/s, ETA %.0f s)", done, len(tasks), rate,
                             (len(tasks) - done) / rate)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    return time.time() - t0, cpu, audio
