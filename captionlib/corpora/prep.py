"""Shared plumbing of the corpus preparations (COCO, MSVD, MSR-VTT, AudioCaps).

Each corpus module (:mod:`captionlib.corpora.coco`, :mod:`captionlib.corpora.msvd`,
:mod:`captionlib.corpora.msrvtt`, :mod:`captionlib.corpora.audiocaps`) parses its official annotation files into
:class:`ClipCaptions` records and hands them to :func:`write_caption_dir`, which writes
the Kaldi-style data directory (``docs/CONVENTIONS.md`` section 3.4; a clip plays the
speaker, a caption the utterance)::

    text      <clip-id>-<kk> <raw caption>      utt2spk  <clip-id>-<kk> <clip-id>
    spk2utt   <clip-id> <caption-id> ...        clip2id  <clip-id> <corpus id>
    image.scp | video.scp  <clip-id> <abs path>  (only when the media root is given)

All files are sorted ``LC_ALL=C``. ``kk`` is the 1-based caption index, zero-padded to
2 digits (wider only if a clip of the split has 100 captions or more). ``clip2id`` maps
the clip id to the corpus's own id (COCO image id, MSVD ``<VideoID>_<Start>_<End>``,
MSR-VTT ``videoN``), which the feature importers use to find precomputed features.
"""

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Type

from captionlib.io.datadir import PathLike, control_problem, read_utf8, utt2spk_to_spk2utt, write_scp
from captionlib.text.cleaner import clean_words


@dataclass
class ClipCaptions:
    """One clip (image or video) of a split and its references.

    Attributes:
        clip_id: the data-dir clip id (``coco-000000000042`` ...).
        corpus_id: the corpus's own id, written to ``clip2id``.
        captions: the raw captions, whitespace already collapsed, in corpus order.
        media: absolute path of the image/video, or ``None`` without a media root.
    """

    clip_id: str
    corpus_id: str
    captions: List[str] = field(default_factory=list)
    media: Optional[str] = None


class BadRecords:
    """Raise ``error_cls(msg)`` for a bad record, or (``skip_bad``) log it and count it.

    Example:
        >>> bad = BadRecords(skip_bad=True, error_cls=ValueError)
        >>> bad("x.json:videos[3]: missing key 'split'")   # logs a warning
        >>> bad.skipped
        1
    """

    def __init__(self, skip_bad: bool, error_cls: Type[ValueError]):
        self.skip_bad = skip_bad
        self.error_cls = error_cls
        self.skipped = 0

    def __call__(self, msg: str) -> None:
        if not self.skip_bad:
            raise self.error_cls(msg)
        logging.warning("skipping: %s", msg)
        self.skipped += 1


def collapse_ws(text: str) -> str:
    """Collapse whitespace runs (newlines included) to one space and strip the ends."""
    return " ".join(text.split())


def caption_problem(caption: str) -> Optional[str]:
    """Why ``caption`` (already whitespace-collapsed) cannot be a reference, or ``None``.

    An empty caption, or one without words after :func:`captionlib.text.cleaner.clean_words`
    (punctuation only), would be an empty reference to the tokenizer and the scorers; a control
    character (:func:`captionlib.io.datadir.control_problem`, e.g. a NUL byte) would split a
    word for the cleaner and not for the PTB tokenizer, and no ``text`` file may hold one.
    """
    if not caption:
        return "empty caption"
    problem = control_problem(caption)
    if problem:
        return f"caption has a {problem}: {caption!r}"
    if not clean_words(caption):
        return f"caption has no words after cleaning (punctuation only): {caption!r}"
    return None


