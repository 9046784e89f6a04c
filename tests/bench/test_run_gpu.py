"""bench/run_gpu.sh (the GPU measurements in one command) refuses bad options and a Python that
sees no GPU before it runs anything; its steps themselves run only on a GPU."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "run_gpu.sh"


def _run(*args, tmp_path):
    return subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, timeout=600)


def test_bad_options_are_usage_errors(tmp_path):
    p = _run("--bogus", tmp_path=tmp_path)
    assert p.returncode == 2 and "unknown option --bogus" in p.stderr
    p = _run("--part", "train", tmp_path=tmp_path)
    assert p.returncode == 2 and "--part must be bench, pipeline or all, got train" in p.stderr
    p = _run("--step_timeout", "0", tmp_path=tmp_path)
    assert p.returncode == 2 and "--step_timeout must be a number of seconds >= 1, got '0'" in p.stderr
    p = _run("--beats_ref", str(tmp_path), tmp_path=tmp_path)
    assert p.returncode == 2 and f"--beats_ref {tmp_path} has no BEATs.py" in p.stderr


def test_without_a_gpu_it_stops_before_any_step(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal cannot be shown")
    p = _run("--python", sys.executable, tmp_path=tmp_path)
    assert p.returncode == 1 and "sees no CUDA device" in p.stderr
    assert not (tmp_path / "out").exists()
