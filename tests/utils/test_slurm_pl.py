"""Tests for utils/slurm.pl with fake ``sbatch`` and ``squeue`` first on PATH."""

import os
import re

import pytest

FAKE_SBATCH = r"""#!/usr/bin/env bash
# Fake sbatch: records its arguments, runs the array tasks locally in the background.
printf '%s\n' "$@" > "$FAKE_SLURM_DIR/sbatch.args"
array=""
for a in "$@"; do case "$a" in --array=*) array=${a#--array=} ;; esac; done
script="${@: -1}"
range=${array%%%*}
first=${range%-*}
last=${range#*-}
if [ -z "${FAKE_SLURM_LOSE_JOB:-}" ]; then
  for t in $(seq "$first" "$last"); do
    SLURM_ARRAY_TASK_ID=$t SLURM_ARRAY_JOB_ID=4242 \
      bash "$script" > /dev/null 2>&1 < /dev/null &
  done
fi
echo "Submitted batch job 4242"
"""

FAKE_SQUEUE = r"""#!/usr/bin/env bash
# Fake squeue: records its arguments; lists the job unless it was "lost".
echo "$*" >> "$FAKE_SLURM_DIR/squeue.calls"
if [ -z "${FAKE_SLURM_LOSE_JOB:-}" ]; then echo "4242_1"; fi
"""

CONF = """# site config
command sbatch --export=PATH --account=captions
option mem=* --mem-per-cpu $0
option mem=0
option gpu=0
option gpu=* -p gpu --gres=gpu:$0
option num_threads=* --cpus-per-task $0
option time=* --time $0
option max_jobs_run=*
default gpu=0
"""


@pytest.fixture
def slurm(tmp_path, tool):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("squeue", FAKE_SQUEUE)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    work = tmp_path / "work"
    (work / "conf").mkdir(parents=True)
    (work / "conf/slurm.conf").write_text(CONF)
    env = {
        "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SLURM_DIR": str(tmp_path),
        "SLURM_PL_POLL_MAX": "0.1",
        "SLURM_PL_SQUEUE_INTERVAL": "0.05",
        "SLURM_PL_GRACE": "0.3",
    }

    def call(*args, extra_env=None):
        return tool(["slurm.pl", *args], cwd=work, env={**env, **(extra_env or {})})

    call.work = work
    call.sbatch_args = lambda: (tmp_path / "sbatch.args").read_text().splitlines()
    call.squeue_calls = lambda: (tmp_path / "squeue.calls").read_text().splitlines()
    return call


def test_array_job_substitutes_job_and_maps_options(slurm):
    r = slurm(
        "--gpu",
        "1",
        "--mem",
        "2G",
        "--num-threads",
        "2",
        "--max-jobs-run",
        "2",
        "JOB=1:3",
        "exp/log/dec.JOB.log",
        "sleep 0.2; echo task JOB of feats.JOB.ark",
    )
    assert r.rc == 0, r
    args = slurm.sbatch_args()
    assert args[:2] == ["--export=PATH", "--account=captions"]
    joined = " ".join(args)
    for expected in (
        "-p gpu --gres=gpu:1",
        "--mem-per-cpu 2G",
        "--cpus-per-task 2",
        "--array=1-3%2",
    ):
        assert expected in joined
    script = args[-1]
    assert script.endswith("exp/log/q/dec.sh") and os.path.isfile(script)
    for n in (1, 2, 3):
        lines = (slurm.work / f"exp/log/dec.{n}.log").read_text().splitlines()
        assert lines[0] == f"# sleep 0.2; echo task {n} of feats.{n}.ark"
        assert lines[1].startswith("# Started at ")
        assert f"task {n} of feats.{n}.ark" in lines
        assert re.fullmatch(r"# Accounting: time=\d+ threads=2", lines[-2])
        assert re.fullmatch(r"# Ended \(code 0\) at .+", lines[-1])
    assert any("4242" in c for c in slurm.squeue_calls())
    assert not list((slurm.work / "exp/log/q").glob("done.*"))


def test_failure_is_reported(slurm):
    r = slurm("JOB=1:3", "log/t.JOB.log", "test JOB -ne 3")
    assert r.rc == 1
    assert "slurm.pl: 1 / 3 failed, log is in log/t.JOB.log" in r.err
    assert "# Ended (code 1)" in (slurm.work / "log/t.3.log").read_text()
    assert "--gres" not in " ".join(slurm.sbatch_args())  # default gpu=0 adds nothing
    assert "--array=1-3" in slurm.sbatch_args()


def test_single_job_without_range(slurm):
    r = slurm("--time", "1:00:00", "log/one.log", "echo", "a b", "c")
    assert r.rc == 0, r
    assert "--time" in slurm.sbatch_args() and "1:00:00" in slurm.sbatch_args()
    lines = (slurm.work / "log/one.log").read_text().splitlines()
    assert lines[0] == "# echo 'a b' c"
    assert "a b c" in lines


def test_lost_job_is_a_failure(slurm):
    r = slurm(
        "JOB=1:2", "log/lost.JOB.log", "true", extra_env={"FAKE_SLURM_LOSE_JOB": "1"}
    )
    assert r.rc == 1
    assert "2 / 2 failed" in r.err
    assert "left the queue" in r.err


def test_option_not_in_config_is_an_error(slurm, tmp_path):
    r = slurm("--partition", "x", "log/x.log", "true")
    assert r.rc != 0
    assert "partition" in r.err
    conf = tmp_path / "nogpu.conf"
    conf.write_text("command sbatch\noption gpu=0\n")
    r = slurm("--config", str(conf), "--gpu", "2", "log/x.log", "true")
    assert r.rc != 0
    assert "gpu" in r.err


def test_range_needs_job_in_log_name(slurm):
    r = slurm("JOB=1:2", "log/same.log", "true")
    assert r.rc != 0
    assert "JOB" in r.err
