"""utils/slurm.pl against a real SLURM (slurmctld + slurmd on localhost, issue 14).

The cluster is started once for this module (tests/utils/slurm_cluster.py installs Debian's
slurm-wlm and munge when missing, as root) and torn down by the last test, which checks that
no daemon and no port of it is left. Without root or apt-get the tests skip and say why.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_cluster import start_cluster, stepd_pids

pytestmark = pytest.mark.long(1.8)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SLURM_PL = ROOT / "utils" / "slurm.pl"
# slurm.pl's polling, shortened for the tests (the defaults suit a real cluster)
FAST = {"SLURM_PL_POLL_MAX": "1", "SLURM_PL_SQUEUE_INTERVAL": "2", "SLURM_PL_GRACE": "20"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c, reason = start_cluster(tmp_path_factory.mktemp("slurm"))
    if c is None:
        pytest.skip(reason)
    yield c
    c.stop()  # idempotent; the last test has already stopped it and checked


def _env(cluster):
    env = dict(cluster.env, **FAST)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _slurm_pl(cluster, cwd, *args, timeout=300):
    return subprocess.run([str(SLURM_PL), *args], cwd=cwd, env=_env(cluster), capture_output=True, text=True,
                          timeout=timeout)


def _job_id(log_text):
    m = re.search(r"as slurm job (\d+)_(\d+)", log_text)
    assert m, log_text
    return m.group(1)


def test_job_array_with_one_failing_task(cluster, tmp_path):
    r = _slurm_pl(cluster, tmp_path, "JOB=1:3", "log/t.JOB.log", "echo task JOB on $(hostname); [ JOB -ne 2 ]")
    assert r.returncode == 1
    assert "1 / 3 failed, log is in log/t.JOB.log" in r.stderr
    for t in (1, 2, 3):
        log = (tmp_path / "log" / f"t.{t}.log").read_text()
        assert f"task {t} on " in log and "as slurm job" in log
        assert f"# Ended (code {1 if t == 2 else 0})" in log
    # one sbatch array job for the three tasks
    ids = {_job_id((tmp_path / "log" / f"t.{t}.log").read_text()) for t in (1, 2, 3)}
    assert len(ids) == 1


def test_success_and_the_option_mapping_of_conf_slurm_conf(cluster, tmp_path):
    (tmp_path / "conf").mkdir()
    shutil.copy(ROOT / "egs" / "TEMPLATE" / "conf" / "slurm.conf", tmp_path / "conf" / "slurm.conf")
    r = _slurm_pl(cluster, tmp_path, "--config", "conf/slurm.conf", "--mem", "100M", "--num_threads", "1",
                  "--gpu", "0", "--time", "0:10:00", "JOB=1:2", "log/ok.JOB.log", "echo ok JOB")
    assert r.returncode == 0, r.stdout + r.stderr
    log = (tmp_path / "log" / "ok.1.log").read_text()
    assert "ok 1" in log and "# Ended (code 0)" in log
    job = subprocess.run(["scontrol", "show", "job", _job_id(log)], env=cluster.env, capture_output=True,
                         text=True).stdout
    # conf/slurm.conf: --gpu 0 -> -p cpu, --mem -> --mem-per-cpu, --num_threads -> --cpus-per-task, --time
    assert "Partition=cpu" in job, job
    assert re.search(r"TimeLimit=00:10:00", job), job
    assert re.search(r"MinMemoryCPU=100M", job), job
    assert re.search(r"NumCPUs=1\b", job) or re.search(r"CPUs/Task=1\b", job), job


def test_mini_clotho_dump_and_decode_through_slurm(cluster, tmp_path):
    """egs/mini_clotho with cmd_backend=slurm: the feature dump (stage 2, a JOB array), a tiny XE
    model (stage 5, two data-parallel CPU ranks under torchrun in one job) and decoding
    (stage 8, a JOB array) all run as SLURM jobs."""
    ignore = shutil.ignore_patterns("data", "dump", "exp", "downloads", "RESULTS.md", "__pycache__")
    for sub in ["egs/TEMPLATE", "egs/clotho/local", "egs/mini_clotho", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "mini_clotho"
    cmd_sh = d / "cmd.sh"
    cmd_sh.write_text(cmd_sh.read_text().replace("cmd_backend='local'", "cmd_backend='slurm'"))
    p = subprocess.Popen(["./run.sh", "--stop_stage", "8", "--rl_algo", "", "--word2vec", "false",
                          "--ensemble_models", "", "--num_diversity_samples", "0", "--xe_args", "--max_epoch 2",
                          "--nproc_per_node", "2"],
                         cwd=d, env=_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=1800)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # run.sh and its slurm.pl pollers; stop() cancels the jobs
        raise
    assert p.returncode == 0, out[-6000:] + _failed_job_logs(d) + cluster.log_tails()
    dump_logs = sorted((d / "dump" / "logmel" / "train_development_validation").glob("log/dump_feats.*.log"))
    assert len(dump_logs) == 2 and all("as slurm job" in p.read_text() for p in dump_logs)
    train_log = next(d.glob("exp/xe_*/train.log")).read_text()
    assert "as slurm job" in train_log and "rank 0/2]" in train_log, train_log[-3000:]
    decode_logs = sorted(d.glob("exp/xe_*/decode_*/evaluation/log/decode.*.log"))
    assert decode_logs and all("as slurm job" in p.read_text() for p in decode_logs)
    assert (next(d.glob("exp/xe_*/decode_*/evaluation")) / "text").read_text().strip()


def _failed_job_logs(d):
    """The tails of the recipe's job logs that end with a non-zero code (slurm.pl names only the file)."""
    tails = []
    for log in sorted(d.glob("*/**/*.log")):
        text = log.read_text(errors="replace")
        if re.search(r"# Ended \(code [1-9]", text):
            tails.append(f"\n==== {log.relative_to(d)} ====\n{text[-4000:]}")
    return "".join(tails)


def test_teardown_leaves_no_daemon_and_no_port(cluster, tmp_path):
    # a job still running at teardown: its slurmstepd must go too
    r = subprocess.run(["sbatch", "-o", str(tmp_path / "sleep.log"), "--wrap", "sleep 300"], env=cluster.env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for _ in range(100):
        if cluster.pids() and any(p not in cluster.stepd_before for p in stepd_pids()):
            break
        time.sleep(0.1)
    pids, ports = cluster.pids(), list(cluster.ports)
    assert pids and any(cluster_port_open(p) for p in ports)  # it was running
    cluster.stop()
    assert cluster.pids() == []
    assert not [p for p in stepd_pids() if p not in cluster.stepd_before]
    assert not any(cluster_port_open(p) for p in ports)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]


def cluster_port_open(port):
    from slurm_cluster import port_open

    return port_open(port)
