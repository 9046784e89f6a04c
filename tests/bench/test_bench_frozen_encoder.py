"""bench/bench_frozen_encoder.py runs (tiny batch) and prints its table: both XE updates, the
dump and the ratio."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_frozen_encoder  # noqa: E402


def test_tiny_run_prints_the_table(capsys):
    bench_frozen_encoder.main(["--batch_size", "2", "--min_s", "1", "--max_s", "2", "--reps", "1",
                               "--num_threads", "1"])
    out = capsys.readouterr().out
    assert "batch 2 clips of 1-2 s" in out
    for row in ("frozen ConvNeXt in the model", "on its dumped frames", "the dump of the batch's frames"):
        assert re.search(rf"\| [^|]*{re.escape(row)}[^|]* \| \d+\.\d{{3}} \|", out), out
    assert re.search(r"the update on dumped frames is \d+\.\dx cheaper", out), out
