"""Prepare Kaldi-style data directories from TGIF (Tumblr GIF, Li et al. 2016).

TGIF (Y. Li, Y. Song, L. Cao, J. Tetreault, L. Goldberg, A. Jaimes, J. Luo, "TGIF: A New
Dataset and Benchmark on Animated GIF Description", CVPR 2016) is released as URLs and
sentences (https://github.com/raingo/TGIF-Release, ``data/``)::

    <tgif_dir>/tgif-v1.0.tsv          <GIF URL><TAB><sentence>, one row per sentence, no header
    <tgif_dir>/splits/{train,val,test}.txt   one GIF URL per line (the official split:
                                             80,000 / 10,708 / 11,360 GIFs)

with one sentence per GIF in train and validation and three per GIF in test. The GIFs have to
be fetched from Tumblr by the user, each saved under the file name of its URL
(``https://38.media.tumblr.com/<hash>/tumblr_<id>_500.gif`` -> ``tumblr_<id>_500.gif``), in
``<gif_dir>`` or ``<gif_dir>/gifs/``. Some are always gone from Tumblr: a GIF without a file is
listed in ``missing``; more than ``max_missing_fraction`` of a split is an error (as AudioCaps,
:mod:`captionlib.corpora.audiocaps`).

Output ``<output_dir>/{text,utt2spk,spk2utt,clip2id,video.scp,missing}`` (see
:mod:`captionlib.corpora.prep`), sorted ``LC_ALL=C``: clip ids ``tgif-<name>`` (``<name>`` the
file name without ``.gif``), ``clip2id`` gives ``<name>``, caption ids ``<clip-id>-<kk>`` in
TSV order; ``missing`` lists ``<clip-id> <URL> <file name>`` per GIF without a file. Without a
GIF folder no ``video.scp`` nor ``missing`` is written (features are imported).
"""

import logging
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from captionlib.corpora.prep import (
    BadRecords,
    ClipCaptions,
    caption_problem,
    collapse_ws,
    find_media,
    media_problem,
    media_root,
    write_caption_dir,
    write_missing,
)
from captionlib.io.datadir import PathLike, read_utf8_lines
from captionlib.visual.media import GIF_SIGNATURES, is_gif

SPLITS = ("train", "val", "test")
OFFICIAL_SPLIT_SIZES = {"train": 80000, "val": 10708, "test": 11360}
GIF_SUBDIRS = ("", "gifs")
DEFAULT_MAX_MISSING_FRACTION = 0.1
_NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+\.gif", re.IGNORECASE)


class TgifPrepError(ValueError):
    """Bad TGIF input; the message names ``<file>:<line>``, or the GIF file."""


def gif_name(url: str) -> Optional[str]:
    """The file name of a GIF URL (its path's last part), or ``None`` when that is not a plain
    ``<name>.gif`` (letters, digits, ``_ . + -``).

    Example:
        >>> gif_name("https://38.media.tumblr.com/9f6c/tumblr_mevmyaKtDf1rgvhr8o1_500.gif")
        'tumblr_mevmyaKtDf1rgvhr8o1_500.gif'
    """
    name = posixpath.basename(urlsplit(url.strip()).path)
    return name if _NAME_RE.fullmatch(name) else None


def clip_id(name: str) -> str:
    """``tgif-<name without .gif>`` for the GIF file name ``name``."""
    return "tgif-" + name[:-4]


