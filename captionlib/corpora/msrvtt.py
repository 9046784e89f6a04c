"""Prepare Kaldi-style data directories for MSR-VTT.

Input: the annotation files of Xu, Mei, Yao & Rui, "MSR-VTT: A large video description
dataset for bridging video and language" (CVPR 2016): ``train_val_videodatainfo.json``
(6,513 ``train`` + 497 ``validate`` videos) and ``test_videodatainfo.json`` (2,990
``test`` videos), 20 English captions per video::

    {"info": {...},
     "videos": [{"category": 9, "url": "https://www.youtube.com/watch?v=...",
                 "video_id": "video0", "start time": 137.72, "end time": 149.44,
                 "split": "train", "id": 0}, ...],
     "sentences": [{"caption": "a car is shown", "video_id": "video2960",
                    "sen_id": 0}, ...]}

and, optionally, the videos ``<video_root>/TrainValVideo/videoN.mp4`` and
``<video_root>/TestVideo/videoN.mp4`` (the released archives), or all directly in
``<video_root>``.

``train`` and ``val`` read the train/val file (splits ``train`` and ``validate``),
``test`` the test file. Output ``<output_dir>/{text,utt2spk,spk2utt,clip2id}``
(+ ``video.scp`` with absolute paths when ``video_root`` is given), see
:mod:`captionlib.corpora.prep`. Clip ids are ``msrvtt-video<NNNNN>``, ``clip2id`` gives
``videoN``; caption ids ``<clip-id>-<kk>`` in ``sen_id`` order.
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
    json_list,
    load_json,
    locate_media,
    media_root,
    missing_keys,
    write_caption_dir,
)
from captionlib.io.datadir import PathLike

SPLITS = {"train": "train", "val": "validate", "test": "test"}
OFFICIAL_SPLITS = ("train", "validate", "test")
VIDEO_KEYS = ("video_id", "split")
SENTENCE_KEYS = ("caption", "video_id", "sen_id")
VIDEO_SUBDIRS = {"train": ("TrainValVideo", ""), "validate": ("TrainValVideo", ""), "test": ("TestVideo", "")}
VIDEO_EXT = ".mp4"
_VIDEO_ID_RE = re.compile(r"video([0-9]+)")


class MsrvttPrepError(ValueError):
    """Bad MSR-VTT input; the message names the JSON file and record (``videos[i]``,
    ``sentences[i]``), or the video."""


def clip_id(video_number: int) -> str:
    """``msrvtt-video<N zero-padded to 5 digits>`` for the corpus's ``videoN``."""
    return f"msrvtt-video{video_number:05d}"


def prepare_msrvtt(
    split: str,
    output_dir: PathLike,
    train_val_json: Optional[PathLike] = None,
    test_json: Optional[PathLike] = None,
    video_root: Optional[PathLike] = None,
    skip_bad: bool = False,
) -> Dict[str, int]:
    """Write ``text utt2spk spk2utt clip2id [video.scp]`` for one split of MSR-VTT.

    Args:
        split: ``train``, ``val`` (the corpus's ``validate``) or ``test``.
        output_dir: data directory to create (e.g. ``data/train``).
        train_val_json: ``train_val_videodatainfo.json`` (needed for train and val).
        test_json: ``test_videodatainfo.json`` (needed for test).
        video_root: directory holding ``TrainValVideo/``/``TestVideo/`` or the ``videoN.mp4``
            files themselves; without it no ``video.scp`` is written (features are imported).
        skip_bad: log a warning for each bad record/video and skip it, instead of failing.

    Returns:
        ``{"clips": n, "captions": m, "skipped": k}``.

    Raises:
        MsrvttPrepError (a ``ValueError``): unknown split, the needed JSON not given,
            missing or unreadable, without ``videos``/``sentences`` lists (always
            fatal); and, unless ``skip_bad``, a video record with a missing key, a
            ``video_id`` not of the form ``videoN``, an unknown or repeated video, a video of
            a split the file does not hold (``test`` in the train/val file, or the reverse), a
            sentence with a missing key, for an unknown video, with a repeated
            ``sen_id`` or without words, a video of the split without captions, a missing
            or empty video file. Messages start ``<json>:videos[<i>]`` or
            ``<json>:sentences[<i>]`` (0-based record index). Also raised if no video is left.
    """
    if split not in SPLITS:
        raise MsrvttPrepError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    official = SPLITS[split]
    given = test_json if official == "test" else train_val_json
    if given is None:
        option = "test_json" if official == "test" else "train_val_json"
        raise MsrvttPrepError(f"split {split!r} needs {option}")
    path = os.fspath(given)
    data = load_json(path, MsrvttPrepError)
    videos = json_list(data, "videos", path, MsrvttPrepError)
    sentences = json_list(data, "sentences", path, MsrvttPrepError)
    root = media_root(video_root, "video", MsrvttPrepError)
    bad = BadRecords(skip_bad, MsrvttPrepError)
    video_index, in_split = _read_videos(videos, path, official, bad)
    captions = _read_sentences(sentences, path, video_index, in_split, bad)
    clips: List[ClipCaptions] = []
    for vid, number in sorted(in_split.items(), key=lambda kv: kv[1]):
        where = f"{path}:videos[{video_index[vid]}]"
        if not captions[vid]:
            bad(f"{where}: video {vid} has no caption")
            continue
        media = None
        if root is not None:
            media, problem = locate_media(root, VIDEO_SUBDIRS[official], vid + VIDEO_EXT)
            if problem:
                bad(f"{where}: {problem}")
                continue
        ordered = [c for _, c in sorted(captions[vid], key=lambda sc: sc[0])]
        clips.append(ClipCaptions(clip_id(number), vid, ordered, media))
    stats = write_caption_dir(output_dir, clips, "video.scp", MsrvttPrepError, f"{path}: split {official!r}")
    stats["skipped"] = bad.skipped
    logging.info("MSR-VTT %s: wrote %d videos and %d captions to %s (%d bad records skipped)", split,
                 stats["clips"], stats["captions"], os.fspath(output_dir), bad.skipped)
    return stats


