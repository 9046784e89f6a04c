"""Prepare Kaldi-style data directories from AudioCaps (Kim et al. 2019).

AudioCaps (C. D. Kim, B. Kim, H. Lee, G. Kim, "AudioCaps: Generating Captions for Audios in
The Wild", NAACL-HLT 2019) describes 10-s segments of AudioSet YouTube videos. The official
release (https://github.com/cdjkim/audiocaps, ``dataset/``) holds only the captions::

    <csv_dir>/{train,val,test}.csv   audiocap_id,youtube_id,start_time,caption

one row per caption: train has 1 caption per clip, val and test 5 (the rows of a clip are
grouped by ``(youtube_id, start_time)``, wherever they stand in the file). The audio has to
be fetched from YouTube by the user (``egs/audiocaps/local/download.sh``), so some clips are
always missing: videos are deleted or made private. The audio folder may hold, for each
clip, either of two namings (both are tried, in this order):

* ``<youtube_id>_<start_time>.<ext>`` (what ``local/download.sh`` writes), ``<start_time>``
  as in the CSV (an integral value without decimals: ``30``, not ``30.0``);
* ``Y<youtube_id>.<ext>`` (the AudioSet habit; only for a YouTube id that has a single clip
  in the split, since the name does not say which segment it is),

with ``<ext>`` one of :data:`AUDIO_EXTENSIONS`, directly in the audio folder or in its ``<split>/``
subfolder.

Output ``<output_dir>/{wav.scp,text,utt2spk,spk2utt,clip2id,aud2name,reco2dur,missing}``,
sorted ``LC_ALL=C`` (``egs/TEMPLATE/README.md``): clip ids ``audiocaps-<youtube_id>-<start>``
(YouTube ids are 11 characters of ``[A-Za-z0-9_-]``, so the ids are unambiguous), caption ids
``<clip-id>-<kk>`` (``kk`` = 01, 02, ... in CSV row order), ``clip2id`` maps the clip id to
``<youtube_id>_<start_time>``, ``aud2name`` to the audio file name found. ``missing`` lists
the clips without audio, one line each: ``<clip-id> <youtube_id> <start_time> <file names
looked for ...>`` (empty when none is missing).
"""

import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from captionlib.audio.io import AUDIO_EXTENSIONS, audio_info
from captionlib.corpora.prep import (
    BadRecords,
    ClipCaptions,
    audio_length_problem,
    caption_problem,
    collapse_ws,
    find_media,
    media_problem,
    write_caption_dir,
    write_missing,
)
from captionlib.io.datadir import PathLike, read_csv_rows, write_scp

SPLITS = ("train", "val", "test")
HEADER = ["audiocap_id", "youtube_id", "start_time", "caption"]
YOUTUBE_ID = re.compile(r"[A-Za-z0-9_-]{11}")
DEFAULT_MAX_MISSING_FRACTION = 0.1


class AudioCapsPrepError(ValueError):
    """Bad AudioCaps input; the message names ``<csv>:<line>``, or the audio file."""


def clip_id(youtube_id: str, start_time: str, prefix: str = "audiocaps") -> str:
    """``<prefix>-<youtube_id>-<start_time>`` (``start_time`` as from :func:`parse_start_time`)."""
    return f"{prefix}-{youtube_id}-{start_time}"


def parse_start_time(cell: str) -> Optional[str]:
    """The canonical text of a ``start_time`` cell (seconds), or ``None`` if it is not a time.

    An integral value loses its decimals (``"30.0"`` -> ``"30"``); any other number is written
    as Python's shortest repr (``"12.50"`` and ``".5"`` -> ``"12.5"`` and ``"0.5"``: one clip, not
    two). Negative, infinite and NaN values, exponents and underscores (``float("6_0")`` is 60)
    are not times.

    Example:
        >>> parse_start_time(" 30 "), parse_start_time("30.0"), parse_start_time(".50"), parse_start_time("x")
        ('30', '30', '0.5', None)
    """
    text = cell.strip()
    if "_" in text or "e" in text.lower():
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def audio_names(youtube_id: str, start_time: str, with_y: bool = True) -> List[str]:
    """The file names tried for a clip, in order: ``<id>_<start>.<ext>``, then ``Y<id>.<ext>``.

    Args:
        youtube_id: the 11-character YouTube id.
        start_time: as from :func:`parse_start_time`.
        with_y: include the ``Y<id>`` names (only unambiguous when the id has one clip).
    """
    names = [f"{youtube_id}_{start_time}.{ext}" for ext in AUDIO_EXTENSIONS]
    if with_y:
        names += [f"Y{youtube_id}.{ext}" for ext in AUDIO_EXTENSIONS]
    return names