def read_split_list(path: str, bad: BadRecords) -> Dict[str, Tuple[str, int]]:
    """Read one split list (a GIF URL per line) into ``{URL: (file name, line)}``, in file order.

    A repeated URL is kept once (logged). A URL without a plain ``.gif`` file name, or whose file
    name another URL of the list already has (both would be saved to one file), goes to ``bad``.

    Raises:
        TgifPrepError: a missing or non-UTF-8 file, or an empty list.
    """
    urls: Dict[str, Tuple[str, int]] = {}
    names: Dict[str, Tuple[str, int]] = {}
    for line_no, line in enumerate(read_utf8_lines(path, TgifPrepError, "split list"), start=1):
        url = line.strip()
        if not url:
            continue
        if url in urls:
            logging.warning("%s:%d: %s repeated (first on line %d): kept once", path, line_no, url, urls[url][1])
            continue
        name = gif_name(url)
        if name is None:
            bad(f"{path}:{line_no}: expected a GIF URL ending in <name>.gif, got {url!r}")
            continue
        if name in names:
            bad(f"{path}:{line_no}: {url} has the file name {name} of line {names[name][1]} ({names[name][0]})")
            continue
        urls[url] = (name, line_no)
        names[name] = (url, line_no)
    if not urls:
        raise TgifPrepError(f"{path}: no GIF URL in the split list")
    return urls


def read_sentences(tsv: str, urls: Dict[str, Tuple[str, int]], bad: BadRecords) -> Tuple[Dict[str, List[str]], int]:
    """The sentences of the URLs of ``urls`` from ``tgif-v1.0.tsv``, in row order.

    A row without a tab or with an empty URL goes to ``bad``; a sentence without words (see
    :func:`captionlib.corpora.prep.caption_problem`) is logged and left out, as it cannot be a
    reference. Rows of other URLs (the other splits) are ignored.

    Returns:
        ``({URL: [sentence, ...]} for every URL of ``urls``, rows without words)``.

    Raises:
        TgifPrepError: a missing or non-UTF-8 file; a bad row unless ``bad.skip_bad``.
    """
    sentences: Dict[str, List[str]] = {url: [] for url in urls}
    no_words = 0
    for line_no, line in enumerate(read_utf8_lines(tsv, TgifPrepError, "TGIF sentence file"), start=1):
        if not line.strip():
            continue
        url, tab, sentence = line.partition("\t")
        if not tab or not url.strip():
            bad(f"{tsv}:{line_no}: expected '<GIF URL><TAB><sentence>', got {line[:120]!r}")
            continue
        url = url.strip()
        if url not in sentences:
            continue
        sentence = collapse_ws(sentence)
        problem = caption_problem(sentence)
        if problem:
            logging.warning("skipping: %s:%d: %s", tsv, line_no, problem)
            no_words += 1
            continue
        sentences[url].append(sentence)
    return sentences, no_words


@dataclass
class _FoundGifs:
    """The clips whose GIF was found (``kept``, ``media`` set) and those without a file (``missing``:
    ``{clip_id: [URL, file name]}``)."""

    kept: List[ClipCaptions] = field(default_factory=list)
    missing: Dict[str, List[str]] = field(default_factory=dict)


def find_gifs(clips: List[Tuple[ClipCaptions, str, str]], root: str, bad: BadRecords) -> _FoundGifs:
    """Look up each clip's GIF ``<root>/<name>`` or ``<root>/gifs/<name>``.

    Args:
        clips: ``(clip, URL, file name)`` per clip, in split-list order.
        root: the absolute GIF folder.
        bad: receives an empty file or one without a GIF signature (:data:`GIF_SIGNATURES`: e.g. an
            HTML error page saved by the download), naming it; skipped, it is listed as missing too.
    """
    found = _FoundGifs()
    for clip, url, name in clips:
        path = find_media(root, GIF_SUBDIRS, name)
        if path is None:
            found.missing[clip.clip_id] = [url, name]
            continue
        problem = media_problem(path, path)
        if problem is None and not is_gif(path):
            problem = f"not a GIF (it does not start with {' or '.join(s.decode() for s in GIF_SIGNATURES)}): {path}"
        if problem:
            bad(f"{problem} (clip {clip.clip_id}, {url})")
            found.missing[clip.clip_id] = [url, name]  # skipped: a missing GIF, counted in the fraction
            continue
        clip.media = path
        found.kept.append(clip)
    return found


