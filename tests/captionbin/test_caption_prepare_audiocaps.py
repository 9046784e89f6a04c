"""Smoke tests of captionbin.caption_prepare_audiocaps: parser, exit codes, the fixture."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from captionbin import caption_prepare_audiocaps

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "egs" / "mini_audiocaps" / "audiocaps_fixture"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "captionbin.caption_prepare_audiocaps", *args],
                          capture_output=True, text=True, cwd=REPO)


def test_get_parser_main_without_args_and_print_config():
    assert caption_prepare_audiocaps.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_prepare_audiocaps.main([])
    assert e.value.code == 2
    r = _run("--print_config")
    assert r.returncode == 0, r.stderr
    conf = yaml.safe_load(r.stdout)
    assert conf["max_missing_fraction"] == 0.1 and conf["skip_bad"] is False


def test_exit_codes(tmp_path):
    common = ["--csv_dir", str(FIXTURE), "--audio_dir", str(FIXTURE / "audio"), "--split", "train"]
    # 1 of 7 train clips is missing: over the default 10%, an error (exit 1) naming the list
    r = _run(*common, "--output_dir", str(tmp_path / "a"))
    assert r.returncode == 1
    assert f"1 of 7 clips missing (14.3%): mZ9-pQ2rLs7_40; all listed in {tmp_path / 'a' / 'missing'}" in r.stderr
    assert "max_missing_fraction 0.1" in r.stderr and "Traceback" not in r.stderr
    r = _run(*common, "--output_dir", str(tmp_path / "b"), "--max_missing_fraction", "0.2")
    assert r.returncode == 0, r.stderr
    assert "1 of 7 clips missing (14.3%)" in r.stderr
    assert len((tmp_path / "b" / "wav.scp").read_text().splitlines()) == 6
    r = _run(*common, "--output_dir", str(tmp_path / "c"), "--split", "dev")
    assert r.returncode == 2  # argparse: invalid choice
    r = _run("--csv_dir", str(tmp_path), "--audio_dir", str(FIXTURE / "audio"), "--split", "val",
             "--output_dir", str(tmp_path / "d"))
    assert r.returncode == 1 and "val.csv: AudioCaps CSV not found" in r.stderr
