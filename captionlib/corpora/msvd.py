"""Prepare Kaldi-style data directories for MSVD (the Microsoft Research Video Description Corpus).

Input: the corpus of Chen & Dolan, "Collecting highly parallel data for paraphrase
evaluation" (ACL 2011), ``MSR Video Description Corpus.csv``: one row per description,
in many languages, with the columns::

    VideoID,Start,End,WorkerID,Source,AnnotationTime,Language,Description
    mv89psg6zh4,33,46,1,clean,19,English,A bird is bathing in a sink.

and ``youtube_mapping.txt`` of Venugopalan et al.'s S2VT release (ICCV 2015), one line
``<VideoID>_<Start>_<End> vid<N>`` per clip of the 1,970 that were downloadable. The
standard split (Venugopalan et al., NAACL 2015; Yao et al. 2015) orders clips by ``N``:
vid1-1200 train, vid1201-1300 val, vid1301-1970 test (``split_sizes=(1200, 100, 670)``).
Videos, optionally, as ``<video_root>/<VideoID>_<Start>_<End>.avi`` (or under
``<video_root>/YouTubeClips/``, the layout of the released archive).

Only rows with ``Language == "English"`` are used; rows of clips not in the mapping (the
CSV describes more clips than the 1,970) are ignored. The CSV is read with Python's
``csv`` module (quoted commas and newlines inside a description are fine). Output
``<output_dir>/{text,utt2spk,spk2utt,clip2id}`` (+ ``video.scp`` with absolute paths when
``video_root`` is given), see :mod:`captionlib.corpora.prep`. Clip ids are
``msvd-vid<NNNN>``; ``clip2id`` gives ``<VideoID>_<Start>_<End>``; caption ids
``<clip-id>-<kk>`` in CSV order.
"""

import logging
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from captionlib.corpora.prep import (
    BadRecords,
    ClipCaptions,
    caption_problem,
    collapse_ws,
    locate_media,
    media_root,
    write_caption_dir,
)
from captionlib.io.datadir import PathLike, read_csv_rows, read_utf8_lines

SPLITS = ("train", "val", "test")
STANDARD_SPLIT_SIZES = (1200, 100, 670)
HEADER = ["VideoID", "Start", "End", "WorkerID", "Source", "AnnotationTime", "Language", "Description"]
VIDEO_SUBDIRS = ("YouTubeClips", "")
VIDEO_EXT = ".avi"
_MAPPING_RE = re.compile(r"(\S+)\s+vid([0-9]+)")


class MsvdPrepError(ValueError):
    """Bad MSVD input; the message names the file and line (``<file>:<line>: ...``), or the video."""


def clip_id(vid_number: int) -> str:
    """``msvd-vid<N zero-padded to 4 digits>`` for the mapping's ``vid<N>``."""
    return f"msvd-vid{vid_number:04d}"


def split_range(split: str, split_sizes: Sequence[int]) -> Tuple[int, int]:
    """The 1-based inclusive ``vid`` number range of ``split`` for the given (train, val, test) sizes.

    Example:
        >>> split_range("val", (1200, 100, 670))
        (1201, 1300)
    """
    if len(split_sizes) != 3 or any(int(s) < 0 for s in split_sizes):
        raise MsvdPrepError(f"split_sizes must be three non-negative integers (train,val,test), got {split_sizes}")
    k = SPLITS.index(split)
    first = sum(int(s) for s in split_sizes[:k]) + 1
    return first, first + int(split_sizes[k]) - 1


def read_mapping(path: PathLike) -> Dict[str, Tuple[int, int]]:
    """Read ``youtube_mapping.txt`` into ``{clip name: (vid number, line)}``.

    Raises:
        MsvdPrepError: missing file, a line not of the form ``<name> vid<N>``, or a repeated
            name or number (always fatal: the split depends on every number).
    """
    path = os.fspath(path)
    out: Dict[str, Tuple[int, int]] = {}
    number_line: Dict[int, int] = {}
    for line_no, line in enumerate(read_utf8_lines(path, MsvdPrepError, "mapping file"), start=1):
        if not line.strip():
            continue
        m = _MAPPING_RE.fullmatch(line.strip())
        if m is None:
            raise MsvdPrepError(f"{path}:{line_no}: expected '<VideoID>_<Start>_<End> vid<N>', got {line!r}")
        name, number = m.group(1), int(m.group(2))
        if name in out:
            raise MsvdPrepError(f"{path}:{line_no}: clip {name} repeated (first on line {out[name][1]})")
        if number in number_line:
            raise MsvdPrepError(f"{path}:{line_no}: vid{number} repeated (first on line {number_line[number]})")
        out[name] = (number, line_no)
        number_line[number] = line_no
    if not out:
        raise MsvdPrepError(f"{path}: empty mapping file")
    return out


def _int_cell(value: str) -> Optional[int]:
    """The integer of a ``Start``/``End`` cell (digits only, surrounding blanks allowed), or ``None``."""
    value = value.strip()
    return int(value) if re.fullmatch(r"[0-9]+", value) else None


