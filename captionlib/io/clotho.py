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
be decodable by libsndfile and hold at least one sample; ``reco2dur`` is
``frames / sample_rate`` with 3 decimals.
"""

import logging
import os
from typing import Dict

from captionlib.io.datadir import PathLike, read_csv_rows, utt2spk_to_spk2utt, write_scp
from captionlib.text.cleaner import clean_words

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
            missing, unreadable or empty (0-sample) audio file. Messages name the CSV
            file and line (``<csv>:<line>: ...``), plus the audio path where relevant.
            Also raised if no clip is left.
    """
    from captionlib.audio.io import audio_info

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

    wav_scp: Dict[str, str] = {}
    text: Dict[str, str] = {}
    utt2spk: Dict[str, str] = {}
    aud2name: Dict[str, str] = {}
    reco2dur: Dict[str, str] = {}
    name_line: Dict[str, int] = {}
    skipped = 0

    def bad(msg: str) -> None:
        nonlocal skipped
        if not skip_bad:
            raise ClothoPrepError(msg)
        logging.warning("skipping: %s", msg)
        skipped += 1

    for index, (line, cells) in enumerate(rows, start=1):
        where = f"{csv_path}:{line}"
        if len(cells) != len(HEADER):
            bad(f"{where}: expected {len(HEADER)} columns, got {len(cells)}")
            continue
        name = cells[0]
        if name.strip() == "" or "/" in name or "\\" in name or name in (".", ".."):
            bad(f"{where}: invalid file name {name!r}")
            continue
        captions = [" ".join(c.split()) for c in cells[1:]]
        empty = [HEADER[k + 1] for k, c in enumerate(captions) if not c]
        if empty:
            bad(f"{where}: empty caption cell(s) {', '.join(empty)} for {name!r}")
            continue
        # a caption of punctuation only would be an empty reference to the scorer
        no_words = [HEADER[k + 1] for k, c in enumerate(captions) if not clean_words(c)]
        if no_words:
            bad(f"{where}: caption cell(s) {', '.join(no_words)} for {name!r} have no words after cleaning "
                f"(punctuation only): {', '.join(repr(captions[HEADER.index(h) - 1]) for h in no_words)}")
            continue
        if name in name_line:
            bad(f"{where}: duplicate file name {name!r} (first on line {name_line[name]})")
            continue
        name_line[name] = line
        audio_path = os.path.join(audio_dir, name)
        if not os.path.isfile(audio_path):
            bad(f"{where}: audio file not found: {audio_path}")
            continue
        try:
            info = audio_info(audio_path)
        except (ValueError, OSError) as e:
            bad(f"{where}: unreadable audio {audio_path}: {e}")
            continue
        if info.frames <= 0:
            bad(f"{where}: empty audio (0 samples): {audio_path}")
            continue
        cid = clip_id(split, index, id_prefix)
        wav_scp[cid] = audio_path
        aud2name[cid] = name
        reco2dur[cid] = f"{info.duration:.3f}"
        for k, caption in enumerate(captions, start=1):
            utt = f"{cid}-{k}"
            text[utt] = caption
            utt2spk[utt] = cid

    if not wav_scp:
        raise ClothoPrepError(f"{csv_path}: no usable clip ({len(rows)} rows, {skipped} skipped)")

    out = os.fspath(output_dir)
    os.makedirs(out, exist_ok=True)
    write_scp(os.path.join(out, "wav.scp"), wav_scp)
    write_scp(os.path.join(out, "text"), text)
    write_scp(os.path.join(out, "utt2spk"), utt2spk)
    write_scp(os.path.join(out, "spk2utt"), utt2spk_to_spk2utt(utt2spk))
    write_scp(os.path.join(out, "aud2name"), aud2name)
    write_scp(os.path.join(out, "reco2dur"), reco2dur)
    logging.info(
        "Clotho %s: wrote %d clips and %d captions to %s (%d bad rows skipped)",
        split,
        len(wav_scp),
        len(text),
        out,
        skipped,
    )
    return {"clips": len(wav_scp), "captions": len(text), "skipped": skipped}
