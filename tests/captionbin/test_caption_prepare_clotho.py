"""Tests of caption_prepare_clotho / captionlib.corpora.clotho and egs/clotho/local/{data,download}.sh.

Real data: the 26-clip Clotho subset (official layout), the 2-s fixture clips and the
full official caption CSVs (for rows with parentheses, quotes and commas).
"""

import csv
import io
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from captionbin import caption_prepare_clotho
from captionlib.corpora.clotho import ClothoPrepError, prepare_clotho
from captionlib.io.datadir import read_scp, read_spk2utt, read_text, read_utt2spk

REPO = Path(__file__).resolve().parents[2]
DATA = Path("/work/shared/data")
SUBSET = DATA / "clotho_subset"
FIXTURE = DATA / "clotho_fixture"
FULL = DATA / "clotho_captions_v2.1"
FIX_WAV = FIXTURE / "validation" / "Whistling.wav"
HEADER = "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\n"


def _official_row(split, name):
    """The verbatim CSV text of the row of ``name`` in the full official CSV (plus its cells)."""
    text = (FULL / f"clotho_captions_{split}.csv").read_text(encoding="utf-8")
    for line in text.splitlines(keepends=True):
        if line.startswith(name + ","):
            return line, next(csv.reader(io.StringIO(line)))
    raise AssertionError(f"{name} not in the official {split} CSV")


def _make_root(tmp_path, split, rows, audio):
    """A Clotho-layout root: ``rows`` = CSV lines (after the header), ``audio`` = {name: src or bytes}."""
    root = tmp_path / "clotho"
    (root / split).mkdir(parents=True, exist_ok=True)
    (root / f"clotho_captions_{split}.csv").write_text(HEADER + "".join(rows), encoding="utf-8")
    for name, src in audio.items():
        if isinstance(src, bytes):
            (root / split / name).write_bytes(src)
        else:
            shutil.copy(src, root / split / name)
    return root


def _good(name, cap="a dog barks"):
    return f"{name},{cap} 1,{cap} 2,{cap} 3,{cap} 4,{cap} 5\n"


def _is_c_sorted(keys):
    return [k.encode() for k in keys] == sorted(k.encode() for k in keys)


