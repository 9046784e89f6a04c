"""captionlib.corpora.msvd on the committed mini MSVD fixture and on malformed CSV/mapping files."""

import csv
import logging
import os
from pathlib import Path

import pytest

from captionlib.corpora.msvd import HEADER, MsvdPrepError, clip_id, prepare_msvd, read_mapping, split_range
from captionlib.io.datadir import read_scp, read_spk2utt, read_text, read_utt2spk

FIXTURE = Path(__file__).resolve().parents[3] / "egs" / "mini_msvd" / "msvd_fixture"
CSV = FIXTURE / "MSR Video Description Corpus.csv"
MAPPING = FIXTURE / "youtube_mapping.txt"
SIZES = (5, 1, 2)


def _c_sorted(path):
    keys = [line.split(" ", 1)[0].encode() for line in path.read_text(encoding="utf-8").splitlines()]
    return keys == sorted(keys)


def _english_rows():
    with open(CSV, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["Language"] for r in rows} > {"English"}  # the fixture has rows to filter out
    return [r for r in rows if r["Language"] == "English"]


def test_split_range():
    assert split_range("train", (1200, 100, 670)) == (1, 1200)
    assert split_range("val", (1200, 100, 670)) == (1201, 1300)
    assert split_range("test", (1200, 100, 670)) == (1301, 1970)
    with pytest.raises(MsvdPrepError):
        split_range("test", (1, 2))


@pytest.mark.parametrize("split,vids", [("train", range(1, 6)), ("val", [6]), ("test", [7, 8])])
def test_fixture_splits(tmp_path, split, vids):
    out = tmp_path / split
    stats = prepare_msvd(CSV, MAPPING, split, out, video_root=FIXTURE, split_sizes=SIZES)
    mapping = {n: name for name, (n, _) in read_mapping(MAPPING).items()}
    english = _english_rows()
    text, s2u, u2s = read_text(out / "text"), read_spk2utt(out / "spk2utt"), read_utt2spk(out / "utt2spk")
    clip2id, scp = read_scp(out / "clip2id"), read_scp(out / "video.scp")
    assert sorted(clip2id) == [clip_id(n) for n in vids] == [f"msvd-vid{n:04d}" for n in vids]
    assert set(scp) == set(s2u) == set(u2s.values()) == set(clip2id)
    for f in ("text", "utt2spk", "spk2utt", "clip2id", "video.scp"):
        assert _c_sorted(out / f), f
    for n in vids:
        cid, name = clip_id(n), mapping[n]
        assert clip2id[cid] == name
        refs = [r["Description"] for r in english if f"{r['VideoID']}_{r['Start']}_{r['End']}" == name]
        assert len(refs) == 5
        assert [text[u] for u in s2u[cid]] == refs  # CSV order, non-English rows gone
        assert s2u[cid] == [f"{cid}-{k:02d}" for k in range(1, 6)]
        assert os.path.isabs(scp[cid]) and os.path.isfile(scp[cid])
        assert scp[cid] == str(FIXTURE / "YouTubeClips" / f"{name}.avi")
    assert stats == {"clips": len(vids), "captions": 5 * len(vids), "skipped": 0}
    if split == "train":  # the quoted comma survives
        assert text["msvd-vid0002-04"] == "The camera pans across a cup of coffee, a saucer and a spoon."
    assert not any("caméra" in t or "Katze" in t for t in text.values())


def test_videos_directly_in_root_and_no_root(tmp_path):
    out = tmp_path / "d"
    prepare_msvd(CSV, MAPPING, "val", out, video_root=FIXTURE / "YouTubeClips", split_sizes=SIZES)
    assert read_scp(out / "video.scp") == {"msvd-vid0006": str(FIXTURE / "YouTubeClips" / "Rt0_LaunQ4z_30_32.avi")}
    prepare_msvd(CSV, MAPPING, "val", out, split_sizes=SIZES)
    assert not (out / "video.scp").exists() and (out / "clip2id").is_file()


ROW = "Abc-def_123,4,9,17,clean,20,English,A dog is running.\n"


def _corpus(tmp_path, rows, mapping=("Abc-def_123_4_9 vid1",), video=b"avi"):
    d = tmp_path / "msvd"
    (d / "YouTubeClips").mkdir(parents=True, exist_ok=True)
    (d / "corpus.csv").write_text(",".join(HEADER) + "\n" + "".join(rows), encoding="utf-8")
    (d / "mapping.txt").write_text("".join(m + "\n" for m in mapping), encoding="utf-8")
    if video is not None:
        (d / "YouTubeClips" / "Abc-def_123_4_9.avi").write_bytes(video)
    return d


