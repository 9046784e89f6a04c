"""The README's front door from scratch: a copy of this checkout's files (git ls-files, without
tools/venv or any recipe's outputs) gets its virtual environment from the README's own set-up,
make demo's prerequisites in the Makefile (tools/venv and its console scripts), and the installed
caption_infer, called by its path as the README shows (no activation, no python -m, a shell
without tools/venv on PATH), captions the shipped clips with the shipped model.

It needs pip to reach its package index or cache, as make demo does; without them it fails and
says so. About 1.5-2 minutes on 2 CPU cores with pip's cache warm (the time of make venv)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# never copied: the environment itself and the outputs of the recipes (all git-ignored)
EXCLUDED = re.compile(r"^(tools/venv|egs/[^/]+/(exp|dump|data|downloads))(/|$)")
SETUP_TARGET = "fresh-venv-setup"

pytestmark = pytest.mark.long(2)


def _readme_command():
    """The README's command that captions the shipped clips with the shipped model, as argv."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        if "caption_infer" in block and "soundscapes_crnn_gru_reinforce_plus.zip" in block:
            argv = shlex.split(block.replace("\\\n", " "), comments=True)
            assert argv[0] == "tools/venv/bin/caption_infer", block
            return argv
    pytest.fail("README.md has no ```sh block that runs caption_infer with the shipped soundscapes model")


def _copy_checkout(dest: Path):
    """This checkout's files (tracked, and new ones git does not ignore), symlinks kept as links."""
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       cwd=ROOT, capture_output=True, timeout=120)
    if r.returncode != 0:
        pytest.fail(f"needs a git checkout to list the repository's files: {r.stderr.decode()[-500:]}")
    for rel in sorted(set(r.stdout.decode().split("\0")) - {""}):
        src, dst = ROOT / rel, dest / rel
        if EXCLUDED.match(rel) or not (src.is_symlink() or src.is_file()):  # (deleted in the work tree)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)


def _clean_env():
    """A fresh shell's environment: no virtual environment active, none on PATH, no outer make.
    PYTHON and TORCH_VERSION stay: make exports them when given on its command line
    (make PYTHON=... test), so the copy's set-up uses the same interpreter and torch."""
    venvs = {str(ROOT / "tools" / "venv"), os.environ.get("VIRTUAL_ENV", "")}
    if sys.prefix != sys.base_prefix:
        venvs.add(sys.prefix)
    venvs.discard("")
    env = {k: v for k, v in os.environ.items()
           if k not in {"VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                  if p and not any(p == v or p.startswith(v + os.sep) for v in venvs))
    return env


def test_readme_setup_in_a_fresh_copy_gives_a_working_caption_infer(tmp_path):
    argv = _readme_command()
    copy = tmp_path / "captionlib"
    _copy_checkout(copy)
    assert (copy / "Makefile").is_file() and not (copy / "tools" / "venv").exists()
    env = _clean_env()
    try:
        _setup_and_caption(copy, setup_mk=tmp_path / "setup.mk", argv=argv, env=env)
    finally:  # the copy's environment is about 2 GB: not kept among pytest's last 3 temporary directories
        shutil.rmtree(copy / "tools" / "venv", ignore_errors=True)


def _setup_and_caption(copy: Path, setup_mk: Path, argv, env):
    # The README's set-up is make demo (or make test): what it builds before the demo runs, its
    # prerequisites in the Makefile, made here by a target of a second makefile that has them.
    makefile = (copy / "Makefile").read_text(encoding="utf-8")
    m = re.search(r"^demo:[ \t]*(.*)$", makefile, re.M)
    assert m and m[1].strip(), "the Makefile has no demo target with prerequisites"
    setup_mk.write_text(f"{SETUP_TARGET}: {m[1].strip()}\n")
    r = subprocess.run(["make", "-f", "Makefile", "-f", str(setup_mk), SETUP_TARGET], cwd=copy, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    assert r.returncode == 0, (
        f"make demo's set-up ({m[1].strip()}) failed in a fresh copy; it needs pip's package index or a "
        f"warm pip cache (make venv's pip install lines), and Python >= 3.9 with venv:\n{r.stdout[-4000:]}")
    assert (copy / argv[0]).is_file(), f"make demo's set-up did not install {argv[0]}"

    r = subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{shlex.join(argv)} failed:\n{r.stderr[-3000:]}"
    rows = [line.split("\t") for line in r.stdout.strip().splitlines()[1:]]  # TSV: a header, then file, caption
    clips = sorted((copy / "egs" / "mini_clotho" / "clotho_fixture").glob("*/*.wav"))
    assert clips and len(rows) == len(clips), r.stdout
    assert all(len(row) >= 2 and row[1].strip() for row in rows), r.stdout
