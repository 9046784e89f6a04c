"""bench/bench_pipeline.py: options, the table and projection, and a tiny run of stages 1-4
(the full-size run is a benchmark, not a test)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_pipeline.py"
DATA = ROOT.parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not (DATA / "event_library" / "events.csv").is_file()
    or not (DATA / "clotho_captions_v2.1" / "clotho_captions_evaluation.csv").is_file(),
    reason=f"{DATA}/event_library or clotho_captions_v2.1 not found",
)
# 6 / 2 / 2 clips of 1-2 s
TINY = ["--scale", "0.0015", "--min_duration_s", "1", "--max_duration_s", "2", "--nj", "1"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_pipeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(args, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_help():
    r = _run(["--help"])
    assert r.returncode == 0, r.stderr
    for needle in ("--xe_epochs", "--rl_epochs", "--ngpu", "--nj", "--work_dir", "--scale", "speed, not learning"):
        assert needle in r.stdout, needle


@pytest.mark.parametrize("args, message", [
    ([], "the following arguments are required: --work_dir"),
    (["--scale", "0"], "--scale must be in (0, 1]"),
    (["--scale", "2"], "--scale must be in (0, 1]"),
    (["--xe_epochs", "0"], "--xe_epochs must be >= 1"),
    (["--rl_epochs", "-1"], "--rl_epochs must be >= 1"),
    (["--nj", "0"], "--nj must be >= 1"),
    (["--ngpu", "-1"], "--ngpu must be >= 0"),
    (["--stage", "0"], "stage 0, the download, is never run"),
    (["--stage", "5", "--stop_stage", "4"], "need 1 <= --stage <= --stop_stage <= 10"),
    (["--min_duration_s", "3", "--max_duration_s", "2"], "--min_duration_s <= --max_duration_s"),
])
def test_argument_errors(tmp_path, args, message):
    r = _run((["--work_dir", str(tmp_path)] if args else []) + args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "recipe").exists()


def test_table_and_projection():
    b = _bench()
    rows = [b.StageResult(0, "corpus generator (not a recipe stage)", 50.0, 90.0, 150.0, None, 0)]
    rows += [b.StageResult(s, b.STAGE_NAMES[s], float(s), 2.0 * s, 100.0 * s, None, 0) for s in range(1, 11)]
    table = b.format_table(rows).splitlines()
    assert table[0] == "| stage | what | wall (s) | CPU (s) | CPU / wall | peak RSS (MiB) |"
    assert table[1] == "|---:|---|---:|---:|---:|---:|"
    assert len(table) == 2 + 1 + 10 + 1
    assert table[2] == "|  | corpus generator (not a recipe stage) | 50.0 | 90.0 | 1.80 | 150 |"
    assert table[7] == "| 5 | XE training | 5.0 | 10.0 | 2.00 | 500 |"
    assert table[-1] == "|  | **total (stages)** | 55.0 | 110.0 | 2.00 | 1000 |"  # the corpus is not a stage

    # 2 XE epochs took 5 s, 1 SCST epoch 6 s: 25 + 25 epochs -> 62.5 s + 150 s + the other 44 s
    lines = b.projection(rows, 2, 1, 25, 25)
    assert "= 62 s" in lines[1] and "5.0 x 25 / 2" in lines[1]
    assert "6.0 x 25 / 1 = 150 s" in lines[2]
    assert "44 s) + stage 5 + stage 6 = 256 s (0.07 h)" in lines[3]
    assert b.projection(rows[:6], 1, 1, 25, 25) == ["Projection: needs stages 5 and 6 to have run (and succeeded)."]

    rows[6].returncode, rows[6].peak_gpu_mib = 1, 2048.0
    table = b.format_table(rows).splitlines()
    assert table[0].endswith("| peak GPU memory (MiB) |") and table[2].endswith("| 150 |  |")
    assert "| 6 | SCST fine-tuning (FAILED, exit 1) |" in table[8] and table[8].endswith("| 2048 |")
    assert b.projection(rows, 1, 1, 25, 25)[0].startswith("Projection: needs stages 5 and 6")


@needs_data
def test_tiny_run_of_stages_1_to_4(tmp_path):
    work = tmp_path / "work"
    r = _run(["--work_dir", str(work), "--stop_stage", "4", *TINY], timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    table = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in table[1:]] == ["", "1", "2", "3", "4", ""]
    assert "development 6 / validation 2 / evaluation 2 clips" in r.stdout
    assert "the captions do NOT describe the audio" in r.stdout
    assert "Projection: needs stages 5 and 6" in r.stdout
    assert (work / "bench_pipeline.md").read_text().splitlines()[-1] == ("Projection: needs stages 5 and 6 to have run "
                                                                          "(and succeeded).")
    recipe = work / "recipe" / "egs" / "clotho"
    assert len((recipe / "data" / "evaluation" / "wav.scp").read_text().splitlines()) == 2
    assert (recipe / "dump" / "logmel" / "development" / "feats.scp").is_file()

    # a later --stage reuses the copy; a failing stage stops the run with exit 1, its row
    # marked FAILED and the end of its log shown
    r = _run(["--work_dir", str(work), "--stage", "3", "--stop_stage", "4", "--recipe_args", "--token_type bogus",
              *TINY])
    assert r.returncode == 1
    assert "| 3 | token list (FAILED, exit 2) |" in r.stdout and "--token_type must be word or bpe" in r.stderr
    assert (recipe / "data" / "evaluation" / "wav.scp").is_file()


def test_refuses_a_recipe_dir_it_did_not_make(tmp_path):
    (tmp_path / "recipe").mkdir()
    r = _run(["--work_dir", str(tmp_path), *TINY])
    assert r.returncode == 2 and "was not made by bench_pipeline.py: not removing it" in r.stderr
    r = _run(["--work_dir", str(tmp_path / "new"), "--stage", "2", *TINY])
    assert r.returncode == 2 and "no recipe copy of an earlier run to reuse" in r.stderr