def _read_videos(videos: Sequence[object], path: str, official: str,
                 bad: BadRecords) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Check the ``videos`` records of the JSON file ``path``.

    Args:
        videos: the records (``video_id``, ``split`` ...).
        path: the JSON file, named in the messages (``<path>:videos[<i>]: ...``).
        official: the corpus's split to keep (``train``, ``validate``, ``test``).
        bad: receives each bad record.

    Returns:
        ``({video_id: record index} of every good video, {video_id: N} of those of ``official``)``.
    """
    video_index: Dict[str, int] = {}
    in_split: Dict[str, int] = {}
    for i, rec in enumerate(videos):
        where = f"{path}:videos[{i}]"
        problem = missing_keys(rec, VIDEO_KEYS)
        if problem:
            bad(f"{where}: {problem}")
            continue
        vid = rec["video_id"]
        m = _VIDEO_ID_RE.fullmatch(vid) if isinstance(vid, str) else None
        if m is None:
            bad(f"{where}: video_id must be 'video<N>', got {vid!r}")
            continue
        if vid in video_index:
            bad(f"{where}: video_id {vid} repeated (first in videos[{video_index[vid]}])")
            continue
        if rec["split"] not in OFFICIAL_SPLITS:
            bad(f"{where}: unknown split {rec['split']!r}; expected one of {', '.join(OFFICIAL_SPLITS)}")
            continue
        in_file = ("test",) if official == "test" else ("train", "validate")  # the file's splits
        if rec["split"] not in in_file:  # was left out of every split with no line logged
            bad(f"{where}: split {rec['split']!r} in the file of the {'/'.join(in_file)} videos")
            continue
        video_index[vid] = i
        if rec["split"] == official:
            in_split[vid] = int(m.group(1))
    return video_index, in_split


def _read_sentences(sentences: Sequence[object], path: str, video_index: Dict[str, int], in_split: Dict[str, int],
                    bad: BadRecords) -> Dict[str, List[Tuple[int, str]]]:
    """Check the ``sentences`` records of ``path`` and group the captions of the split's videos.

    Args:
        sentences: the records (``caption``, ``video_id``, ``sen_id``).
        path: the JSON file, named in the messages (``<path>:sentences[<i>]: ...``).
        video_index: the good videos of the file (a sentence of another video is bad).
        in_split: the videos of the split.
        bad: receives each bad record.

    Returns:
        ``{video_id: [(sen_id, caption), ...]}`` for every video of ``in_split``, in file order.
    """
    captions: Dict[str, List[Tuple[int, str]]] = {vid: [] for vid in in_split}
    sen_index: Dict[object, int] = {}
    for i, sent in enumerate(sentences):
        where = f"{path}:sentences[{i}]"
        problem = missing_keys(sent, SENTENCE_KEYS)
        if problem:
            bad(f"{where}: {problem}")
            continue
        vid, sen_id = sent["video_id"], sent["sen_id"]
        if not isinstance(vid, str) or vid not in video_index:
            bad(f"{where}: sentence for unknown video {vid!r} (not in {path} 'videos')")
            continue
        if isinstance(sen_id, bool) or not isinstance(sen_id, int):
            bad(f"{where}: sen_id must be an integer, got {sen_id!r}")
            continue
        if sen_id in sen_index:
            bad(f"{where}: sen_id {sen_id} repeated (first in sentences[{sen_index[sen_id]}])")
            continue
        sen_index[sen_id] = i
        caption = collapse_ws(sent["caption"]) if isinstance(sent["caption"], str) else ""
        problem = caption_problem(caption)
        if problem:
            bad(f"{where}: {problem}")
            continue
        if vid in captions:
            captions[vid].append((sen_id, caption))
    return captions
