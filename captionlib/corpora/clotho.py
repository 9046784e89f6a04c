"""Prepare Kaldi-style data directories from the official Clotho v2.1 layout.

Input (as released on Zenodo, record 4783391, after extracting the 7z archives)::

    <clotho_root>/clotho_captions_<split>.csv   file_name,caption_1,...,caption_5
    <clotho_root>/<split>/<file_name>            the audio

Output ``<output_dir>/{wav.scp,text,utt2spk,spk2utt,aud2name,reco2dur}``, sorted
``LC_ALL=C`` (format: ``docs/CONVENTIONS.md`` section 3.4). The clip id is
``clotho-<split>-<NNNNN>`` with ``NNNNN`` the 1-based data-row index in the CSV
(header excluded), so ids stay stable when a bad clip is skipped and the same
file name in two splits (Clotho has four such names) gives two ids. Caption ids
are ``<clip-id>-<k>``, ``k = 1..5`` (caption column). Captions are kept raw except
that whitespace runs (including any newline inside a quoted CSV cell) are
collapsed to one space and the ends stripped, which the line-based ``text``
format requires.

Audio is checked through its header only (``soundfile.info``): it must exist,
be decodable by libsndfile and last at least
:data:`captionlib.corpora.prep.MIN_AUDIO_SECONDS` (one analysis window); ``reco2dur`` is
``frames / sample_rate`` with 3 decimals.
"""

import logging
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from captionlib.audio.io import audio_info
from captionlib.corpora.prep import BadRecords, ClipCaptions, audio_length_problem, caption_problem, collapse_ws
from captionlib.io.datadir import PathLike, control_problem, read_csv_rows, utt2spk_to_spk2utt, write_scp

SPLITS = ("development", "validation", "evaluation")
NUM_CAPTIONS = 5
HEADER = ["file_name"] + [f"caption_{k}" for k in range(1, NUM_CAPTIONS + 1)]


class ClothoPrepError(ValueError):
    """Bad Clotho input; the message names the CSV file and line, or the audio file."""


def clip_id(split: str, row_index: int, prefix: str = "clotho") -> str:
    """``<prefix>-<split>-<NNNNN>`` for the 1-based data-row index of the split's CSV."""
    return f"{prefix}-{split}-{row_index:05d}"


def prepare_clotho(
    clotho_root: PathLike,
    split: str,
    output_dir: PathLike,
    skip_bad: bool = False,
    id_prefix: str = "clotho",
) -> Dict[str, int]:
    """Write ``wav.scp text utt2spk spk2utt aud2name reco2dur`` for one Clotho split.

    Args:
        clotho_root: directory holding ``clotho_captions_<split>.csv`` and ``<split>/``.
        split: ``development``, ``validation`` or ``evaluation``.
        output_dir: data directory to create (e.g. ``data/development``).
        skip_bad: log a warning for each bad row/clip and skip it, instead of failing.
        id_prefix: first part of the clip ids (``<id_prefix>-<split>-<NNNNN>``), e.g.
            ``soundscapes`` for a corpus written in the Clotho layout.

    Returns:
        ``{"clips": n, "captions": m, "skipped": k}``.

    Raises:
        ClothoPrepError (a ``ValueError``): unknown split; missing CSV or wrong header
            (always fatal); and, unless ``skip_bad``, a row with the wrong column
            count, an empty caption cell or one without words after cleaning, a file name repeated within the split, a
            missing, unreadable, empty (0-sample) or too short (under ``MIN_AUDIO_SECONDS``)
            audio file. Messages name the CSV
            file and line (``<csv>:<line>: ...``), plus the audio path where relevant.
            Also raised if no clip is left.
    """
    if not id_prefix or any(ch.isspace() for ch in id_prefix):
        raise ClothoPrepError(f"id_prefix must be a non-empty word without whitespace, got {id_prefix!r}")
    if split not in SPLITS:
        raise ClothoPrepError(f"unknown Clotho split {split!r}; expected one of {', '.join(SPLITS)}")
    root = os.path.abspath(os.fspath(clotho_root))
    csv_path = os.path.join(root, f"clotho_captions_{split}.csv")
    audio_dir = os.path.join(root, split)
    rows = read_csv_rows(csv_path, HEADER, ClothoPrepError, "caption CSV")
    if not os.path.isdir(audio_dir):
        raise ClothoPrepError(f"{audio_dir}: audio directory of split {split!r} not found (named by {csv_path})")
    bad = BadRecords(skip_bad, ClothoPrepError)
    clips, reco2dur = _read_clips(rows, csv_path, audio_dir, lambda index: clip_id(split, index, id_prefix), bad)
    if not clips:
        raise ClothoPrepError(f"{csv_path}: no usable clip ({len(rows)} rows, {bad.skipped} skipped)")
    out = os.fspath(output_dir)
    num_captions = _write_clotho_dir(out, clips, reco2dur)
    logging.info(
        "Clotho %s: wrote %d clips and %d captions to %s (%d bad rows skipped)",
        split,
        len(clips),
        num_captions,
        out,
        bad.skipped,
    )
    return {"clips": len(clips), "captions": num_captions, "skipped": bad.skipped}


