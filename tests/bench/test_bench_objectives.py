"""bench/bench_objectives.py runs end to end (tiny sizes): a row per objective, PPO's several
optimizer steps per batch, ratios to the XE update."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_objectives_prints_a_row_per_objective():
    cmd = [sys.executable, str(ROOT / "bench" / "bench_objectives.py"), "--min_s", "2", "--max_s", "3",
           "--batch_size", "4", "--reps", "1", "--warm_up_steps", "2", "--num_threads", "1",
           "--algos", "scst", "ppo", "dpo"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]]
            for r in out.stdout.splitlines() if r.startswith("| ") and not r.startswith("| objective")}
    assert list(rows) == ["XE", "scst", "ppo", "dpo"]
    assert rows["XE"][1:] == ["1", rows["XE"][2], "1.00", rows["XE"][2]]
    assert rows["ppo"][0].startswith("num_samples: 5") and rows["ppo"][1] == "4"  # egs/soundscapes' ppo_epochs
    for name in ("scst", "ppo", "dpo"):
        steps, batch_ms, ratio, step_ms = rows[name][1:]
        assert float(ratio) > 0 and re.fullmatch(r"\d+", batch_ms)
        assert abs(float(batch_ms) / int(steps) - float(step_ms)) <= 1
