"""exp_dir_lock: the lock file records the holder's launchers, and the "in use" error says when
they are gone (an orphaned trainer, e.g. after kill -9 of run.pl or torchrun) and how to stop it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from captionlib.utils.fileio import PIPELINE_PID_ENV, exp_dir_lock

# A holder: takes the lock of argv[1], then sleeps (at most 60 s, so that it never outlives a test).
HOLDER = ("import sys, time\nfrom captionlib.utils.fileio import exp_dir_lock\n"
          "with exp_dir_lock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(60)\n")
# A launcher: starts the holder, prints its PID once it holds the lock, and exits at once when
# argv[2] is "exit" (its holder is then an orphan), else waits for it.
LAUNCHER = ("import subprocess, sys\n"
            "p = subprocess.Popen([sys.executable, '-c', sys.argv[3], sys.argv[1]], stdout=subprocess.PIPE, "
            "text=True)\n"
            "assert p.stdout.readline() == 'locked\\n'\n"
            "print(p.pid, flush=True)\n"
            "if sys.argv[2] != 'exit':\n    p.wait()\n")


def _start(exp, mode, env=None):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(exp), mode, HOLDER], stdout=subprocess.PIPE,
                                text=True, env=env)
    holder = int(launcher.stdout.readline())
    return launcher, holder


def _stop(pid, exp):
    """Kill holder ``pid`` of ``exp``'s lock, if it still runs: after its 60 s the pid may be
    another test's process (the holder is not our child), which must not be killed."""
    try:
        if str(exp).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
            return
        os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        return
    for _ in range(100):  # not our child: wait until it is gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_in_use_error_names_an_orphaned_holder_and_how_to_stop_it(tmp_path):
    launcher, holder = _start(tmp_path, "exit")
    try:
        launcher.wait(timeout=60)
        pid, _, launchers = (tmp_path / ".lock").read_text().split()
        assert int(pid) == holder and launchers == str(launcher.pid)  # no pipeline: the parent only
        with pytest.raises(RuntimeError) as e:
            with exp_dir_lock(tmp_path):
                pass
        msg = str(e.value)
        assert f"in use by process {holder} on " in msg and str(tmp_path / ".lock") in msg
        assert f"its launcher (process {launcher.pid}) is gone" in msg and f"`kill {holder}`" in msg, msg
    finally:
        _stop(holder, tmp_path)
    with exp_dir_lock(tmp_path):  # the holder is gone: its stale lock is taken over
        pass


def test_in_use_error_of_a_live_run_and_the_recorded_launcher_chain(tmp_path):
    # the launcher chain runs up to the pipeline (caption.sh exports its PID), here this test
    env = {**os.environ, PIPELINE_PID_ENV: str(os.getpid())}
    launcher, holder = _start(tmp_path, "wait", env)
    try:
        assert (tmp_path / ".lock").read_text().split()[2] == f"{launcher.pid},{os.getpid()}"
        with pytest.raises(RuntimeError) as e:
            with exp_dir_lock(tmp_path):
                pass
        msg = str(e.value)
        assert f"in use by process {holder} on " in msg and "wait for it to finish" in msg and "launcher" not in msg
    finally:
        _stop(holder, tmp_path)
        launcher.wait(timeout=60)


# A binary's start (parse_args), then the lock and an unfinished atomic write, then a wait.
TERMINATED = ("import sys, time\nfrom captionlib.utils.cli import get_base_parser, parse_args\n"
              "from captionlib.utils.fileio import atomic_open, exp_dir_lock\n"
              "exp, sys.argv = sys.argv[1], sys.argv[:1]\n"
              "parse_args(get_base_parser('x'))  # the process's own command line\n"
              "with exp_dir_lock(exp), atomic_open(exp + '/latest.pth') as f:\n"
              "    f.write(b'half')\n    print('locked', flush=True)\n    time.sleep(60)\n")


def test_sigterm_removes_the_lock_and_unfinished_files(tmp_path):
    """SLURM preemption or a time limit sends SIGTERM: the trainer must leave no .lock (a requeue
    on another node could not tell it stale) and no half-written checkpoint behind."""
    exp = tmp_path / "exp"
    p = subprocess.Popen([sys.executable, "-c", TERMINATED, str(exp)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "locked\n" and (exp / ".lock").exists()
        assert [f.name for f in exp.iterdir() if f.name.endswith(".tmp")]
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 143
    finally:
        p.kill()
    assert sorted(f.name for f in exp.iterdir()) == []