@pytest.mark.parametrize("bad_row,fragment", [
    ("Abc-def_123,4,9,17,clean,20,English,A dog, running\n", ":3: expected 8 columns, got 9"),
    ("Abc-def_123,4,9,17,clean,20,English\n", ":3: expected 8 columns, got 7"),
    ("Abc-def_123,4.5,9,17,clean,20,English,A dog is running.\n", ":3: VideoID must be non-empty and Start/End"),
    ("Abc-def_123,4,x,17,clean,20,English,A dog is running.\n", ":3: VideoID must be non-empty and Start/End"),
])
def test_malformed_rows_name_file_and_line(tmp_path, caplog, bad_row, fragment):
    d = _corpus(tmp_path, [ROW, bad_row, ROW])
    with pytest.raises(MsvdPrepError) as e:
        prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", split_sizes=(1, 0, 0))
    assert str(e.value).startswith(f"{d / 'corpus.csv'}{fragment}")
    with caplog.at_level(logging.WARNING):
        stats = prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", split_sizes=(1, 0, 0),
                             skip_bad=True)
    assert fragment in caplog.text
    assert stats == {"clips": 1, "captions": 2, "skipped": 1}


@pytest.mark.parametrize("no_text,fragment", [
    ("Abc-def_123,4,9,17,clean,20,English,\n", "corpus.csv:6: empty caption"),  # line 6: the quoted newline counts
    ('Abc-def_123,4,9,17,clean,20,English,"  ?!  "\n', "corpus.csv:6: caption has no words"),
])
def test_quoted_newline_non_english_no_description_and_line_numbers(tmp_path, caplog, no_text, fragment):
    # English rows without a description (the released corpus has some) are a logged skip
    # even without skip_bad; non-English rows are ignored
    rows = [ROW, 'Abc-def_123,4,9,17,clean,20,English,"A dog\nis jumping."\n',
            "Abc-def_123,4,9,17,clean,20,French,\n", no_text]
    d = _corpus(tmp_path, rows)
    with caplog.at_level(logging.WARNING):
        stats = prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", split_sizes=(1, 0, 0))
    assert fragment in caplog.text and stats["skipped"] == 0
    assert read_text(tmp_path / "o" / "text") == {"msvd-vid0001-01": "A dog is running.",
                                                  "msvd-vid0001-02": "A dog is jumping."}


@pytest.mark.parametrize("case,fragment", [
    ("no_english", "mapping.txt:2: clip Other_xxxxx_1_2 (vid2) has no English description"),
    ("missing_video", "mapping.txt:1: media file not found"),
    ("empty_video", "mapping.txt:1: empty media file (0 bytes)"),
])
def test_bad_clips_name_mapping_line(tmp_path, caplog, case, fragment):
    d = _corpus(tmp_path, [ROW, ROW.replace(",English,", ",German,").replace("Abc-def_123,4,9", "Other_xxxxx,1,2")],
                mapping=("Abc-def_123_4_9 vid1", "Other_xxxxx_1_2 vid2"),
                video={"missing_video": None, "empty_video": b""}.get(case, b"avi"))
    kw = dict(split_sizes=(2, 0, 0), video_root=d if case != "no_english" else None)
    if case != "no_english":  # only the first clip is in the split
        kw["split_sizes"] = (1, 1, 0)
    with pytest.raises(MsvdPrepError) as e:
        prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", **kw)
    assert fragment in str(e.value) and str(d / "mapping.txt") in str(e.value)
    if case == "no_english":
        with caplog.at_level(logging.WARNING):
            stats = prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", skip_bad=True, **kw)
        assert fragment in caplog.text and stats["clips"] == 1
    else:  # the only clip skipped: nothing left
        with pytest.raises(MsvdPrepError, match="no usable clip"):
            prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", skip_bad=True, **kw)


@pytest.mark.parametrize("lines,fragment", [
    (("Abc-def_123_4_9 vid1", "Abc-def_123_4_9 vid2"), "mapping.txt:2: clip Abc-def_123_4_9 repeated"),
    (("Abc-def_123_4_9 vid1", "Other_1_2 vid1"), "mapping.txt:2: vid1 repeated"),
    (("Abc-def_123_4_9 video1",), "mapping.txt:1: expected '<VideoID>_<Start>_<End> vid<N>'"),
])
def test_bad_mapping(tmp_path, lines, fragment):
    d = _corpus(tmp_path, [ROW], mapping=lines)
    with pytest.raises(MsvdPrepError, match=fragment):
        prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o", split_sizes=(1, 0, 0),
                     skip_bad=True)


def test_bad_header_and_split(tmp_path):
    d = _corpus(tmp_path, [ROW])
    (d / "corpus.csv").write_text("VideoID,Start,End,Description\n" + ROW, encoding="utf-8")
    with pytest.raises(MsvdPrepError, match=r"corpus\.csv:1: expected header VideoID,Start,End,WorkerID"):
        prepare_msvd(d / "corpus.csv", d / "mapping.txt", "train", tmp_path / "o")
    with pytest.raises(MsvdPrepError, match="unknown split"):
        prepare_msvd(d / "corpus.csv", d / "mapping.txt", "dev", tmp_path / "o")
