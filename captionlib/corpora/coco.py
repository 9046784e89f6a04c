"""Prepare Kaldi-style data directories for MS COCO captioning with the Karpathy split.

Input: ``dataset_coco.json`` of Karpathy & Fei-Fei, "Deep visual-semantic alignments for
generating image descriptions" (CVPR 2015), the de-facto standard split of COCO 2014
captions (113,287 train + restval / 5,000 val / 5,000 test images)::

    {"dataset": "coco",
     "images": [{"filepath": "val2014", "filename": "COCO_val2014_000000391895.jpg",
                 "imgid": 0, "split": "train" | "restval" | "val" | "test",
                 "cocoid": 391895, "sentids": [...],
                 "sentences": [{"raw": "A man with a red helmet ...", "tokens": [...],
                                "imgid": 0, "sentid": 770337}, ...]}, ...]}

and, optionally, the COCO 2014 images as ``<image_root>/<filepath>/<filename>``.

``--split train`` is Karpathy's ``train`` plus ``restval`` (the 113k images of the
literature); ``val`` and ``test`` are his 5k splits. Output ``<output_dir>/{text,utt2spk,
spk2utt,clip2id}`` (+ ``image.scp`` with absolute paths when ``image_root`` is given),
see :mod:`captionlib.corpora.prep`. Clip ids are ``coco-<cocoid, 12 digits>``,
``clip2id`` gives the COCO image id; caption ids ``<clip-id>-<kk>`` in the order of the
image's ``sentences``. Every listed sentence is kept (most images have 5, a few 6-7); an
image with fewer than 5 usable ones is logged as a warning. ``raw`` is kept as written
except that whitespace runs are collapsed.
"""

import logging
import os
from typing import Dict, List, Optional

from captionlib.corpora.prep import (
    BadRecords,
    ClipCaptions,
    caption_problem,
    collapse_ws,
    json_list,
    load_json,
    media_problem,
    media_root,
    missing_keys,
    write_caption_dir,
)
from captionlib.io.datadir import PathLike, control_problem

SPLITS = {"train": ("train", "restval"), "val": ("val",), "test": ("test",)}
KARPATHY_SPLITS = ("train", "restval", "val", "test")
IMAGE_KEYS = ("filepath", "filename", "split", "cocoid", "sentences")
MIN_CAPTIONS = 5


class CocoPrepError(ValueError):
    """Bad COCO input; the message names the JSON file and record (``images[i]``), or the image."""


def clip_id(cocoid: int) -> str:
    """``coco-<cocoid zero-padded to 12 digits>`` (the width of COCO's file names)."""
    return f"coco-{cocoid:012d}"


def prepare_coco(
    dataset_json: PathLike,
    split: str,
    output_dir: PathLike,
    image_root: Optional[PathLike] = None,
    skip_bad: bool = False,
) -> Dict[str, int]:
    """Write ``text utt2spk spk2utt clip2id [image.scp]`` for one Karpathy split of COCO.

    Args:
        dataset_json: Karpathy's ``dataset_coco.json``.
        split: ``train`` (Karpathy train + restval), ``val`` or ``test``.
        output_dir: data directory to create (e.g. ``data/train``).
        image_root: directory holding ``<filepath>/<filename>`` (``train2014/``,
            ``val2014/``); without it no ``image.scp`` is written (features are imported).
        skip_bad: log a warning for each bad record/caption/image and skip it, instead of failing.

    Returns:
        ``{"clips": n, "captions": m, "skipped": k}``.

    Raises:
        CocoPrepError (a ``ValueError``): unknown split, unreadable JSON or no ``images``
            list (always fatal); and, unless ``skip_bad``, an image record with a missing
            key, an unknown split name, a non-integer or repeated ``cocoid``, a sentence
            without ``raw`` or without words, a missing or empty image file. Messages
            start ``<dataset_json>:images[<i>]`` (0-based record index). Also raised if
            no image is left.
    """
    if split not in SPLITS:
        raise CocoPrepError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    path = os.fspath(dataset_json)
    images = json_list(load_json(path, CocoPrepError), "images", path, CocoPrepError)
    root = media_root(image_root, "image", CocoPrepError)
    bad = BadRecords(skip_bad, CocoPrepError)
    clips: List[ClipCaptions] = []
    seen: Dict[int, int] = {}
    for i, rec in enumerate(images):
        where = f"{path}:images[{i}]"
        problem = _record_problem(rec, seen)
        if problem:
            bad(f"{where}: {problem}")
            continue
        seen[rec["cocoid"]] = i
        if rec["split"] not in SPLITS[split]:
            continue
        clip = _image_clip(rec, where, root, bad)
        if clip is not None:
            clips.append(clip)
    stats = write_caption_dir(output_dir, clips, "image.scp", CocoPrepError,
                              f"{path}: split {split!r} ({', '.join(SPLITS[split])})")
    stats["skipped"] = bad.skipped
    logging.info("COCO %s: wrote %d images and %d captions to %s (%d bad records skipped)", split,
                 stats["clips"], stats["captions"], os.fspath(output_dir), bad.skipped)
    return stats