def prepare_tgif(
    tsv: PathLike,
    split_list: PathLike,
    split: str,
    output_dir: PathLike,
    gif_root: Optional[PathLike] = None,
    max_missing_fraction: float = DEFAULT_MAX_MISSING_FRACTION,
    skip_bad: bool = False,
) -> Dict[str, int]:
    """Write the data directory of one TGIF split (Li et al., CVPR 2016).

    Args:
        tsv: ``tgif-v1.0.tsv`` (``<GIF URL><TAB><sentence>`` rows).
        split_list: the split's URL list (``splits/<split>.txt``).
        split: ``train``, ``val`` or ``test`` (names the output; the split is the list's).
        output_dir: the data directory to write (e.g. ``data/train``).
        gif_root: the downloaded GIFs, named as in the URLs (directly or in ``gifs/``); None:
            no ``video.scp`` (features imported).
        max_missing_fraction: the largest tolerated fraction (0..1) of the split's GIFs without a file.
        skip_bad: log and skip a bad row, URL or GIF file instead of failing. A missing GIF is
            never an error by itself (see ``max_missing_fraction``).

    Returns:
        ``{"clips": n, "captions": m, "missing": k, "listed": l, "skipped": s}``: clips and
        captions written, GIFs without a file, GIFs in the split list, bad records skipped.

    Raises:
        TgifPrepError (a ``ValueError``): an unknown split, a bad ``max_missing_fraction``, a
            missing GIF folder, a missing, non-UTF-8 or empty split list or TSV (always); unless
            ``skip_bad``, a TSV row without a tab (``<tsv>:<line>``), a URL that is not a plain
            ``.gif`` or shares its file name with another (``<list>:<line>``), a GIF of the list
            without a sentence, an empty GIF file or one that is not a GIF (naming it); more than
            ``max_missing_fraction`` of the GIFs missing (after ``missing`` is written); no clip left.
    """
    if split not in SPLITS:
        raise TgifPrepError(f"unknown TGIF split {split!r}; expected one of {', '.join(SPLITS)}")
    if not 0.0 <= max_missing_fraction <= 1.0:
        raise TgifPrepError(f"max_missing_fraction must be in [0, 1], got {max_missing_fraction}")
    tsv, split_list, out = os.fspath(tsv), os.fspath(split_list), os.fspath(output_dir)
    root = media_root(gif_root, "GIF", TgifPrepError)
    bad = BadRecords(skip_bad, TgifPrepError)
    urls = read_split_list(split_list, bad)
    if len(urls) != OFFICIAL_SPLIT_SIZES[split]:
        logging.info("%s: %d GIFs (the official %s split has %d)", split_list, len(urls), split,
                     OFFICIAL_SPLIT_SIZES[split])
    sentences, no_words = read_sentences(tsv, urls, bad)
    clips = []
    for url, (name, line_no) in urls.items():
        if not sentences[url]:
            bad(f"{split_list}:{line_no}: {url} has no sentence in {tsv}")
            continue
        clips.append((ClipCaptions(clip_id(name), name[:-4], sentences[url]), url, name))
    found = _FoundGifs(kept=[c for c, _, _ in clips])
    if root is not None:
        found = find_gifs(clips, root, bad)
        write_missing(out, found.missing, len(urls), f"TGIF {split}", "GIFs", [v[1] for v in found.missing.values()],
                      max_missing_fraction, f"no file in {root} for them (download them, or raise "
                      "--max_missing_fraction if they are gone from Tumblr)", TgifPrepError)
    elif os.path.exists(os.path.join(out, "missing")):  # of an earlier run with a GIF folder
        os.unlink(os.path.join(out, "missing"))
    what = f"{split_list} ({len(urls)} GIFs, {bad.skipped} bad records skipped, {len(found.missing)} GIFs missing)"
    counts = write_caption_dir(out, found.kept, "video.scp", TgifPrepError, what)
    logging.info("TGIF %s: wrote %d clips and %d captions to %s (%d bad records skipped, %d sentences without "
                 "words left out)", split, counts["clips"], counts["captions"], out, bad.skipped, no_words)
    return dict(counts, missing=len(found.missing), listed=len(urls), skipped=bad.skipped)