def prepare_msvd(
    corpus_csv: PathLike,
    mapping: PathLike,
    split: str,
    output_dir: PathLike,
    video_root: Optional[PathLike] = None,
    split_sizes: Sequence[int] = STANDARD_SPLIT_SIZES,
    skip_bad: bool = False,
) -> Dict[str, int]:
    """Write ``text utt2spk spk2utt clip2id [video.scp]`` for one split of MSVD.

    Args:
        corpus_csv: ``MSR Video Description Corpus.csv``.
        mapping: ``youtube_mapping.txt`` (``<VideoID>_<Start>_<End> vid<N>`` lines).
        split: ``train``, ``val`` or ``test``.
        output_dir: data directory to create (e.g. ``data/train``).
        video_root: directory holding ``<clip name>.avi`` (directly or in ``YouTubeClips/``);
            without it no ``video.scp`` is written (features are imported).
        split_sizes: clips per split (train, val, test), taken in ``vid`` number order.
        skip_bad: log a warning for each bad row/clip and skip it, instead of failing.

    English rows whose description is empty or has no words after cleaning (the released
    corpus has some) are always skipped with a warning naming ``<csv>:<line>``, and counted in
    the summary line; they are not references.

    Returns:
        ``{"clips": n, "captions": m, "skipped": k}`` (``skipped`` counts bad rows and clips,
        not the rows without a description).

    Raises:
        MsvdPrepError (a ``ValueError``): unknown split, bad ``split_sizes``, missing
            files, a wrong CSV header, a malformed mapping (always fatal); and, unless
            ``skip_bad``, a CSV row with the wrong column count or a non-integer Start/End
            (messages ``<csv>:<line>: ...``), a clip of the split without English descriptions
            (``<mapping>:<line>: ...``), a missing or empty video. Also raised if no
            clip is left.
    """
    if split not in SPLITS:
        raise MsvdPrepError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    first, last = split_range(split, split_sizes)
    csv_path, map_path = os.fspath(corpus_csv), os.fspath(mapping)
    names = read_mapping(map_path)
    rows = read_csv_rows(csv_path, HEADER, MsvdPrepError, "corpus CSV")
    root = media_root(video_root, "video", MsvdPrepError)
    bad = BadRecords(skip_bad, MsvdPrepError)
    in_split = {name: num for name, (num, _) in names.items() if first <= num <= last}
    if len(in_split) != last - first + 1:
        logging.warning("%s: %d clips with vid%d-vid%d (split %s), expected %d", map_path, len(in_split), first,
                        last, split, last - first + 1)
    captions, ignored = _read_captions(rows, csv_path, names, in_split, bad)
    clips: List[ClipCaptions] = []
    for name, num in sorted(in_split.items(), key=lambda kv: kv[1]):
        if not captions[name]:
            bad(f"{map_path}:{names[name][1]}: clip {name} (vid{num}) has no English description in {csv_path}")
            continue
        media = None
        if root is not None:
            media, problem = locate_media(root, VIDEO_SUBDIRS, name + VIDEO_EXT)
            if problem:
                bad(f"{map_path}:{names[name][1]}: {problem}")
                continue
        clips.append(ClipCaptions(clip_id(num), name, captions[name], media))
    stats = write_caption_dir(output_dir, clips, "video.scp", MsvdPrepError,
                              f"{map_path}: split {split!r} (vid{first}-vid{last})")
    stats["skipped"] = bad.skipped
    logging.info("MSVD %s: wrote %d clips and %d captions to %s (%d non-English rows, %d English rows without a "
                 "description and %d rows of unmapped clips ignored, %d bad rows/clips skipped)", split,
                 stats["clips"], stats["captions"], os.fspath(output_dir), ignored["other_language"],
                 ignored["no_text"], ignored["not_mapped"], bad.skipped)
    return stats


def _read_captions(
    rows: Sequence[Tuple[int, List[str]]], csv_path: str, names: Dict[str, Tuple[int, int]],
    in_split: Dict[str, int], bad: BadRecords,
) -> Tuple[Dict[str, List[str]], Dict[str, int]]:
    """Group the English descriptions of the corpus CSV by clip of the split.

    Args:
        rows: ``(line number, cells)`` of the CSV's data rows.
        csv_path: the CSV, named in the messages (``<csv>:<line>: ...``).
        names: the mapping (:func:`read_mapping`).
        in_split: ``{clip name: vid number}`` of the split.
        bad: receives a row with the wrong column count or a bad VideoID/Start/End.

    Returns:
        ``({clip name: [caption, ...]} for every clip of in_split, counts)``, ``counts`` the rows
        ignored: ``other_language``, ``no_text`` (English without words, logged) and
        ``not_mapped`` (clips outside the mapping).
    """
    captions: Dict[str, List[str]] = {name: [] for name in in_split}
    ignored = {"other_language": 0, "no_text": 0, "not_mapped": 0}
    lang_i = HEADER.index("Language")
    for line, cells in rows:
        where = f"{csv_path}:{line}"
        if len(cells) != len(HEADER):
            bad(f"{where}: expected {len(HEADER)} columns, got {len(cells)}")
            continue
        if cells[lang_i].strip() != "English":
            ignored["other_language"] += 1
            continue
        video, start, end = cells[0].strip(), _int_cell(cells[1]), _int_cell(cells[2])
        if not video or start is None or end is None:
            bad(f"{where}: VideoID must be non-empty and Start/End integers, "
                f"got {cells[0]!r},{cells[1]!r},{cells[2]!r}")
            continue
        caption = collapse_ws(cells[-1])
        problem = caption_problem(caption)
        if problem:  # the released corpus has such English rows: a documented, logged skip
            logging.warning("skipping: %s: %s", where, problem)
            ignored["no_text"] += 1
            continue
        name = f"{video}_{start}_{end}"
        if name in captions:
            captions[name].append(caption)
        elif name not in names:
            ignored["not_mapped"] += 1
    return captions, ignored