def _parse_rows(csv_path: str, bad: BadRecords) -> Tuple[Dict[Tuple[str, str], ClipCaptions], int]:
    """Group the good rows of one CSV by clip; returns ``({(youtube_id, start): clip}, rows)``."""
    rows = read_csv_rows(csv_path, HEADER, AudioCapsPrepError, "AudioCaps CSV")
    clips: Dict[Tuple[str, str], ClipCaptions] = {}
    seen_ids: Dict[str, int] = {}
    for line, cells in rows:
        where = f"{csv_path}:{line}"
        if len(cells) != len(HEADER):
            bad(f"{where}: expected {len(HEADER)} columns ({','.join(HEADER)}), got {len(cells)}")
            continue
        audiocap_id, youtube_id, start_cell, caption = cells[0].strip(), cells[1].strip(), cells[2], cells[3]
        if not audiocap_id.isdigit():
            bad(f"{where}: audiocap_id must be a number, got {cells[0]!r}")
            continue
        if audiocap_id in seen_ids:
            bad(f"{where}: duplicate audiocap_id {audiocap_id} (first on line {seen_ids[audiocap_id]})")
            continue
        if not YOUTUBE_ID.fullmatch(youtube_id):
            bad(f"{where}: youtube_id must be 11 characters of A-Z a-z 0-9 _ -, got {cells[1]!r}")
            continue
        start = parse_start_time(start_cell)
        if start is None:
            bad(f"{where}: start_time must be a number of seconds >= 0, got {start_cell!r}")
            continue
        caption = collapse_ws(caption)
        problem = caption_problem(caption)
        if problem:
            bad(f"{where}: {problem} (audiocap_id {audiocap_id})")
            continue
        seen_ids[audiocap_id] = line
        key = (youtube_id, start)
        if key not in clips:
            clips[key] = ClipCaptions(clip_id=clip_id(youtube_id, start), corpus_id=f"{youtube_id}_{start}")
        clips[key].captions.append(caption)
    return clips, len(rows)


def prepare_audiocaps(
    csv_dir: PathLike,
    audio_dir: PathLike,
    split: str,
    output_dir: PathLike,
    max_missing_fraction: float = DEFAULT_MAX_MISSING_FRACTION,
    skip_bad: bool = False,
) -> Dict[str, int]:
    """Write the data directory of one AudioCaps split (Kim et al. 2019).

    Args:
        csv_dir: directory holding ``<split>.csv`` (``audiocap_id,youtube_id,start_time,caption``).
        audio_dir: the downloaded audio: ``<youtube_id>_<start_time>.<ext>`` or
            ``Y<youtube_id>.<ext>`` (ext in :data:`AUDIO_EXTENSIONS`), in ``audio_dir`` or
            ``audio_dir/<split>/``.
        split: ``train``, ``val`` or ``test``.
        output_dir: the data directory to write (e.g. ``data/train``).
        max_missing_fraction: the largest tolerated fraction (0..1) of clips without audio.
        skip_bad: log and skip a bad row (and an unreadable, empty or too short audio file)
            instead of failing. Missing audio is never an error by itself (see ``max_missing_fraction``).

    Returns:
        ``{"clips": n, "captions": m, "missing": k, "listed": l, "skipped": s}``: clips and
        captions written, clips without audio, clips in the CSV (good rows), bad rows and
        files skipped.

    Raises:
        AudioCapsPrepError (a ``ValueError``): an unknown split, a bad
            ``max_missing_fraction``, a missing audio folder, a missing CSV or one with another
            header (always); unless ``skip_bad``, a malformed row (wrong column count,
            non-numeric audiocap_id or start_time, a youtube_id that is not 11 characters of
            ``[A-Za-z0-9_-]``, a repeated audiocap_id, an empty caption or one without words
            after cleaning), naming ``<csv>:<line>``, or an unreadable, empty or too short
            (under :data:`captionlib.corpora.prep.MIN_AUDIO_SECONDS`) audio file, naming it;
            more than ``max_missing_fraction`` of the clips missing (after ``missing`` is
            written); no clip left.
    """
    if split not in SPLITS:
        raise AudioCapsPrepError(f"unknown AudioCaps split {split!r}; expected one of {', '.join(SPLITS)}")
    if not 0.0 <= max_missing_fraction <= 1.0:
        raise AudioCapsPrepError(f"max_missing_fraction must be in [0, 1], got {max_missing_fraction}")
    csv_path = os.path.join(os.path.abspath(os.fspath(csv_dir)), f"{split}.csv")
    audio_root = os.path.abspath(os.fspath(audio_dir))
    if not os.path.isdir(audio_root):
        raise AudioCapsPrepError(f"{audio_root}: audio folder not found (local/download.sh says how to fetch it)")
    bad = BadRecords(skip_bad, AudioCapsPrepError)
    clips, num_rows = _parse_rows(csv_path, bad)
    found = _find_audio(clips, audio_root, split, bad)
    out = os.fspath(output_dir)
    write_missing(out, found.missing, len(clips), f"AudioCaps {split}", "clips",
                  [f"{v[0]}_{v[1]}" for v in found.missing.values()], max_missing_fraction,
                  f"no audio file in {audio_root} for them (fetch them with local/download.sh, or raise "
                  "--max_missing_fraction if they are gone from YouTube)", AudioCapsPrepError)
    what = f"{csv_path} ({num_rows} rows, {bad.skipped} skipped, {len(found.missing)} clips missing)"
    counts = write_caption_dir(out, found.kept, "wav.scp", AudioCapsPrepError, what)
    write_scp(os.path.join(out, "aud2name"), found.aud2name)
    write_scp(os.path.join(out, "reco2dur"), found.reco2dur)
    logging.info("AudioCaps %s: wrote %d clips and %d captions to %s (%d bad rows or files skipped)",
                 split, counts["clips"], counts["captions"], out, bad.skipped)
    return dict(counts, missing=len(found.missing), listed=len(clips), skipped=bad.skipped)


