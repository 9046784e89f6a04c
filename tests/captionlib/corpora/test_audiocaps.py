"""captionlib.corpora.audiocaps on the committed mini AudioCaps fixture and on made-up CSVs/audio folders."""

import csv
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from captionlib.corpora.audiocaps import (
    AudioCapsPrepError,
    audio_names,
    clip_id,
    parse_start_time,
    prepare_audiocaps,
)
from captionlib.io.datadir import read_scp, read_spk2utt, read_text, read_utt2spk

FIXTURE = Path(__file__).resolve().parents[3] / "egs" / "mini_audiocaps" / "audiocaps_fixture"
AUDIO = FIXTURE / "audio"
HEADER = "audiocap_id,youtube_id,start_time,caption\n"
MISSING_CLIP = "audiocaps-mZ9-pQ2rLs7-40"


def _c_sorted(path):
    keys = [line.split(" ", 1)[0].encode() for line in path.read_text(encoding="utf-8").splitlines()]
    return keys == sorted(keys)


def _csv_rows(split):
    with open(FIXTURE / f"{split}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _wav(path, seconds=0.5, fs=16000, channels=1):
    path.parent.mkdir(parents=True, exist_ok=True)
    x = 0.1 * np.sin(np.arange(int(seconds * fs)) * 0.05).astype(np.float32)
    sf.write(path, np.stack([x] * channels, axis=1) if channels > 1 else x, fs)


def _root(tmp_path, split, rows, audio=()):
    """``<tmp>/csv/<split>.csv`` with ``rows`` (lines after the header) and ``<tmp>/audio/<name>`` files."""
    (tmp_path / "csv").mkdir(exist_ok=True)
    (tmp_path / "csv" / f"{split}.csv").write_text(HEADER + "".join(rows), encoding="utf-8")
    (tmp_path / "audio").mkdir(exist_ok=True)
    for name in audio:
        _wav(tmp_path / "audio" / name)
    return tmp_path / "csv", tmp_path / "audio"


def test_ids_and_names():
    assert clip_id("bE9-wz4Hn0c", "20") == "audiocaps-bE9-wz4Hn0c-20"
    assert [parse_start_time(c) for c in ("30", " 30.0 ", "12.5", "0", "-1", "x", "", "nan", "inf", "1e3")] == [
        "30", "30", "12.5", "0", None, None, None, None, None, None]
    # one time, one text: "0.5", ".5" and "0.50" were three clips; float() reads "6_0" as 60
    assert [parse_start_time(c) for c in ("0.5", ".5", "0.50", "12.50", "6_0")] == ["0.5", "0.5", "0.5", "12.5", None]
    names = audio_names("bE9-wz4Hn0c", "20")
    assert names[:2] == ["bE9-wz4Hn0c_20.wav", "bE9-wz4Hn0c_20.flac"] and "YbE9-wz4Hn0c.wav" in names
    assert not any(n.startswith("Y") for n in audio_names("bE9-wz4Hn0c", "20", with_y=False))


@pytest.mark.parametrize("split,nclips,ncaps", [("train", 6, 1), ("val", 2, 5), ("test", 2, 5)])
def test_fixture_splits(tmp_path, split, nclips, ncaps, caplog):
    out = tmp_path / split
    with caplog.at_level(logging.INFO):
        stats = prepare_audiocaps(FIXTURE, AUDIO, split, out, max_missing_fraction=0.2)
    rows = _csv_rows(split)
    text, s2u, u2s = read_text(out / "text"), read_spk2utt(out / "spk2utt"), read_utt2spk(out / "utt2spk")
    scp, clip2id, aud2name = read_scp(out / "wav.scp"), read_scp(out / "clip2id"), read_scp(out / "aud2name")
    reco2dur = read_scp(out / "reco2dur")
    assert len(scp) == nclips and set(scp) == set(s2u) == set(u2s.values()) == set(clip2id) == set(reco2dur)
    for f in ("wav.scp", "text", "utt2spk", "spk2utt", "clip2id", "aud2name", "reco2dur", "missing"):
        assert _c_sorted(out / f), f
    for cid, path in scp.items():
        yid, start = clip2id[cid].rsplit("_", 1)
        assert cid == clip_id(yid, start)
        assert os.path.isabs(path) and os.path.isfile(path) and os.path.basename(path) == aud2name[cid]
        assert aud2name[cid] in (f"{yid}_{start}.{os.path.splitext(path)[1][1:]}", f"Y{yid}.wav")
        refs = [r["caption"] for r in rows if (r["youtube_id"], r["start_time"]) == (yid, start)]
        assert [text[u] for u in s2u[cid]] == refs and len(refs) == ncaps  # rows grouped by clip, CSV order
        assert s2u[cid] == [f"{cid}-{k:02d}" for k in range(1, ncaps + 1)]
        assert abs(float(reco2dur[cid]) - sf.info(path).duration) < 1e-3
    missing = (out / "missing").read_text().splitlines()
    if split == "train":
        assert len(missing) == 1 and missing[0].split()[:3] == [MISSING_CLIP, "mZ9-pQ2rLs7", "40"]
        assert "mZ9-pQ2rLs7_40.wav" in missing[0].split() and "YmZ9-pQ2rLs7.wav" in missing[0].split()
        assert f"1 of 7 clips missing (14.3%): mZ9-pQ2rLs7_40; all listed in {out / 'missing'}" in caplog.text
    else:
        assert missing == [] and f"0 of {nclips} clips missing (0.0%)" in caplog.text
    assert stats == {"clips": nclips, "captions": nclips * ncaps, "missing": len(missing),
                     "listed": nclips + len(missing), "skipped": 0}
    # both namings and several formats are exercised by the fixture
    assert {os.path.splitext(p)[1] for p in scp.values()} <= {".wav", ".flac", ".ogg"}


def test_fixture_covers_both_namings_rates_and_channels(tmp_path):
    names, rates, channels = set(), set(), set()
    for split in ("train", "val", "test"):
        prepare_audiocaps(FIXTURE, AUDIO, split, tmp_path / split, max_missing_fraction=0.2)
        for path in read_scp(tmp_path / split / "wav.scp").values():
            info = sf.info(path)
            names.add(os.path.basename(path).startswith("Y"))
            rates.add(info.samplerate)
            channels.add(info.channels)
    assert names == {True, False} and len(rates) >= 3 and channels == {1, 2}


def test_missing_fraction(tmp_path, caplog):
    rows = [f"{k},aaaaaaaaa{k:02d},30,a dog barks\n" for k in range(1, 11)]
    present = [f"aaaaaaaaa{k:02d}_30.wav" for k in range(1, 10)]  # 1 of 10 missing
    csv_dir, audio = _root(tmp_path, "train", rows, present)
    stats = prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out")  # 10% is within the default 0.1
    assert stats["missing"] == 1 and stats["clips"] == 9
    (audio / "aaaaaaaaa09_30.wav").unlink()
    with pytest.raises(AudioCapsPrepError, match=r"2 of 10 clips missing \(20.0%\).*max_missing_fraction 0.1"):
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out")
    # the list is written before failing, so the user sees which clips
    listed = [line.split()[0] for line in (tmp_path / "out" / "missing").read_text().splitlines()]
    assert listed == ["audiocaps-aaaaaaaaa09-30", "audiocaps-aaaaaaaaa10-30"]
    assert prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out", max_missing_fraction=0.2)["missing"] == 2
    with pytest.raises(AudioCapsPrepError, match="max_missing_fraction must be in"):
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out", max_missing_fraction=1.5)


def test_both_namings_formats_and_split_subfolder(tmp_path):
    rows = [
        "1,aaaaaaaaa01,30,a dog barks\n",       # <id>_<start>.flac
        "2,aaaaaaaaa02,0,a cat meows\n",        # Y<id>.wav
        "3,aaaaaaaaa03,12.5,a bird sings\n",    # <id>_12.5.ogg in audio/val/
        "4,aaaaaaaaa04,30.0,a cow moos\n",      # start 30.0 -> <id>_30.wav
        "5,aaaaaaaaa05,10,rain falls\n",        # two clips of one video: Y<id> would be ambiguous
        "6,aaaaaaaaa05,20,rain falls harder\n",
        "7,aaaaaaaaa01,30,a dog barks twice\n",  # a second caption of clip 1
    ]
    csv_dir, audio = _root(tmp_path, "val", rows)
    _wav(audio / "aaaaaaaaa01_30.flac", fs=22050, channels=2)
    _wav(audio / "Yaaaaaaaaa02.wav")
    _wav(audio / "val" / "aaaaaaaaa03_12.5.ogg", fs=32000)
    _wav(audio / "aaaaaaaaa04_30.wav")
    _wav(audio / "Yaaaaaaaaa05.wav")  # not used for either clip of aaaaaaaaa05
    _wav(audio / "aaaaaaaaa05_20.wav", seconds=1.25)
    out = tmp_path / "out"
    stats = prepare_audiocaps(csv_dir, audio, "val", out, max_missing_fraction=0.5)
    aud2name = read_scp(out / "aud2name")
    assert aud2name == {
        "audiocaps-aaaaaaaaa01-30": "aaaaaaaaa01_30.flac",
        "audiocaps-aaaaaaaaa02-0": "Yaaaaaaaaa02.wav",
        "audiocaps-aaaaaaaaa03-12.5": "aaaaaaaaa03_12.5.ogg",
        "audiocaps-aaaaaaaaa04-30": "aaaaaaaaa04_30.wav",
        "audiocaps-aaaaaaaaa05-20": "aaaaaaaaa05_20.wav",
    }
    assert read_scp(out / "wav.scp")["audiocaps-aaaaaaaaa03-12.5"] == str(audio / "val" / "aaaaaaaaa03_12.5.ogg")
    assert read_scp(out / "reco2dur")["audiocaps-aaaaaaaaa05-20"] == "1.250"
    assert read_spk2utt(out / "spk2utt")["audiocaps-aaaaaaaaa01-30"] == [
        "audiocaps-aaaaaaaaa01-30-01", "audiocaps-aaaaaaaaa01-30-02"]
    missing = (out / "missing").read_text().split()
    assert missing[:3] == ["audiocaps-aaaaaaaaa05-10", "aaaaaaaaa05", "10"]
    assert "Yaaaaaaaaa05.wav" not in missing  # the Y name is not looked for: ambiguous
    assert stats["missing"] == 1 and stats["clips"] == 5


@pytest.mark.parametrize(
    "row,message",
    [
        ("1,aaaaaaaaa01,30\n", "expected 4 columns"),
        ("1,aaaaaaaaa01,30,a dog,barks\n", "expected 4 columns"),
        ("1,aaaaaaaaa01,thirty,a dog barks\n", "start_time must be a number"),
        ("1,aaaaaaaaa01,,a dog barks\n", "start_time must be a number"),
        ("1,aaaaaaaaa01,30,\n", "empty caption"),
        ("1,aaaaaaaaa01,30,\" ... \"\n", "no words after cleaning"),
        ("x,aaaaaaaaa01,30,a dog barks\n", "audiocap_id must be a number"),
        ("1,short,30,a dog barks\n", "youtube_id must be 11 characters"),
        ("1,aaaa aaaa01,30,a dog barks\n", "youtube_id must be 11 characters"),
    ],
)
def test_malformed_row(tmp_path, row, message):
    good = "7,bbbbbbbbb01,0,a cat meows\n"
    csv_dir, audio = _root(tmp_path, "test", [good, row], ["bbbbbbbbb01_0.wav", "aaaaaaaaa01_30.wav"])
    csv_path = csv_dir / "test.csv"
    with pytest.raises(AudioCapsPrepError, match=f"^{csv_path}:3: .*{message}"):
        prepare_audiocaps(csv_dir, audio, "test", tmp_path / "out")
    stats = prepare_audiocaps(csv_dir, audio, "test", tmp_path / "out", skip_bad=True)
    assert stats["skipped"] == 1 and stats["clips"] == 1
    assert list(read_scp(tmp_path / "out" / "wav.scp")) == ["audiocaps-bbbbbbbbb01-0"]


def test_duplicate_audiocap_id_and_line_numbers_after_quoted_newline(tmp_path):
    rows = ['1,aaaaaaaaa01,30,"a dog\nbarks"\n', "1,aaaaaaaaa02,30,a cat meows\n"]
    csv_dir, audio = _root(tmp_path, "train", rows, ["aaaaaaaaa01_30.wav", "aaaaaaaaa02_30.wav"])
    with pytest.raises(AudioCapsPrepError, match=r"train.csv:4: duplicate audiocap_id 1 \(first on line 2\)"):
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out")
    prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out", skip_bad=True)
    assert read_text(tmp_path / "out" / "text") == {"audiocaps-aaaaaaaaa01-30-01": "a dog barks"}


@pytest.mark.parametrize("content,message", [(b"", "empty media file"), (b"not audio at all", "cannot read audio")])
def test_bad_audio(tmp_path, content, message):
    rows = ["1,aaaaaaaaa01,30,a dog barks\n", "2,aaaaaaaaa02,30,a cat meows\n"]
    csv_dir, audio = _root(tmp_path, "train", rows, ["aaaaaaaaa01_30.wav"])
    bad = audio / "aaaaaaaaa02_30.wav"
    bad.write_bytes(content)
    with pytest.raises(AudioCapsPrepError, match=f"{message}.*{bad}|{bad}.*{message}"):
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out")
    # skipped, a broken download is a missing clip: listed, and counted against max_missing_fraction
    # (broken files escaped the fraction: 0 of 7 missing, 5 of 7 written)
    with pytest.raises(AudioCapsPrepError, match=r"1 of 2 clips missing \(50.0%\): aaaaaaaaa02_30"):
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out", skip_bad=True)
    stats = prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out", skip_bad=True, max_missing_fraction=0.5)
    assert (stats["clips"], stats["skipped"], stats["missing"]) == (1, 1, 1)
    assert "audiocaps-aaaaaaaaa02-30" in (tmp_path / "out" / "missing").read_text()


def test_zero_sample_audio(tmp_path):
    csv_dir, audio = _root(tmp_path, "train", ["1,aaaaaaaaa01,30,a dog barks\n"])
    sf.write(audio / "aaaaaaaaa01_30.wav", np.zeros(0, np.float32), 16000)
    with pytest.raises(AudioCapsPrepError, match="empty audio .0 samples"):
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out")


def test_fatal_inputs(tmp_path):
    csv_dir, audio = _root(tmp_path, "train", ["1,aaaaaaaaa01,30,a dog barks\n"], ["aaaaaaaaa01_30.wav"])
    with pytest.raises(AudioCapsPrepError, match="unknown AudioCaps split 'dev'"):
        prepare_audiocaps(csv_dir, audio, "dev", tmp_path / "out")
    with pytest.raises(AudioCapsPrepError, match="val.csv: AudioCaps CSV not found"):
        prepare_audiocaps(csv_dir, audio, "val", tmp_path / "out")
    with pytest.raises(AudioCapsPrepError, match="audio folder not found"):
        prepare_audiocaps(csv_dir, tmp_path / "nope", "train", tmp_path / "out")
    (csv_dir / "val.csv").write_text("youtube_id,caption\nx,y\n")
    with pytest.raises(AudioCapsPrepError, match="val.csv:1: expected header audiocap_id,youtube_id"):
        prepare_audiocaps(csv_dir, audio, "val", tmp_path / "out")
    (csv_dir / "test.csv").write_text(HEADER + "1,aaaaaaaaa01,30,\n")
    with pytest.raises(AudioCapsPrepError, match="no usable clip"):
        prepare_audiocaps(csv_dir, audio, "test", tmp_path / "out", skip_bad=True)
    shutil.rmtree(audio)
    audio.mkdir()
    with pytest.raises(AudioCapsPrepError, match="1 of 1 clips missing"):  # all missing
        prepare_audiocaps(csv_dir, audio, "train", tmp_path / "out", max_missing_fraction=0.5)