def test_get_parser_main_without_args_and_print_config():
    assert caption_prepare_clotho.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_prepare_clotho.main([])
    assert e.value.code != 0
    out = subprocess.run(
        [sys.executable, "-m", "captionbin.caption_prepare_clotho", "--print_config"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert yaml.safe_load(out)["skip_bad"] is False


def test_subset_all_splits(tmp_path):
    out = {}
    for split, nclips in [("development", 1), ("validation", 16), ("evaluation", 9)]:
        d = tmp_path / "data" / split
        caption_prepare_clotho.main(["--clotho_root", str(SUBSET), "--split", split, "--output_dir", str(d)])
        wav = read_scp(d / "wav.scp")
        text = read_text(d / "text")
        u2s = read_utt2spk(d / "utt2spk")
        s2u = read_spk2utt(d / "spk2utt")
        names = read_scp(d / "aud2name")
        dur = read_scp(d / "reco2dur")
        assert len(wav) == nclips and len(text) == 5 * nclips
        for f in ("wav.scp", "text", "utt2spk", "spk2utt", "aud2name", "reco2dur"):
            keys = [line.split(" ", 1)[0] for line in (d / f).read_text(encoding="utf-8").splitlines()]
            assert _is_c_sorted(keys), f
        assert set(wav) == set(s2u) == set(names) == set(dur) == set(u2s.values())
        for cid, utts in s2u.items():
            assert utts == [f"{cid}-{k}" for k in range(1, 6)]
            assert os.path.isabs(wav[cid]) and os.path.isfile(wav[cid])
            assert Path(wav[cid]).name == names[cid]
            assert float(dur[cid]) == pytest.approx(sf.info(wav[cid]).duration, abs=5e-4)
        # ids follow the CSV row index
        rows = list(csv.reader(open(SUBSET / f"clotho_captions_{split}.csv", newline="", encoding="utf-8")))[1:]
        for i, row in enumerate(rows, start=1):
            cid = f"clotho-{split}-{i:05d}"
            assert names[cid] == row[0]
            assert [text[f"{cid}-{k}"] for k in range(1, 6)] == [" ".join(c.split()) for c in row[1:]]
        out[split] = (names, text)

    # quoted captions with commas, and a name with a double space, survive
    vnames, vtext = out["validation"]
    wid = next(c for c, n in vnames.items() if n == "Whistling.wav")
    assert vtext[f"{wid}-1"] == "Talking and soft whistling, the whistling then gets louder."
    assert "wind in tree  white birch 01.wav" in vnames.values()


def test_same_file_name_in_two_splits_gets_two_ids(tmp_path):
    # Official v2.1: the pug clip is in validation AND evaluation with different captions.
    # The subset ships its audio under evaluation/ only; reuse it for validation/ here.
    pug = "01 A pug struggles to breathe 1_14_2008.wav"
    out = {}
    for split in ("validation", "evaluation"):
        line, cells = _official_row(split, pug)
        other, _ = _official_row(split, "Whistling.wav" if split == "validation" else "bird-twitter-car.wav")
        root = _make_root(tmp_path / split, split, [other, line], {pug: SUBSET / "evaluation" / pug})
        shutil.copy(FIX_WAV, root / split / next(csv.reader(io.StringIO(other)))[0])
        prepare_clotho(root, split, tmp_path / "data" / split)
        names = read_scp(tmp_path / "data" / split / "aud2name")
        text = read_text(tmp_path / "data" / split / "text")
        cid = f"clotho-{split}-00002"
        assert names[cid] == pug
        assert [text[f"{cid}-{k}"] for k in range(1, 6)] == [" ".join(c.split()) for c in cells[1:]]
        out[split] = [text[f"{cid}-{k}"] for k in range(1, 6)]
    assert out["validation"] != out["evaluation"]


def test_parentheses_and_official_rows(tmp_path):
    name = "Bus(Drive_Reverse)_1-2.wav"
    line, cells = _official_row("validation", name)
    line2, cells2 = _official_row("validation", "Whistling.wav")
    root = _make_root(tmp_path, "validation", [line2, line], {name: FIX_WAV, "Whistling.wav": FIX_WAV})
    stats = prepare_clotho(root, "validation", tmp_path / "d")
    assert stats == {"clips": 2, "captions": 10, "skipped": 0}
    names = read_scp(tmp_path / "d" / "aud2name")
    assert names == {"clotho-validation-00001": "Whistling.wav", "clotho-validation-00002": name}
    assert read_scp(tmp_path / "d" / "wav.scp")["clotho-validation-00002"] == str(root / "validation" / name)
    text = read_text(tmp_path / "d" / "text")
    assert [text[f"clotho-validation-00002-{k}"] for k in range(1, 6)] == cells[1:]
    assert "," in text["clotho-validation-00002-3"]  # a quoted caption with commas
    assert read_scp(tmp_path / "d" / "reco2dur")["clotho-validation-00002"] == "2.000"


def test_crlf_and_multiline_cells_keep_line_numbers(tmp_path):
    # the official dev/val CSVs on Zenodo use CRLF; a quoted cell may span lines
    rows = [
        _good("a.wav").replace("\n", "\r\n"),
        'b.wav,"two\r\nlines",c2,c3,c4,c5\r\n',
        "c.wav,x,,y,z,w\r\n",
    ]
    root = _make_root(tmp_path, "validation", rows, {"a.wav": FIX_WAV, "b.wav": FIX_WAV, "c.wav": FIX_WAV})
    csv_path = root / "clotho_captions_validation.csv"
    with pytest.raises(ClothoPrepError) as e:
        prepare_clotho(root, "validation", tmp_path / "d")
    # the rows: header=1, a=2, b=3-4, c=5
    assert f"{csv_path}:5: bad caption cell(s) for 'c.wav': caption_2: empty caption" in str(e.value)
    prepare_clotho(root, "validation", tmp_path / "d", skip_bad=True)
    text = read_text(tmp_path / "d" / "text")
    assert text["clotho-validation-00002-1"] == "two lines"  # whitespace runs collapsed
    assert text["clotho-validation-00001-1"] == "a dog barks 1"


def _bad_case(tmp_path, case):
    """Root whose row 2 (line 3) is bad in the way ``case`` says; rows 1 and 3 are good."""
    audio = {"good one.wav": FIX_WAV, "good (3).wav": FIX_WAV}
    bad_row = _good("bad clip.wav")
    if case == "empty_caption":
        bad_row = 'bad clip.wav,x,y,"  ",z,w\n'
        audio["bad clip.wav"] = FIX_WAV
    elif case == "punctuation_caption":
        bad_row = 'bad clip.wav,x,y,z,"... !?",w\n'
        audio["bad clip.wav"] = FIX_WAV
    elif case == "nul_caption":  # a NUL would split the word for the cleaner, not for the PTB tokenizer
        bad_row = 'bad clip.wav,x,y,z,w,"a do\x00g barks"\n'
        audio["bad clip.wav"] = FIX_WAV
    elif case == "columns":
        bad_row = "bad clip.wav,x,y,z,w\n"
        audio["bad clip.wav"] = FIX_WAV
    elif case == "duplicate":
        bad_row = _good("good one.wav", "again")
    elif case == "missing_audio":
        pass
    elif case == "unreadable_audio":
        audio["bad clip.wav"] = b"RIFF\x00\x00garbage, not a wav file" * 4
    elif case == "empty_audio":
        buf = io.BytesIO()
        sf.write(buf, np.zeros(0, np.int16), 44100, format="WAV", subtype="PCM_16")
        audio["bad clip.wav"] = buf.getvalue()
    rows = [_good("good one.wav"), bad_row, _good("good (3).wav")]
    return _make_root(tmp_path, "evaluation", rows, audio)


BAD_CASES = {
    "empty_caption": "bad caption cell(s) for 'bad clip.wav': caption_3: empty caption",
    "punctuation_caption": "bad caption cell(s) for 'bad clip.wav': caption_4: caption has no words after cleaning",
    "nul_caption": "caption_5: caption has a control character U+0000 at column 5: 'a do\\x00g barks'",
    "columns": "expected 6 columns, got 5",
    "duplicate": "duplicate file name 'good one.wav' (first on line 2)",
    "missing_audio": "audio file not found",
    "unreadable_audio": "unreadable audio",
    "empty_audio": "empty audio (0 samples)",
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_names_csv_line_and_skip_bad(tmp_path, case, caplog):
    root = _bad_case(tmp_path, case)
    csv_path = root / "clotho_captions_evaluation.csv"
    with pytest.raises(ClothoPrepError) as e:
        prepare_clotho(root, "evaluation", tmp_path / "d")
    msg = str(e.value)
    assert msg.startswith(f"{csv_path}:3: ") and BAD_CASES[case] in msg
    if case in ("missing_audio", "unreadable_audio", "empty_audio"):
        assert str(root / "evaluation" / "bad clip.wav") in msg
    assert not (tmp_path / "d").exists()  # nothing written on failure

    with caplog.at_level(logging.WARNING):
        stats = prepare_clotho(root, "evaluation", tmp_path / "d", skip_bad=True)
    assert stats == {"clips": 2, "captions": 10, "skipped": 1}
    assert any(f"{csv_path}:3:" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    # the good rows keep their row-index ids
    assert read_scp(tmp_path / "d" / "aud2name") == {
        "clotho-evaluation-00001": "good one.wav",
        "clotho-evaluation-00003": "good (3).wav",
    }


def test_binary_exits_nonzero_with_message(tmp_path):
    root = _bad_case(tmp_path, "missing_audio")
    cmd = [sys.executable, "-m", "captionbin.caption_prepare_clotho", "--clotho_root", str(root)]
    cmd += ["--split", "evaluation", "--output_dir", str(tmp_path / "d")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 1
    assert f"{root}/clotho_captions_evaluation.csv:3: audio file not found" in p.stderr
    p = subprocess.run(cmd + ["--skip_bad", "true"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "wrote 2 clips and 10 captions" in p.stderr


def test_fatal_errors(tmp_path):
    root = _make_root(tmp_path, "validation", [_good("a.wav")], {"a.wav": FIX_WAV})
    with pytest.raises(ClothoPrepError, match="clotho_captions_evaluation.csv: caption CSV not found"):
        prepare_clotho(root, "evaluation", tmp_path / "d")
    with pytest.raises(ClothoPrepError, match="unknown Clotho split"):
        prepare_clotho(root, "train", tmp_path / "d")
    (root / "clotho_captions_validation.csv").write_text("name,c1\n" + _good("a.wav"))
    with pytest.raises(ClothoPrepError, match=r"clotho_captions_validation.csv:1: expected header"):
        prepare_clotho(root, "validation", tmp_path / "d", skip_bad=True)
    (root / "clotho_captions_validation.csv").write_text(HEADER + "a.wav,x,y,z,w,v\n" + 'b.wav,"unterminated\n')
    with pytest.raises(ClothoPrepError, match=r"clotho_captions_validation.csv:3: CSV syntax error"):
        prepare_clotho(root, "validation", tmp_path / "d")
    (root / "clotho_captions_validation.csv").write_bytes(HEADER.encode() + b"a.wav,\xff,y,z,w,v\n")
    with pytest.raises(ClothoPrepError, match=r"clotho_captions_validation.csv:2: not valid UTF-8"):
        prepare_clotho(root, "validation", tmp_path / "d")
    (root / "clotho_captions_validation.csv").write_text(HEADER + _good("missing.wav"))
    with pytest.raises(ClothoPrepError, match="no usable clip"):
        prepare_clotho(root, "validation", tmp_path / "d", skip_bad=True)


# ---------------------------------------------------------------- egs/clotho/local/*.sh


def _recipe_dir(tmp_path):
    """A scratch recipe dir with the repo's utils/ and local/ (no writes into egs/)."""
    if not (REPO / "utils" / "parse_options.sh").is_file():
        pytest.skip("utils/parse_options.sh not available")
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "utils").symlink_to(REPO / "utils")
    (rec / "local").symlink_to(REPO / "egs" / "clotho" / "local")
    return rec


def _env(extra_path=None):
    env = dict(os.environ, LC_ALL="C", python=sys.executable)
    env["PATH"] = os.pathsep.join(filter(None, [extra_path, os.path.dirname(sys.executable), env["PATH"]]))
    return env


def test_data_sh_on_fixture(tmp_path):
    rec = _recipe_dir(tmp_path)
    if not (REPO / "utils" / "validate_data_dir.sh").is_file():
        pytest.skip("utils/validate_data_dir.sh not available")
    shutil.copytree(FIXTURE, rec / "fixture")
    p = subprocess.run(
        ["local/data.sh", "--clotho_root", "fixture", "--splits", "validation evaluation"],
        cwd=rec,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    wav = read_scp(rec / "data" / "validation" / "wav.scp")
    assert len(wav) == 2 and all(v.startswith(str(rec / "fixture") + "/") for v in wav.values())
    assert not (rec / "data" / "development").exists()
    p = subprocess.run(["local/data.sh"], cwd=rec, env=_env(), capture_output=True, text=True)
    assert p.returncode != 0 and "--clotho_root is required" in p.stdout + p.stderr


def test_download_sh_present_root_and_offline(tmp_path):
    rec = _recipe_dir(tmp_path)
    p = subprocess.run(
        ["local/download.sh", "--clotho_root", str(FIXTURE)], cwd=rec, env=_env(), capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "already in" in p.stdout and "nothing to download" in p.stdout
    # unreachable server (a closed local port; nothing leaves this machine), with a stub 7z
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "7z").write_text("#!/bin/sh\nexit 0\n")
    (stub / "7z").chmod(0o755)
    p = subprocess.run(
        ["local/download.sh", "--clotho_root", str(tmp_path / "dl"), "--base_url", "http://127.0.0.1:9/files"],
        cwd=rec,
        env=_env(str(stub)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "cannot reach" in out and "Download Clotho v2.1 by hand" in out and "--clotho_root" in out
    # a directory with other things in it (a wrong --clotho_root, another layout) is not downloaded into
    other = tmp_path / "other"
    (other / "clotho_audio_development").mkdir(parents=True)
    (other / "clotho_captions_development.csv").write_text("file_name\n")
    p = subprocess.run(["local/download.sh", "--clotho_root", str(other), "--base_url", "http://127.0.0.1:9/files"],
                       cwd=rec, env=_env(str(stub)), capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 1 and f"{other} lacks Clotho v2.1's development validation evaluation" in out, out
    assert "holds other files (clotho_audio_development)" in out and "cannot reach" not in out


def test_id_prefix(tmp_path):
    d = tmp_path / "data"
    caption_prepare_clotho.main(["--clotho_root", str(SUBSET), "--split", "evaluation", "--output_dir", str(d),
                                 "--id_prefix", "soundscapes"])
    assert all(k.startswith("soundscapes-evaluation-") for k in read_scp(d / "wav.scp"))
    with pytest.raises(ClothoPrepError, match="id_prefix"):
        prepare_clotho(SUBSET, "evaluation", tmp_path / "x", id_prefix="a b")
