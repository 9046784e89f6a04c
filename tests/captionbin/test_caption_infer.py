"""caption_infer: audio at 8-48 kHz, mono/stereo, FLAC/OGG/MP3 and (PyAV) M4A, a directory,
bad files and --skip_bad exit codes, TSV and JSON output."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from packed_models import CLIPS, make_packed, write_variant, write_with_pyav
from captionbin.caption_infer import get_parser, main
from captionlib.audio.io import load_audio
from captionlib.pretrained import PretrainedCaptioner

RATES = [8000, 16000, 22050, 44100, 48000]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A packed model and a directory of the real clips in many formats."""
    tmp = tmp_path_factory.mktemp("infer")
    packed = make_packed(tmp)
    audio = tmp / "audio"
    (audio / "sub").mkdir(parents=True)
    wave, sr = load_audio(CLIPS[0])
    files = []
    for k, rate in enumerate(RATES):
        ext, channels = (".flac", 1) if k % 2 == 0 else (".ogg", 2)
        files.append(write_variant(audio / f"r{rate}{ext}", wave, sr, rate, channels))
        files.append(write_variant(audio / "sub" / f"r{rate}_st{ext}", wave, sr, rate, 3 - channels))
    files.append(write_variant(audio / "c.wav", *load_audio(CLIPS[1]), 44100, 2, subtype="PCM_16"))
    (audio / "notes.txt").write_text("not audio, not listed")
    return tmp, packed, audio, sorted(str(f) for f in files)


def _tsv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    return rows[0], rows[1:]


def test_get_parser_and_usage(setup):
    assert get_parser() is not None
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit):
        main(["--model", str(setup[1])])  # no inputs


def test_directory_tsv_and_json(setup):
    tmp, packed, audio, files = setup
    main(["--model", str(packed), "--output", str(tmp / "out.tsv"), str(audio)])
    header, rows = _tsv(tmp / "out.tsv")
    assert header == ["file", "caption"]
    assert [r[0] for r in rows] == files  # recursive, sorted, only audio extensions
    expected = PretrainedCaptioner.from_pretrained(packed).caption(files)
    assert [r[1] for r in rows] == expected

    main(["--model", str(packed), "--output", str(tmp / "out.json"), "--nbest", "2", "--beam_size", "3", *files[:3]])
    got = json.loads((tmp / "out.json").read_text())
    assert [g["file"] for g in got] == files[:3]
    for g in got:
        assert len(g["nbest"]) == 2 and g["nbest"][0]["score"] >= g["nbest"][1]["score"]
        assert g["nbest"][0]["caption"] == g["caption"]  # beam 3 >= nbest 2: its best is the caption

    main(["--model", str(packed), "--output", str(tmp / "nb.txt"), "--format", "tsv", "--nbest", "2", files[0]])
    header, rows = _tsv(tmp / "nb.txt")
    assert header == ["file", "caption", "caption_1", "score_1", "caption_2", "score_2"]
    assert len(rows) == 1 and float(rows[0][3]) >= float(rows[0][5])


def test_pyav_formats(setup, tmp_path):
    """An M4A (AAC) that soundfile cannot open is decoded by PyAV."""
    pytest.importorskip("av")
    tmp, packed, audio, files = setup
    wave, sr = load_audio(CLIPS[0])
    path = write_with_pyav(tmp_path / "clip.m4a", wave, sr, "aac", 48000, layout="mono")
    with pytest.raises(Exception):
        sf.info(path)
    main(["--model", str(packed), "--output", str(tmp_path / "o.tsv"), str(path)])
    _, rows = _tsv(tmp_path / "o.tsv")
    assert rows[0][0] == str(path)


def test_bad_files_are_reported_and_skipped(setup, tmp_path, capsys):
    tmp, packed, audio, files = setup
    bad = tmp_path / "corrupt.flac"
    bad.write_bytes(b"fLaC" + b"\x00" * 100)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    silent = tmp_path / "zero samples.wav"
    sf.write(silent, np.zeros(0, np.float32), 16000)
    inputs = [files[0], str(bad), str(empty), str(silent), str(tmp_path / "missing.ogg"), files[1]]
    out = tmp_path / "o.tsv"
    with pytest.raises(SystemExit) as e:
        main(["--model", str(packed), "--output", str(out), *inputs])
    assert e.value.code == 1
    err = capsys.readouterr().err
    for name in ["corrupt.flac", "empty.wav", "zero samples.wav", "missing.ogg"]:
        assert f"skipped {tmp_path / name}" in err
    _, rows = _tsv(out)
    assert [r[0] for r in rows] == [files[0], files[1]]  # the good ones are still written
    main(["--model", str(packed), "--output", str(out), "--skip_bad", "true", *inputs])  # exits 0
    assert [r[0] for r in _tsv(out)[1]] == [files[0], files[1]]


def test_subprocess_stdout_and_exit_codes(setup, tmp_path):
    tmp, packed, audio, files = setup
    cmd = [sys.executable, "-m", "captionbin.caption_infer", "--model", str(packed)]
    r = subprocess.run(cmd + [files[0]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "file\tcaption" and r.stdout.splitlines()[1].startswith(files[0] + "\t")
    r = subprocess.run(cmd + [files[0], str(tmp_path / "missing.wav")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "missing.wav" in r.stderr
    r = subprocess.run(cmd + ["--skip_bad", "true", str(tmp_path / "missing.wav"), files[0]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    r = subprocess.run(cmd + [str(tmp_path)], capture_output=True, text=True, timeout=300)  # no audio in it
    assert r.returncode == 1 and "no audio files" in r.stderr
    r = subprocess.run([sys.executable, "-m", "captionbin.caption_infer", "--model", str(tmp_path / "x.zip"), files[0]],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "x.zip" in r.stderr


@pytest.mark.parametrize("opt, value", [("--beam_size", "0"), ("--max_len", "0"), ("--batch_size", "0"),
                                        ("--beam_size", "-1"), ("--nbest", "-1")])
def test_decoding_options_out_of_range_are_refused_before_loading(tmp_path, capsys, opt, value):
    """The check caption_decode uses (issue 25), before the packed model (here missing) is read."""
    with pytest.raises(SystemExit) as e:
        main(["--model", str(tmp_path / "missing.zip"), opt, value, str(tmp_path / "a.wav")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"{opt} must be >= " in err and f"got {value}" in err and "missing.zip" not in err, err
