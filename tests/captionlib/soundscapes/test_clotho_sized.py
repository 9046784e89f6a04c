"""The Clotho-sized benchmark corpus (captionlib.soundscapes.clotho_sized, caption_make_clotho_sized)."""

import csv
import json
import os
from pathlib import Path

import pytest
import soundfile as sf

from captionbin import caption_make_clotho_sized
from captionlib.corpora.clotho import prepare_clotho
from captionlib.soundscapes.clotho_sized import (
    CLOTHO_V21_CLIPS,
    ClothoSizedOptions,
    make_clotho_sized_corpus,
    read_caption_rows,
    split_sizes,
)

DATA = Path(__file__).resolve().parents[3].parent / "shared/data"
LIBRARY, CAPTIONS = DATA / "event_library", DATA / "clotho_captions_v2.1"
pytestmark = pytest.mark.skipif(
    not (LIBRARY / "events.csv").is_file() or not (CAPTIONS / "clotho_captions_development.csv").is_file(),
    reason=f"{LIBRARY} or {CAPTIONS} not found",
)
# 6 / 2 / 2 clips of 1-2 s
TINY = ClothoSizedOptions(seed=3, scale=0.0015, min_duration_s=1.0, max_duration_s=2.0)
SIZES = {"development": 6, "validation": 2, "evaluation": 2}


