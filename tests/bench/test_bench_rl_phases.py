"""bench/bench_rl_phases.py runs end to end (tiny sizes): every phase of the XE and SCST updates
is timed, eager and compiled, and its profile is written."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("one_pass", [False, True])
def test_bench_rl_phases_prints_every_phase_and_writes_its_profile(tmp_path, one_pass):
    """With --one_pass (a GPU's default), the greedy baseline and the samples are one phase (run
    eagerly only: compiling is the slow part of this test)."""
    prof = tmp_path / "profile.txt"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_rl_phases.py"), "--min_s", "2", "--max_s", "3",
           "--batch_size", "4", "--reps", "1", "--warm_up_steps", "2", "--num_threads", "1", "--profile", str(prof)]
    cmd += ["--one_pass"] if one_pass else ["--decode_compile", "aot_eager"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    mode = "none" if one_pass else "aot_eager"
    decoding = (("| greedy baseline and samples, one pass (decoding) |",) if one_pass else
                ("| greedy baseline (decoding) |", "| samples (decoding) |", f"SCST (--decode_compile {mode}) / XE"))
    assert ("| samples (decoding) |" in out.stdout) is not one_pass
    for needle in decoding + (
            "| encoder forward |", "| decoder forward (teacher forcing) and loss |", "| backward |",
            "| CIDEr-D reward |", "| teacher-forced pass of the samples and loss |", "**XE update (sum of phases)**",
            "SCST update phase (--sample_logprobs recompute, --decode_compile none)",
            "SCST (--decode_compile none) / XE, sums of phases:",
            "| one sampling pass, 2B rows (greedy and samples batched) |"):
        assert needle in out.stdout, (needle, out.stdout)
    assert f"--decode_compile {mode}" in prof.read_text() and "Self CPU" in prof.read_text()
