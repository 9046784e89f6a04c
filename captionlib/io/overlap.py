"""Evaluation clips that are also training clips, found before anything trains (recipe stage 1).

A clip of an evaluation set that the models were trained on makes its scores a measure of
memory, not of captioning. Three ways a clip can be in both sets are found:

- the same clip id (a set named twice, or a preparer that gives one file one id);
- the same media file (the path in ``wav.scp``/``image.scp``/``video.scp``; symlinks and hard
  links of one file are one) under another id, e.g. one file listed in two splits' CSVs;
- the same bytes in another file (a copy). Files are compared by size first, then by the
  SHA-256 of their first 64 KiB, and only files equal in both are read whole: a corpus of
  distinct files is read only where sizes collide (fixed-length WAVs: their first 64 KiB).

The same recording encoded twice (another format, rate or cut) is not found: that needs
features, not bytes.
"""

import functools
import hashlib
import os
from collections import defaultdict
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from captionlib.io.datadir import PathLike, read_scp, read_spk2utt

#: The media lists of a data dir (one at most): audio, images, videos.
MEDIA_LISTS = ("wav.scp", "image.scp", "video.scp")
_HEAD_BYTES = 1 << 16
_CHUNK_BYTES = 1 << 20


def media_list(data_dir: PathLike) -> Optional[Dict[str, str]]:
    """``{clip id: media path}`` of the data dir's media list, or ``None`` without one
    (imported features: ``clip2id`` only).

    Raises:
        ValueError: a parse error naming the file and line (:func:`read_scp`).
    """
    for name in MEDIA_LISTS:
        path = os.path.join(data_dir, name)
        if os.path.isfile(path):
            return read_scp(path)
    return None


def _digest(path: str, limit: Optional[int]) -> bytes:
    """SHA-256 of the first ``limit`` bytes of ``path`` (``None``: all of them), computed once
    per process for a file of the same inode, size and modification time (the training files
    are compared with each evaluation dir)."""
    st = os.stat(path)
    return _file_digest(path, limit, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _file_digest(path: str, limit: Optional[int], *_identity) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = limit
        while left is None or left > 0:
            chunk = f.read(_CHUNK_BYTES if left is None else min(left, _CHUNK_BYTES))
            if not chunk:
                break
            h.update(chunk)
            left = None if left is None else left - len(chunk)
    return h.digest()


def _regroup(groups, key_of) -> Dict[tuple, Tuple[list, list]]:
    """Split each group ``key -> (train items, other items)`` that has items on both sides by
    ``key_of(path)``; an item whose file cannot be read (``OSError``) is left out."""
    out: Dict[tuple, Tuple[list, list]] = defaultdict(lambda: ([], []))
    for key, sides in groups.items():
        if not all(sides):
            continue
        for side, items in enumerate(sides):
            for clip, path in items:
                try:
                    out[(key, key_of(path))][side].append((clip, path))
                except OSError:
                    continue
    return out


def same_content(train: Mapping[str, str], other: Mapping[str, str]) -> List[Tuple[str, str]]:
    """Clips of ``other`` whose media file has the same bytes as another file of ``train`` (not
    the same file through a symlink or hard link: that is :func:`find_overlap`'s ``file``).

    Args:
        train, other: ``{clip id: media path}``.

    Returns:
        ``(other clip, train clip)`` pairs, sorted; a clip whose file cannot be read is left
        out (stage 2 names it).
    """
    groups = {(): ([(c, p) for c, p in train.items()], [(c, p) for c, p in other.items()])}
    for key_of in (os.path.getsize, lambda p: _digest(p, _HEAD_BYTES), lambda p: _digest(p, None)):
        groups = _regroup(groups, key_of)
    return sorted({(o, t) for a, b in groups.values() for o, op in b for t, tp in a if _file_id(op) != _file_id(tp)})


def _file_id(path: str):
    """The identity of a file: ``(device, inode)``, so that symlinks and hard links of one file
    are one; the real path where it cannot be read (stage 2 names it)."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except OSError:
        return os.path.realpath(path)


def find_overlap(train_dir: PathLike, other_dir: PathLike,
                 content: bool = True) -> Dict[str, List[Tuple[str, str]]]:
    """Clips of ``other_dir`` that are also clips of ``train_dir``.

    Args:
        train_dir, other_dir: Kaldi-style data dirs with ``spk2utt`` (clip ids) and, where
            both have one, a media list (:data:`MEDIA_LISTS`).
        content: also compare the bytes of different files (:func:`same_content`).

    Returns:
        ``{"id": [(clip, clip)], "file": [(other clip, train clip)], "content": [...]}``: the
        pairs with the same clip id, with the same media file (device and inode) under another id,
        and with the same bytes in another file; each sorted, empty when none.

    Raises:
        ValueError: a parse error naming the file and line.
        FileNotFoundError: a data dir without ``spk2utt``.
    """
    ids = [set(read_spk2utt(os.path.join(d, "spk2utt"))) for d in (train_dir, other_dir)]
    out = {"id": [(c, c) for c in sorted(ids[0] & ids[1])], "file": [], "content": []}
    media = [media_list(d) for d in (train_dir, other_dir)]
    if media[0] is None or media[1] is None:
        return out
    train, other = media
    by_file: Dict[Any, List[str]] = defaultdict(list)
    for clip, path in train.items():
        by_file[_file_id(path)].append(clip)
    out["file"] = sorted((o, t) for o, p in other.items() for t in by_file.get(_file_id(p), []) if t != o)
    if content:
        out["content"] = same_content(train, other)
    return out


def describe_overlap(overlap: Mapping[str, Sequence[Tuple[str, str]]], train_dir: str, other_dir: str,
                     num_clips: int) -> List[str]:
    """One warning line per kind of :func:`find_overlap`'s result that has pairs, with the
    count and the first pair, e.g. ``"3 of the 1045 clips of data/evaluation are clips of
    data/development with the same media file under another id (e.g. clotho-evaluation-00007 =
    clotho-development-00012): their scores are of data the models were trained on"``."""
    how = {"id": "with the same clip id", "file": "with the same media file under another id",
           "content": "with the same bytes in another file"}
    lines = []
    for kind, pairs in overlap.items():
        if pairs:
            example = pairs[0][0] if kind == "id" else f"{pairs[0][0]} = {pairs[0][1]}"
            lines.append(f"{len({o for o, _ in pairs})} of the {num_clips} clips of {other_dir} are clips of "
                         f"{train_dir} {how[kind]} (e.g. {example}): their scores are of data the models "
                         "were trained on")
    return lines