def _official_rows(split, n):
    with open(CAPTIONS / f"clotho_captions_{split}.csv", newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[1 : n + 1]


def _files(root: Path):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_split_sizes():
    assert split_sizes(1.0) == CLOTHO_V21_CLIPS == {"development": 3839, "validation": 1045, "evaluation": 1045}
    assert split_sizes(0.01) == {"development": 38, "validation": 10, "evaluation": 10}
    assert split_sizes(TINY.scale) == SIZES


def test_layout_captions_audio_and_caption_prepare_clotho(tmp_path):
    out = tmp_path / "corpus"
    summary = make_clotho_sized_corpus(LIBRARY, CAPTIONS, out, TINY)
    assert (summary["clips"], summary["written"], summary["skipped"]) == (10, 10, 0)
    assert summary["cpu_s_per_clip"] > 0
    for split, n in SIZES.items():
        with open(out / f"clotho_captions_{split}.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        assert rows[0] == ["file_name"] + [f"caption_{k}" for k in range(1, 6)]
        assert rows[1:] == _official_rows(split, n)  # the real captions, in order
        for row in rows[1:]:
            info = sf.info(str(out / split / row[0]))
            assert (info.samplerate, info.channels, info.subtype, info.format) == (44100, 1, "PCM_16", "WAV")
            assert 1.0 <= info.duration <= 2.0 and round(info.duration * 10, 6).is_integer()
        data = tmp_path / "data" / split
        prepare_clotho(clotho_root=str(out), split=split, output_dir=str(data))
        assert len((data / "wav.scp").read_text().splitlines()) == n
        assert len((data / "text").read_text().splitlines()) == 5 * n
    assert (out / "LICENSE_clotho_captions.txt").read_bytes() == (CAPTIONS / "LICENSE_clotho_captions.txt").read_bytes()
    assert "DO NOT DESCRIBE THE AUDIO" in (out / "README.txt").read_text()
    assert (out / "LICENSES").is_dir()
    info = json.loads((out / "clotho_sized.json").read_text())
    assert info["complete"] and info["clips"] == SIZES and "not learning" in info["note"]


def test_deterministic_any_nj_and_resumes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    make_clotho_sized_corpus(LIBRARY, CAPTIONS, a, TINY, nj=2)
    caption_make_clotho_sized.main([
        "--event_root", str(LIBRARY), "--captions_dir", str(CAPTIONS), "--output_dir", str(b), "--seed", "3",
        "--scale", "0.0015", "--min_duration_s", "1", "--max_duration_s", "2", "--nj", "1"])
    files = _files(a)
    assert len([k for k in files if k.endswith(".wav")]) == 10 and files == _files(b)
    other = make_clotho_sized_corpus(LIBRARY, CAPTIONS, tmp_path / "c", ClothoSizedOptions(
        seed=4, scale=TINY.scale, min_duration_s=1.0, max_duration_s=2.0))
    assert other["written"] == 10 and _files(tmp_path / "c") != files

    # resume: a lost clip and a half-written one of a killed run; the other clips are not rewritten
    name = _official_rows("validation", 1)[0][0]
    (a / "validation" / name).unlink()
    (a / "evaluation" / ".x.wav.partial").write_bytes(b"half")
    kept = {p: p.stat().st_mtime_ns for p in a.rglob("*.wav")}
    summary = make_clotho_sized_corpus(LIBRARY, CAPTIONS, a, TINY)
    assert (summary["written"], summary["skipped"]) == (1, 9)
    assert _files(a) == files
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())


def test_larger_scale_extends_and_first_clips_do_not_change(tmp_path):
    out = tmp_path / "corpus"
    make_clotho_sized_corpus(LIBRARY, CAPTIONS, out, TINY)
    small = _files(out)
    bigger = ClothoSizedOptions(seed=3, scale=0.002, min_duration_s=1.0, max_duration_s=2.0)  # 8 / 2 / 2
    assert make_clotho_sized_corpus(LIBRARY, CAPTIONS, out, bigger)["written"] == 2
    now = _files(out)
    assert all(now[k] == v for k, v in small.items() if k.endswith(".wav"))


def test_refuses_real_clotho_and_changed_options(tmp_path):
    real = tmp_path / "clotho"
    real.mkdir()
    (real / "clotho_captions_development.csv").write_text("file_name\n")
    with pytest.raises(ValueError, match="no clotho_sized.json: not a corpus of this generator"):
        make_clotho_sized_corpus(LIBRARY, CAPTIONS, real, TINY)
    out = tmp_path / "corpus"
    make_clotho_sized_corpus(LIBRARY, CAPTIONS, out, TINY)
    with pytest.raises(ValueError, match="clotho_sized.json: the corpus was made with"):
        make_clotho_sized_corpus(LIBRARY, CAPTIONS, out, ClothoSizedOptions(
            seed=4, scale=TINY.scale, min_duration_s=1.0, max_duration_s=2.0))


def test_bad_options_and_caption_csvs(tmp_path):
    for bad in (ClothoSizedOptions(scale=0.0), ClothoSizedOptions(scale=1.5),
                ClothoSizedOptions(min_duration_s=3.0, max_duration_s=2.0)):
        with pytest.raises(ValueError, match="scale|duration"):
            make_clotho_sized_corpus(LIBRARY, CAPTIONS, tmp_path / "x", bad)
    with pytest.raises(ValueError, match="nj and log_interval"):
        make_clotho_sized_corpus(LIBRARY, CAPTIONS, tmp_path / "x", TINY, nj=0)
    d = tmp_path / "csvs"
    d.mkdir()
    with pytest.raises(FileNotFoundError, match="clotho_captions_development.csv"):
        read_caption_rows(d, "development", 1)
    (d / "clotho_captions_development.csv").write_text("name,caption\n")
    with pytest.raises(ValueError, match=r"clotho_captions_development.csv:1: header"):
        read_caption_rows(d, "development", 1)
    header = "file_name," + ",".join(f"caption_{k}" for k in range(1, 6))
    (d / "clotho_captions_development.csv").write_text(f"{header}\na.wav,1,2,3,4,5\nsub/b.wav,1,2,3,4,5\n")
    with pytest.raises(ValueError, match=r"clotho_captions_development.csv:3: expected a file name"):
        read_caption_rows(d, "development", 2)
    (d / "clotho_captions_development.csv").write_text(f"{header}\na.wav,1,2,3,4,5\na.wav,1,2,3,4,5\n")
    with pytest.raises(ValueError, match=r"clotho_captions_development.csv:3: file name 'a.wav' repeated"):
        read_caption_rows(d, "development", 2)
    (d / "clotho_captions_development.csv").write_text(f"{header}\na.wav,1,2,3,4,5\n")
    with pytest.raises(ValueError, match="1 clips, 5 needed"):
        read_caption_rows(d, "development", 5)
    assert read_caption_rows(d, "development", 1) == [["a.wav", "1", "2", "3", "4", "5"]]


def test_binary_exits_1_with_the_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        caption_make_clotho_sized.main(["--event_root", str(LIBRARY), "--captions_dir", str(tmp_path),
                                        "--output_dir", str(tmp_path / "out"), "--scale", "0.001"])
    assert e.value.code == 1
    assert "LICENSE_clotho_captions.txt: the captions' licence is missing" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out" / "development")