def load_json(path: PathLike, error_cls: Type[ValueError]) -> object:
    """Load a JSON annotation file; a missing file or a syntax error names ``<path>:<line>``."""
    path = os.fspath(path)
    text = read_utf8(path, error_cls, "annotation file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error_cls(f"{path}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None


def json_list(data: object, key: str, path: PathLike, error_cls: Type[ValueError]) -> list:
    """``data[key]``, which must be a list (``images``, ``videos``, ``sentences``)."""
    if not isinstance(data, dict):
        raise error_cls(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    if key not in data:
        raise error_cls(f"{path}: missing top-level key {key!r} (keys: {', '.join(map(str, data))})")
    if not isinstance(data[key], list):
        raise error_cls(f"{path}: {key!r} must be a list, got {type(data[key]).__name__}")
    return data[key]


def missing_keys(record: object, keys: Sequence[str]) -> Optional[str]:
    """Describe what ``record`` lacks among ``keys`` (or that it is no object); ``None`` if complete."""
    if not isinstance(record, dict):
        return f"expected an object, got {type(record).__name__}"
    missing = [k for k in keys if k not in record]
    if missing:
        return "missing key(s) " + ", ".join(repr(k) for k in missing)
    return None


def find_media(root: str, subdirs: Iterable[str], filename: str) -> Optional[str]:
    """First existing ``<root>/<subdir>/<filename>`` (``""`` = directly in ``root``), else ``None``."""
    for sub in subdirs:
        path = os.path.join(root, sub, filename) if sub else os.path.join(root, filename)
        if os.path.exists(path):
            return path
    return None


def media_problem(path: Optional[str], expected: str) -> Optional[str]:
    """Why the media file ``path`` is unusable (missing, not a file, empty), or ``None``.

    Args:
        path: the file found by :func:`find_media`, or ``None`` when none was found.
        expected: the path(s) looked at, named in the message.
    """
    if path is None or not os.path.exists(path):
        return f"media file not found: {expected}"
    if not os.path.isfile(path):
        return f"media path is not a file: {path}"
    if os.path.getsize(path) == 0:
        return f"empty media file (0 bytes): {path}"
    return None


def media_root(root: Optional[PathLike], what: str, error_cls: Type[ValueError]) -> Optional[str]:
    """The absolute path of an optional media root (``None`` stays ``None``).

    Args:
        root: the image/video folder given by the user, or ``None`` (features are imported).
        what: ``"image"`` or ``"video"``, named in the error.
        error_cls: raised (``"<root>: <what> root not found"``) when ``root`` is not a directory.
    """
    if root is None:
        return None
    path = os.path.abspath(os.fspath(root))
    if not os.path.isdir(path):
        raise error_cls(f"{path}: {what} root not found")
    return path


def locate_media(root: str, subdirs: Sequence[str], filename: str) -> Tuple[Optional[str], Optional[str]]:
    """Find ``filename`` under ``root`` (see :func:`find_media`) and check it (:func:`media_problem`).

    Returns:
        ``(path, None)`` for a usable file, else ``(path or None, why it is unusable)``; the
        message names every ``<root>/<subdir>/<filename>`` looked at.
    """
    path = find_media(root, subdirs, filename)
    return path, media_problem(path, " or ".join(os.path.join(root, s, filename) for s in subdirs))


#: Shortest audio clip (seconds) the audio corpus preparations accept: one analysis window of
#: the default log-mel front-end (``win_length_s: 0.04``, :class:`captionlib.audio.features.LogMel`),
#: so that at least one feature frame sees a whole window of the clip. A shorter clip, e.g. of one
#: sample (its ``reco2dur`` rounds to 0.000, which ``validate_data_dir.sh`` refuses), is a bad clip.
MIN_AUDIO_SECONDS = 0.04


def audio_length_problem(info, path: str) -> Optional[str]:
    """Why audio with header ``info`` (:class:`captionlib.audio.io.AudioInfo`) is too short to be a
    clip (0 samples, or less than :data:`MIN_AUDIO_SECONDS`), naming ``path``; ``None`` if long enough."""
    if info.frames <= 0:
        return f"empty audio (0 samples): {path}"
    if info.duration < MIN_AUDIO_SECONDS:
        return (f"audio too short: {path}: {info.frames} samples ({info.duration:.4f} s at {info.sample_rate} Hz), "
                f"less than one analysis window of {MIN_AUDIO_SECONDS} s")
    return None


def caption_ids(clip_id: str, count: int, width: int = 2) -> List[str]:
    """``<clip_id>-<k>`` for ``k = 1..count``, zero-padded to ``width`` digits."""
    return [f"{clip_id}-{k:0{width}d}" for k in range(1, count + 1)]


def write_caption_dir(
    output_dir: PathLike,
    clips: Sequence[ClipCaptions],
    scp_name: Optional[str],
    error_cls: Type[ValueError],
    what: str,
) -> Dict[str, int]:
    """Write ``text utt2spk spk2utt clip2id`` (+ ``scp_name`` when the clips have media).

    Args:
        output_dir: the data directory to create.
        clips: the clips of the split, each with at least one caption; the clip ids must be
            unique and free of whitespace.
        scp_name: ``image.scp`` or ``video.scp``; written only if ``clips`` have media paths.
        error_cls: raised when ``clips`` is empty.
        what: names the input in that error (e.g. ``"dataset_coco.json split 'val'"``).

    Returns:
        ``{"clips": n, "captions": m}``.
    """
    if not clips:
        raise error_cls(f"{what}: no usable clip")
    width = max(2, len(str(max(len(c.captions) for c in clips))))
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    clip2id: Dict[str, str] = {}
    media: Dict[str, str] = {}
    for clip in clips:
        if clip.clip_id in clip2id:
            raise error_cls(f"{what}: clip id {clip.clip_id} given twice")
        clip2id[clip.clip_id] = clip.corpus_id
        if clip.media is not None:
            media[clip.clip_id] = clip.media
        for utt, caption in zip(caption_ids(clip.clip_id, len(clip.captions), width), clip.captions):
            text[utt] = caption
            utt2spk[utt] = clip.clip_id
    out = os.fspath(output_dir)
    os.makedirs(out, exist_ok=True)
    write_scp(os.path.join(out, "text"), text)
    write_scp(os.path.join(out, "utt2spk"), utt2spk)
    write_scp(os.path.join(out, "spk2utt"), utt2spk_to_spk2utt(utt2spk))
    write_scp(os.path.join(out, "clip2id"), clip2id)
    if scp_name is not None and media:
        write_scp(os.path.join(out, scp_name), media)
    for stale in {"image.scp", "video.scp"} - ({scp_name} if media else set()):
        if os.path.exists(os.path.join(out, stale)):  # from an earlier run with a media root
            os.unlink(os.path.join(out, stale))
    return {"clips": len(clip2id), "captions": len(text)}


def write_missing(out: str, missing: Dict[str, List[str]], listed: int, what: str, unit: str, names: Sequence[str],
                  max_missing_fraction: float, remedy: str, error_cls: Type[ValueError]) -> None:
    """Write ``<out>/missing`` (``<clip-id> <what was looked for>`` lines), log one summary line
    (``"<what>: <n> of <listed> <unit> missing (<pct>%): <first five names>; all listed in
    <out>/missing"``) and stop when more than ``max_missing_fraction`` of the listed media are
    missing: the AudioCaps and TGIF rule (media gone from YouTube or Tumblr are skipped, up to
    a limit).

    Args:
        what, unit: e.g. ``"TGIF train"`` and ``"GIFs"``.
        names: the missing media's names, in the order of ``missing``.
        remedy: the end of the error message (what to do).

    Raises:
        error_cls: too many missing, with the summary and ``remedy``.
    """
    path = os.path.join(out, "missing")
    write_scp(path, missing)
    fraction = len(missing) / listed if listed else 0.0
    first = ", ".join(list(names)[:5]) + (", ..." if len(missing) > 5 else "")
    summary = (f"{what}: {len(missing)} of {listed} {unit} missing ({100 * fraction:.1f}%)"
               + (f": {first}; all listed in {path}" if missing else ""))
    logging.log(logging.WARNING if missing else logging.INFO, "%s", summary)
    if fraction > max_missing_fraction:
        raise error_cls(f"{summary}: more than --max_missing_fraction {max_missing_fraction}; {remedy}")