def _read_clips(
    rows: Sequence[Tuple[int, List[str]]], csv_path: str, audio_dir: str, make_id: Callable[[int], str],
    bad: BadRecords,
) -> Tuple[List[ClipCaptions], Dict[str, str]]:
    """The usable clips of the CSV rows, in row order, and their durations.

    Args:
        rows: ``(line number, cells)`` of the CSV's data rows.
        csv_path: the CSV, named in the messages (``<csv>:<line>: ...``).
        audio_dir: the split's audio folder.
        make_id: the clip id of the 1-based data-row index.
        bad: receives each bad row (raises, or logs and counts it).

    Returns:
        ``(clips, {clip_id: duration in seconds, 3 decimals})``; ``ClipCaptions.corpus_id`` is
        the audio file name, ``media`` its absolute path.
    """
    clips: List[ClipCaptions] = []
    reco2dur: Dict[str, str] = {}
    name_line: Dict[str, int] = {}
    for index, (line, cells) in enumerate(rows, start=1):
        where = f"{csv_path}:{line}"
        problem = _row_problem(cells, name_line)
        if problem:
            bad(f"{where}: {problem}")
            continue
        name = cells[0]
        name_line[name] = line
        audio_path = os.path.join(audio_dir, name)
        duration, problem = _audio_duration(audio_path)
        if problem:
            bad(f"{where}: {problem}")
            continue
        clip = ClipCaptions(make_id(index), name, [collapse_ws(c) for c in cells[1:]], audio_path)
        clips.append(clip)
        reco2dur[clip.clip_id] = f"{duration:.3f}"
    return clips, reco2dur


def _row_problem(cells: Sequence[str], name_line: Dict[str, int]) -> Optional[str]:
    """Why a CSV row cannot be a clip (columns, file name, captions, a repeated name), or ``None``.

    Args:
        cells: the row's cells (``file_name,caption_1..caption_5``).
        name_line: ``{file name: line}`` of the good rows so far.
    """
    if len(cells) != len(HEADER):
        return f"expected {len(HEADER)} columns, got {len(cells)}"
    name = cells[0]
    if name.strip() == "" or "/" in name or "\\" in name or name in (".", "..") or control_problem(name):
        return f"invalid file name {name!r}"
    problems = [f"{HEADER[k + 1]}: {problem}" for k, cell in enumerate(cells[1:])
                if (problem := caption_problem(collapse_ws(cell)))]
    if problems:
        return f"bad caption cell(s) for {name!r}: {'; '.join(problems)}"
    if name in name_line:
        return f"duplicate file name {name!r} (first on line {name_line[name]})"
    return None


def _audio_duration(path: str) -> Tuple[float, Optional[str]]:
    """``(seconds, None)`` for a readable audio file of at least ``MIN_AUDIO_SECONDS``, else
    ``(0.0, why not)`` (see :func:`captionlib.corpora.prep.audio_length_problem`).

    Only the header is read (:func:`captionlib.audio.io.audio_info`).
    """
    if not os.path.isfile(path):
        return 0.0, f"audio file not found: {path!r}"
    try:
        info = audio_info(path)
    except (ValueError, OSError) as e:
        return 0.0, f"unreadable audio {path}: {e}"
    problem = audio_length_problem(info, path)
    return (0.0, problem) if problem else (info.duration, None)


def _write_clotho_dir(out: str, clips: Sequence[ClipCaptions], reco2dur: Dict[str, str]) -> int:
    """Write ``wav.scp text utt2spk spk2utt aud2name reco2dur`` to ``out`` (created).

    Caption ids are ``<clip-id>-<k>``, ``k`` the 1-based caption column. Returns the number
    of captions written.
    """
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    for clip in clips:
        for k, caption in enumerate(clip.captions, start=1):
            utt = f"{clip.clip_id}-{k}"
            text[utt] = caption
            utt2spk[utt] = clip.clip_id
    os.makedirs(out, exist_ok=True)
    write_scp(os.path.join(out, "wav.scp"), {c.clip_id: c.media for c in clips})
    write_scp(os.path.join(out, "text"), text)
    write_scp(os.path.join(out, "utt2spk"), utt2spk)
    write_scp(os.path.join(out, "spk2utt"), utt2spk_to_spk2utt(utt2spk))
    write_scp(os.path.join(out, "aud2name"), {c.clip_id: c.corpus_id for c in clips})
    write_scp(os.path.join(out, "reco2dur"), reco2dur)
    return len(text)
