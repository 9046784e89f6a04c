"""bench/bench_gradient_checkpointing.py runs (one short clip, ConvNeXt only) and prints its
table: a row per setting, measured in processes of their own, and the ratios."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_gradient_checkpointing  # noqa: E402


def test_tiny_run_prints_the_table(capsys):
    bench_gradient_checkpointing.main(["--encoders", "convnext", "--batch_size", "1", "--seconds", "1",
                                       "--reps", "1", "--num_threads", "1"])
    out = capsys.readouterr().out
    assert "on 1 clips of 1 s" in out
    for on in ("false", "true"):
        assert re.search(rf"\| convnext \| {on} \| \d+\.\d\d \| \d+ \| -?\d+ \|", out), out
    assert re.search(r"convnext: with checkpointing the step takes \d+\.\dx less memory \(rise\) and \d+\.\d\dx "
                     r"the time", out), out
