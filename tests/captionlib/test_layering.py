"""Layering of the packages.

* The import-linter contract of ``.importlinter`` (issue 23): each package of captionlib imports
  only from the layers below it, and the library does not import the binaries.
* The RL objectives and decoding know nothing of the modality (issue 12): audio, image and
  video code lives in the front end (``captionlib.audio``, ``captionlib.visual``) and the
  feature files; ``captionlib.rl`` and ``captionlib.decode`` work on (T, D) feature matrices
  and encodings only.
"""

import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import captionlib.decode
import captionlib.rl

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports():
    """The ``lint-imports`` script of this interpreter's environment, else the one on PATH."""
    script = Path(sys.executable).parent / "lint-imports"
    return str(script) if script.is_file() else shutil.which("lint-imports")


def test_import_layers_contract():
    lint = _lint_imports()
    if lint is None:
        pytest.skip("lint-imports not found (pip install import-linter, or the 'test' extra)")
    r = subprocess.run([lint, "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr

FRONT_END = ("captionlib.audio", "captionlib.visual", "soundfile", "librosa", "soxr", "av", "PIL", "torchvision")


def test_rl_and_decode_import_no_front_end():
    modules = [
        f"{pkg.__name__}.{m.name}"
        for pkg in (captionlib.rl, captionlib.decode) for m in pkgutil.iter_modules(pkg.__path__)
    ]
    assert "captionlib.rl.policy_gradient" in modules and "captionlib.decode.search" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FRONT_END!r} or m.startswith({FRONT_END!r}))\n"
        "print(' '.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"captionlib.rl / captionlib.decode import front-end modules: {r.stdout}"
