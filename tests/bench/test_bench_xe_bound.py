"""bench/bench_xe_bound.py runs end to end (tiny sizes) and puts every counted FLOP in a group."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_xe_bound_prints_both_thp_tables_with_the_flops_grouped():
    cmd = [sys.executable, str(ROOT / "bench" / "bench_xe_bound.py"), "--min_s", "2", "--max_s", "3",
           "--batch_size", "4", "--reps", "1", "--num_threads", "1", "--top", "3"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "THP_MEM_ALLOC_ENABLE=0;" in text and "THP_MEM_ALLOC_ENABLE=1;" in text, text
    assert re.search(r"^THP_MEM_ALLOC_ENABLE=1: XE update [0-9.]+ s against [0-9.]+ s without", text, re.M), text
    gflop = {name: [float(g) for g in re.findall(rf"^\| {name} \| [0-9.]+ \| [0-9]+% \| ([0-9.]+) \|", text, re.M)]
             for name in ("matmul", "convolution", "no FLOPs counted", "all")}
    assert all(len(v) == 2 for v in gflop.values()), gflop
    # the GRUs and the output layer are matmuls, the CRNN's layers convolutions; nothing left ungrouped
    assert min(gflop["matmul"]) > 0 and min(gflop["convolution"]) > 0, gflop
    assert gflop["no FLOPs counted"] == [0.0, 0.0], gflop
    assert "convolution: aten::convolution_backward" in text and "peak RSS" in text, text
    pooling = r"^the same update with nn.LPPool2d\(4, ...\) .*: [0-9.]+ s \(L4Pool2d: [0-9.]+x\)$"
    assert len(re.findall(pooling, text, re.M)) == 2, text
