"""Smoke tests of captionbin.caption_prepare_tgif: parser, exit codes, the fixture."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from captionbin import caption_prepare_tgif

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "egs" / "mini_tgif" / "tgif_fixture"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "captionbin.caption_prepare_tgif", *args],
                          capture_output=True, text=True, cwd=REPO)


def test_get_parser_main_without_args_and_print_config():
    assert caption_prepare_tgif.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_prepare_tgif.main([])
    assert e.value.code == 2
    r = _run("--print_config")
    assert r.returncode == 0, r.stderr
    conf = yaml.safe_load(r.stdout)
    assert conf["max_missing_fraction"] == 0.1 and conf["skip_bad"] is False and conf["gif_root"] is None


def test_exit_codes(tmp_path):
    common = ["--tsv", str(FIXTURE / "release" / "tgif-v1.0.tsv"), "--split_list",
              str(FIXTURE / "release" / "splits" / "train.txt"), "--split", "train",
              "--gif_root", str(FIXTURE / "gifs")]
    # 1 of 8 train GIFs has no file: over the default 10%, an error (exit 1) naming it and the list
    r = _run(*common, "--output_dir", str(tmp_path / "a"))
    assert r.returncode == 1, r.stderr
    assert (f"1 of 8 GIFs missing (12.5%): tumblr_nb8sq0yel8_250.gif; all listed in {tmp_path / 'a' / 'missing'}"
            in r.stderr)
    assert "max_missing_fraction 0.1" in r.stderr and "Traceback" not in r.stderr
    r = _run(*common, "--output_dir", str(tmp_path / "b"), "--max_missing_fraction", "0.2")
    assert r.returncode == 0, r.stderr
    assert len((tmp_path / "b" / "video.scp").read_text().splitlines()) == 7
    r = _run(*common, "--output_dir", str(tmp_path / "c"), "--split", "dev")
    assert r.returncode == 2  # argparse: invalid choice
    r = _run(*common[:2], "--split_list", str(tmp_path / "none.txt"), "--split", "val", "--output_dir",
             str(tmp_path / "d"))
    assert r.returncode == 1 and "none.txt: split list not found" in r.stderr