def _record_problem(rec: object, seen: Dict[int, int]) -> Optional[str]:
    """Why an ``images[i]`` record is bad (keys, Karpathy split, ``cocoid``, ``filepath`` and
    ``filename`` that are not one name each), or ``None``.

    Args:
        rec: the JSON record.
        seen: ``{cocoid: record index}`` of the good records so far (a repeated id is bad).
    """
    problem = missing_keys(rec, IMAGE_KEYS)
    if problem:
        return problem
    if rec["split"] not in KARPATHY_SPLITS:
        return f"unknown split {rec['split']!r}; expected one of {', '.join(KARPATHY_SPLITS)}"
    cocoid = rec["cocoid"]
    if isinstance(cocoid, bool) or not isinstance(cocoid, int) or cocoid < 0:
        return f"cocoid must be a non-negative integer, got {cocoid!r}"
    if cocoid in seen:
        return f"cocoid {cocoid} repeated (first in images[{seen[cocoid]}])"
    for key in ("filepath", "filename"):  # one path component each: "../" left the image root
        value = rec[key]
        if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\\" in value:
            return f"{key} must be a file or folder name (no path), got {value!r}"
        problem = control_problem(value)
        if problem:  # a newline failed only when image.scp was written, after text and utt2spk
            return f"{key} {value!r}: {problem}"
    return None


def _image_clip(rec: dict, where: str, root: Optional[str], bad: BadRecords) -> Optional[ClipCaptions]:
    """The clip of a good image record of the split, or ``None`` when ``bad`` skipped it.

    Args:
        rec: the record (checked by :func:`_record_problem`).
        where: ``<dataset_json>:images[<i>]``, starting the messages.
        root: the image root (``<root>/<filepath>/<filename>`` is checked), or ``None``.
        bad: receives a bad sentence, an image without usable sentence, a missing or empty image.
    """
    cocoid = rec["cocoid"]
    captions = _image_captions(rec["sentences"], where, bad)
    if captions is None:
        return None
    if not captions:
        bad(f"{where}: image {cocoid} has no usable sentence")
        return None
    if len(captions) < MIN_CAPTIONS:
        logging.warning("%s: image %d has %d reference(s), fewer than %d", where, cocoid, len(captions),
                        MIN_CAPTIONS)
    media = None
    if root is not None:
        media = os.path.join(root, str(rec["filepath"]), str(rec["filename"]))
        problem = media_problem(media, media)
        if problem:
            bad(f"{where}: {problem}")
            return None
    return ClipCaptions(clip_id(cocoid), str(cocoid), captions, media)


def _image_captions(sentences: object, where: str, bad: BadRecords) -> Optional[List[str]]:
    """The usable ``raw`` captions (whitespace collapsed) of an image's ``sentences``, in order.

    A bad sentence goes to ``bad``; ``None`` (also via ``bad``) when ``sentences`` is no list.
    """
    if not isinstance(sentences, list):
        bad(f"{where}: 'sentences' must be a list")
        return None
    captions = []
    for j, sent in enumerate(sentences):
        raw = sent.get("raw") if isinstance(sent, dict) else None
        if not isinstance(raw, str):
            bad(f"{where}.sentences[{j}]: missing or non-string 'raw'")
            continue
        caption = collapse_ws(raw)
        problem = caption_problem(caption)
        if problem:
            bad(f"{where}.sentences[{j}]: {problem}")
            continue
        captions.append(caption)
    return captions
