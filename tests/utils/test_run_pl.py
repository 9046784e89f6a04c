"""Tests for utils/run.pl and utils/stdout.pl (local job runner)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest


def check_log(text, command):
    lines = text.splitlines()
    assert lines[0] == f"# {command}"
    assert lines[1].startswith("# Started at ")
    assert re.fullmatch(r"# Accounting: time=\d+ threads=\d+", lines[-2]), lines[-2]
    assert re.fullmatch(r"# Ended \(code \d+\) at .+", lines[-1]), lines[-1]
    return lines[2:-2]


def test_job_array_writes_logs_and_substitutes_job(tmp_path, tool):
    r = tool(
        [
            "run.pl",
            "JOB=1:3",
            "exp/log/echo.JOB.log",
            "echo",
            "job",
            "JOB",
            "of",
            "feats.JOB.ark",
        ],
        cwd=tmp_path,
    )
    assert r.rc == 0, r
    for n in (1, 2, 3):
        text = (tmp_path / f"exp/log/echo.{n}.log").read_text()
        body = check_log(text, f"echo job {n} of feats.{n}.ark")
        assert body == [f"job {n} of feats.{n}.ark"]
        assert "# Ended (code 0)" in text
    assert not (tmp_path / "exp/log/echo.JOB.log").exists()


def test_failed_job_is_reported(tmp_path, tool):
    r = tool(["run.pl", "JOB=1:3", "log/t.JOB.log", "test JOB -ne 2"], cwd=tmp_path)
    assert r.rc != 0
    assert "run.pl: 1 / 3 failed, log is in log/t.JOB.log" in r.err
    assert "# Ended (code 1)" in (tmp_path / "log/t.2.log").read_text()
    assert "# Ended (code 0)" in (tmp_path / "log/t.3.log").read_text()



def test_failure_report_of_the_tests_shows_the_failed_jobs_logs(tmp_path):
    """tests/recipe_logs.failure_report: a failed run.pl's message, then each job log it names."""
    from recipe_logs import failure_report

    run_pl = Path(__file__).resolve().parents[2] / "utils" / "run.pl"
    r = subprocess.run([str(run_pl), "JOB=1:2", "log/t.JOB.log", "echo error JOB; test JOB -ne 2"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    report = failure_report(r, tmp_path)
    assert report.startswith(r.stdout + r.stderr) and "log is in log/t.JOB.log" in report
    assert [line for line in report.splitlines() if line.startswith(("=====", "error"))] == [
        f"===== {tmp_path}/log/t.1.log (last 8000 characters)", "error 1",
        f"===== {tmp_path}/log/t.2.log (last 8000 characters)", "error 2"]
    (tmp_path / "log" / "t.1.log").unlink()
    (tmp_path / "log" / "t.2.log").unlink()
    assert failure_report(r, tmp_path).endswith("\n===== log/t.JOB.log: no such log")

def test_single_job_exit_code_in_log(tmp_path, tool):
    r = tool(
        [
            "run.pl",
            "--mem",
            "4G",
            "--num-threads",
            "2",
            "--time",
            "1:00:00",
            "--gpu",
            "0",
            "log/one.log",
            "echo out; echo err >&2; exit 3",
        ],
        cwd=tmp_path,
    )
    assert r.rc == 1
    assert "1 / 1 failed" in r.err
    text = (tmp_path / "log/one.log").read_text()
    assert check_log(text, "echo out; echo err >&2; exit 3") == ["out", "err"]
    assert "# Ended (code 3)" in text
    assert "threads=2" in text


def test_range_needs_job_in_log_name(tmp_path, tool):
    r = tool(["run.pl", "JOB=1:2", "log/same.log", "true"], cwd=tmp_path)
    assert r.rc != 0
    assert "JOB" in r.err
    assert not (tmp_path / "log").exists()


def test_other_variable_name_and_range(tmp_path, tool):
    r = tool(["run.pl", "SPLIT=2:3", "log/x.SPLIT.log", "echo", "SPLIT"], cwd=tmp_path)
    assert r.rc == 0, r
    assert sorted(p.name for p in (tmp_path / "log").iterdir()) == [
        "x.2.log",
        "x.3.log",
    ]
    assert check_log((tmp_path / "log/x.3.log").read_text(), "echo 3") == ["3"]


def test_arguments_with_spaces_stay_one_word(tmp_path, tool):
    script = tmp_path / "argv.sh"
    script.write_text('#!/usr/bin/env bash\nfor a in "$@"; do echo "[$a]"; done\n')
    script.chmod(0o755)
    r = tool(
        ["run.pl", "log/q.log", "./argv.sh", "a b", "it's here", "$HOME x", "c"],
        cwd=tmp_path,
    )
    assert r.rc == 0, r
    body = check_log(
        (tmp_path / "log/q.log").read_text(),
        "./argv.sh 'a b' 'it'\\''s here' '$HOME x' c",
    )
    assert body == ["[a b]", "[it's here]", "[$HOME x]", "[c]"]


def test_pipes_as_separate_arguments(tmp_path, tool):
    r = tool(["run.pl", "log/p.log", "echo", "abc", "|", "tr", "a", "x"], cwd=tmp_path)
    assert r.rc == 0, r
    assert check_log((tmp_path / "log/p.log").read_text(), "echo abc | tr a x") == [
        "xbc"
    ]


def test_max_jobs_run_limits_concurrency(tmp_path, tool):
    snippet = "date +%s.%N > s.JOB; sleep 0.2; date +%s.%N > e.JOB"
    r = tool(
        ["run.pl", "--max-jobs-run", "1", "JOB=1:3", "log/m.JOB.log", snippet],
        cwd=tmp_path,
    )
    assert r.rc == 0, r
    spans = sorted(
        (
            float((tmp_path / f"s.{n}").read_text()),
            float((tmp_path / f"e.{n}").read_text()),
        )
        for n in (1, 2, 3)
    )
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end


def test_gpu_jobs_get_their_own_visible_gpus(tmp_path, tool):
    # 3 visible GPUs, 1 per job: at most 3 jobs at a time, each alone on its GPU
    snippet = "echo $CUDA_VISIBLE_DEVICES > d.JOB; date +%s.%N > s.JOB; sleep 0.2; date +%s.%N > e.JOB"
    env = {"CUDA_VISIBLE_DEVICES": "3,5,7"}
    r = tool(["run.pl", "--gpu", "1", "JOB=1:6", "log/g.JOB.log", snippet], cwd=tmp_path, env=env)
    assert r.rc == 0, r
    jobs = [tuple((tmp_path / f"{k}.{n}").read_text().strip() for k in "dse") for n in range(1, 7)]
    assert {d for d, _, _ in jobs} == {"3", "5", "7"}
    for i, (d, s, e) in enumerate(jobs):
        for d2, s2, e2 in jobs[i + 1:]:
            assert d != d2 or float(e) <= float(s2) or float(e2) <= float(s), jobs  # no shared GPU
    # 2 per job: one slot of the first two; more than visible: all of them; no --gpu: unchanged
    for opts, want in ((["--gpu", "2"], "3,5"), (["--gpu", "4"], "3,5,7"), ([], "3,5,7")):
        r = tool(["run.pl", *opts, "JOB=1:2", "log/h.JOB.log", "echo $CUDA_VISIBLE_DEVICES > d.JOB"],
                 cwd=tmp_path, env=env)
        assert r.rc == 0, r
        assert [(tmp_path / f"d.{n}").read_text().strip() for n in (1, 2)] == [want, want], opts


def test_parallel_by_default(tmp_path, tool):
    snippet = "date +%s.%N > s.JOB; sleep 0.3; date +%s.%N > e.JOB"
    r = tool(
        ["run.pl", "--max_jobs_run", "2", "JOB=1:2", "log/m.JOB.log", snippet],
        cwd=tmp_path,
    )
    assert r.rc == 0, r
    s = [float((tmp_path / f"s.{n}").read_text()) for n in (1, 2)]
    e = [float((tmp_path / f"e.{n}").read_text()) for n in (1, 2)]
    assert max(s) < min(e)  # overlapping


def _cpus():
    """The CPU count run.pl starts from: nproc without the OpenMP variables."""
    out = subprocess.run(["env", "-u", "OMP_NUM_THREADS", "-u", "OMP_THREAD_LIMIT", "nproc"], capture_output=True,
                         text=True).stdout
    return int(out) if out.strip().isdigit() else 1


@pytest.mark.skipif(_cpus() < 2, reason="needs 2 CPUs: run.pl's default is one job per CPU")
def test_omp_num_threads_does_not_cap_the_jobs(tmp_path, tool):
    # GNU nproc prints OMP_NUM_THREADS when set; run.pl's default (one job per CPU) must not
    # follow it. Each job waits for the other's file: run one at a time, job 1 gives up.
    snippet = ("echo OMP=$OMP_NUM_THREADS; touch up.JOB; "
               "for i in $(seq 600); do [ -f up.1 ] && [ -f up.2 ] && exit 0; sleep 0.1; done; exit 1")
    env = {"OMP_NUM_THREADS": "1", "OMP_THREAD_LIMIT": "1"}
    r = tool(["run.pl", "JOB=1:2", "log/o.JOB.log", snippet], cwd=tmp_path, env=env, timeout=300)
    assert r.rc == 0, r
    assert "OMP=1" in (tmp_path / "log" / "o.1.log").read_text()  # the jobs still get it


def test_bad_usage(tmp_path, tool):
    assert tool(["run.pl"], cwd=tmp_path).rc != 0
    assert "Usage:" in tool(["run.pl"], cwd=tmp_path).err
    r = tool(["run.pl", "--mem=4G", "log/x.log", "true"], cwd=tmp_path)
    assert r.rc != 0 and "--mem=4G" in r.err
    assert tool(["run.pl", "--bogus", "1", "log/x.log", "true"], cwd=tmp_path).rc != 0
    assert tool(["run.pl", "JOB=1:", "log/x.JOB.log", "true"], cwd=tmp_path).rc != 0
    # one node only: a multi-node training job needs slurm.pl
    assert tool(["run.pl", "--num_nodes", "1", "log/n.log", "true"], cwd=tmp_path).rc == 0
    r = tool(["run.pl", "--num_nodes", "2", "log/n.log", "true"], cwd=tmp_path)
    assert r.rc != 0 and "multi-node jobs need a cluster backend (slurm.pl)" in r.err


def test_torchrun_sh_usage_and_multi_node_outside_slurm(tmp_path, tool):
    r = tool(["torchrun.sh", "--help"], cwd=tmp_path)
    assert r.rc == 0 and "torch.distributed.run" in r.out
    assert "must be a positive integer" in tool(["torchrun.sh", "--nproc_per_node", "0", "python3", "-m", "x"],
                                                cwd=tmp_path).err
    assert "expected <python command...> -m <module>" in tool(["torchrun.sh", "--nproc_per_node", "2"],
                                                              cwd=tmp_path).err
    assert "--port needs a value" in tool(["torchrun.sh", "--port"], cwd=tmp_path).err
    # a python command of several words ("env <python>") runs torchrun, whose one rank runs the module
    r = tool(["torchrun.sh", "env", sys.executable, "-m", "json.tool", "--help"], cwd=tmp_path, timeout=300)
    assert r.rc == 0 and "usage: python -m json.tool" in r.out + r.err, r
    r = tool(["torchrun.sh", "--num_nodes", "2", "python3", "-m", "captionbin.caption_train"], cwd=tmp_path,
             env={"SLURM_JOB_NODELIST": ""})
    assert r.rc == 1 and "--num_nodes 2 needs a SLURM allocation of 2 nodes" in r.err


def test_stdout_pl_echoes_output(tmp_path, tool):
    r = tool(["stdout.pl", "log/s.log", "echo", "visible"], cwd=tmp_path)
    assert r.rc == 0, r
    assert r.out == "visible\n"
    assert check_log((tmp_path / "log/s.log").read_text(), "echo visible") == [
        "visible"
    ]
    r = tool(["stdout.pl", "JOB=1:2", "log/s.JOB.log", "exit JOB"], cwd=tmp_path)
    assert r.rc == 1 and "stdout.pl: 2 / 2 failed" in r.err


def test_stdout_pl_from_relative_path(tmp_path, tool, h):
    r = tool(f"cd {h.UTILS.parent} && utils/stdout.pl {tmp_path}/log/r.log echo rel")
    assert r.rc == 0, r
    assert r.out == "rel\n"


def test_killing_run_pl_stops_its_jobs(tmp_path):
    import os
    import signal
    import time

    from conftest import UTILS

    # each job's shell records its pid and waits in a child (sleep): both must go
    cmd = [str(UTILS / "run.pl"), "JOB=1:2", "log/j.JOB.log", "echo $$ > pid.JOB; sleep 300 & echo $! >> pid.JOB; wait"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    pidfiles = [tmp_path / "pid.1", tmp_path / "pid.2"]
    deadline = time.time() + 60
    while not all(f.is_file() and len(f.read_text().split()) == 2 for f in pidfiles):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.1)
    pids = [int(p) for f in pidfiles for p in f.read_text().split()]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "stopped by SIGTERM" in err, err

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:  # a zombie awaiting its (init) parent is gone too
            return f.read().split(")")[-1].split()[0] != "Z"

    deadline = time.time() + 30
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)]
    assert "# Ended (code 143)" in (tmp_path / "log" / "j.1.log").read_text()
