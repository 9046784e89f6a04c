"""bench/bench_heap.py: settings, options, the table, and a tiny run of three settings on the
recipe that a tiny bench_pipeline run of stages 1-4 leaves (the full-size run is a benchmark)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from captionlib.utils.memory import glibc

pytestmark = pytest.mark.long(0.5)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_heap.py"
DATA = ROOT.parent / "shared" / "data"


def _bench():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_heap", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(script, args, timeout=900):
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_settings():
    b = _bench()
    assert b.parse_setting("default") == (None, None)
    assert b.parse_setting("mmap4m") == (4 << 20, None)
    assert b.parse_setting("mmap32m") == (32 << 20, None)
    assert b.parse_setting("trim1") == (None, 1)
    assert b.parse_setting("trim10") == (None, 10)
    for bad in ("mmap0m", "mmap33m", "mmap4", "trim0", "trim", "Default", "mmap4m,trim1"):
        with pytest.raises(ValueError):
            b.parse_setting(bad)


def test_table():
    b = _bench()
    rows = [b.HeapResult("default", [2.0, 4.0], 4000.0, 6.25, 0), b.HeapResult("mmap4m", [3.3, 3.3], 3000.0, 6.25, 0),
            b.HeapResult("trim1", [], 100.0, None, 1)]
    table = b.format_table(rows, 10).splitlines()
    assert table[0].startswith("| setting | updates timed | s / update (mean after 10) | vs default |")
    assert table[2] == "| default | 2 | 3.000 | 1.000 | 4000 | 1.000 | 6.2500 |"
    assert table[3] == "| mmap4m | 2 | 3.300 | 1.100 | 3000 | 0.750 | 6.2500 |"
    assert table[4] == "| trim1 (FAILED, exit 1) | 0 | nan | nan | 100 | 0.025 |  |"
    assert "| nan |" in b.format_table(rows[1:2], 10)  # no default row: no ratios


@pytest.mark.parametrize("args, message", [
    (["--out_dir", "x"], "the following arguments are required: --recipe_dir"),
    (["--recipe_dir", ".", "--out_dir", "x", "--settings", "default,mmap40m"], "glibc's mmap threshold is at most"),
    (["--recipe_dir", ".", "--out_dir", "x", "--settings", "fast"], "unknown setting 'fast'"),
    (["--recipe_dir", ".", "--out_dir", "x", "--steps", "5", "--warmup", "4"], "need 0 <= --warmup < --steps - 1"),
    (["--recipe_dir", ".", "--out_dir", "x"], "lacks conf/train_xe.yaml, dump/logmel/development/feats.scp"),
])
def test_argument_errors(args, message):
    r = _run(SCRIPT, args, timeout=120)
    assert r.returncode == 2 and message in r.stderr, r.stderr


@pytest.mark.skipif(glibc() is None, reason="the mmap and trim settings need glibc")
@pytest.mark.skipif(not (DATA / "event_library" / "events.csv").is_file(), reason=f"{DATA}/event_library not found")
def test_tiny_run(tmp_path):
    work = tmp_path / "work"
    r = _run(ROOT / "bench" / "bench_pipeline.py",
             ["--work_dir", str(work), "--stop_stage", "4", "--scale", "0.0015", "--min_duration_s", "1",
              "--max_duration_s", "2", "--nj", "1"])
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    out = tmp_path / "heap"
    r = _run(SCRIPT, ["--recipe_dir", str(work / "recipe" / "egs" / "clotho"), "--out_dir", str(out),
                      "--settings", "default,mmap4m,trim1", "--steps", "4", "--warmup", "1", "--valid_clips", "2",
                      "--num_threads", "1"])
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    rows = [line.split("|")[1:-1] for line in r.stdout.splitlines() if line.startswith("| ")][1:]
    assert [c[0].strip() for c in rows] == ["default", "mmap4m", "trim1"]
    assert all(c[1].strip() == "2" for c in rows)  # 4 updates less 1 warm-up: 2 intervals
    assert float(rows[0][3]) == 1.0 and float(rows[0][5]) == 1.0
    losses = {c[6].strip() for c in rows}
    assert len(losses) == 1 and float(losses.pop()) > 0  # same batches, same updates
    assert (out / "bench_heap.md").read_text().splitlines()[2].startswith("| default | 2 |")
    assert len((out / "valid" / "feats.scp").read_text().splitlines()) == 2