@dataclass
class _FoundAudio:
    """What :func:`_find_audio` found: the clips with usable audio and the clips without audio.

    Attributes:
        kept: the clips with a readable audio file of at least one analysis window (``media``
            set), in CSV order.
        aud2name: ``{clip_id: audio file name}`` of ``kept``.
        reco2dur: ``{clip_id: duration in seconds, 3 decimals}`` of ``kept``.
        missing: ``{clip_id: [youtube_id, start_time, file names looked for ...]}``.
    """

    kept: List[ClipCaptions] = field(default_factory=list)
    aud2name: Dict[str, str] = field(default_factory=dict)
    reco2dur: Dict[str, str] = field(default_factory=dict)
    missing: Dict[str, List[str]] = field(default_factory=dict)


def _find_audio(clips: Dict[Tuple[str, str], ClipCaptions], audio_root: str, split: str,
                bad: BadRecords) -> _FoundAudio:
    """Look up each clip's audio (see :func:`audio_names`) in ``audio_root`` or ``audio_root/<split>``.

    A clip without a file is listed as missing; an empty, unreadable or 0-sample file goes to
    ``bad``, and, skipped, is listed as missing too (so ``max_missing_fraction`` counts it).
    """
    clips_per_id: Dict[str, int] = {}
    for youtube_id, _ in clips:
        clips_per_id[youtube_id] = clips_per_id.get(youtube_id, 0) + 1
    found = _FoundAudio()
    for (youtube_id, start), clip in clips.items():
        names = audio_names(youtube_id, start, with_y=clips_per_id[youtube_id] == 1)
        path = next((p for p in (find_media(audio_root, (split, ""), n) for n in names) if p), None)
        if path is None:
            found.missing[clip.clip_id] = [youtube_id, start] + names
            continue
        info = None
        problem = media_problem(path, path)
        if not problem:
            try:
                info = audio_info(path)  # the header (libsndfile), else PyAV decodes it (m4a)
            except (ValueError, OSError) as e:
                problem = f"unreadable audio: {e}"
        problem = problem or audio_length_problem(info, path)  # empty, or shorter than one analysis window
        if problem:
            bad(f"{problem} (clip {clip.clip_id})")
            # skipped (skip_bad): a broken download is a missing clip, listed and counted in the fraction
            found.missing[clip.clip_id] = [youtube_id, start] + names
            continue
        clip.media = path
        found.kept.append(clip)
        found.aud2name[clip.clip_id] = os.path.basename(path)
        found.reco2dur[clip.clip_id] = f"{info.duration:.3f}"
    return found
