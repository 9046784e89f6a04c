"""A single-node SLURM cluster on localhost for the tests (slurmctld + slurmd + a private munged).

Debian's ``slurm-wlm`` and ``munge`` are installed with ``apt-get`` when missing (root only);
:func:`start_cluster` returns ``(cluster, None)`` or ``(None, reason)`` so the caller can skip
with the reason. Every daemon runs from a generated ``slurm.conf`` under a temporary directory,
on free TCP ports, with its own pid file; :meth:`LocalSlurm.stop` kills them and waits until
neither a process nor a listening port is left.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Tuple

PACKAGES = ["slurm-wlm", "munge"]
DAEMONS = ["munged", "slurmctld", "slurmd"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    """True if something listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int, comm: Optional[str] = None) -> bool:
    """Whether process ``pid`` runs (not a zombie) and, with ``comm``, runs that program: a
    daemon's pid file outlives it, and the pid may since be another test's process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        if comm is not None and Path(f"/proc/{pid}/comm").read_text().strip() != comm:
            return False
        # a zombie (exited, not yet reaped by its parent) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return comm is None


def stepd_pids() -> List[int]:
    """Pids of the running ``slurmstepd`` processes (the per-job step daemons of slurmd)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "slurmstepd" and _pid_alive(int(d.name)):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def ensure_installed() -> Optional[str]:
    """Install slurm-wlm and munge with apt-get if missing; returns a reason to skip, or None."""
    if all(shutil.which(d) or os.path.exists(f"/usr/sbin/{d}") for d in DAEMONS + ["sbatch"]):
        return None
    if os.geteuid() != 0:
        return "slurm-wlm/munge are not installed and the tests do not run as root (cannot apt-get install)"
    if not shutil.which("apt-get"):
        return "slurm-wlm/munge are not installed and there is no apt-get"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # policy-rc.d exiting 101 keeps the packages' postinst from starting system daemons
    # (munged, slurmd) that nothing would stop
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                return f"{' '.join(cmd)} failed: {(r.stdout + r.stderr)[-500:]}"
    finally:
        if own_policy:
            policy.unlink()
    return None


class LocalSlurm:
    """slurmctld + slurmd (+ munged on a private socket) for one node named after this host.

    Args:
        root: an empty directory for the config, state, logs and pid files.
        cpus: CPUs of the node.
        partitions: partition names (the first is the default); each holds the one node.

    Attributes:
        conf: path of the generated slurm.conf (export ``SLURM_CONF`` to reach the cluster).
        ports: the ports slurmctld and slurmd listen on.
    """

    def __init__(self, root: Path, cpus: int = 2, partitions=("cpu", "gpu")):
        self.root = Path(root)
        self.host = socket.gethostname().split(".")[0]
        self.cpus = cpus
        self.partitions = list(partitions)
        self.conf = self.root / "slurm.conf"
        self.ports = [_free_port(), _free_port()]
        self.started: List[Tuple[str, Path]] = []
        self.stepd_before = set(stepd_pids())  # step daemons not ours (another cluster's)

    @property
    def env(self) -> dict:
        """The environment that points sbatch/squeue/scancel at this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def _write_conf(self) -> None:
        r = self.root
        for d in ("state", "spool"):
            (r / d).mkdir(parents=True, exist_ok=True)
        lines = [
            "ClusterName=captionlibtest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={self.ports[0]}",
            f"SlurmdPort={self.ports[1]}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={r / 'munge.socket'}",
            "CredType=cred/munge",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MinJobAge=600",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=2000 State=UNKNOWN",
        ]
        for i, p in enumerate(self.partitions):
            lines.append(f"PartitionName={p} Nodes={self.host} Default={'YES' if i == 0 else 'NO'} "
                         "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _run(self, name: str, cmd: List[str], pidfile: Path) -> None:
        self.started.append((name, pidfile))  # before waiting: stop() kills it even if this fails
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout + r.stderr}")
        for _ in range(100):
            if pidfile.is_file() and pidfile.read_text().strip():
                return
            time.sleep(0.1)
        raise RuntimeError(f"{name} wrote no pid file {pidfile}")

    def start(self, timeout: float = 60.0) -> None:
        """Start munged, slurmctld and slurmd; wait until the node is idle.

        Raises:
            RuntimeError: a daemon failed to start or the node never became idle (with its log).
        """
        self._write_conf()
        r = self.root
        munged = shutil.which("munged") or "/usr/sbin/munged"
        self._run("munged", [munged, "--force", "-S", str(r / "munge.socket"), f"--pid-file={r / 'munged.pid'}",
                             f"--log-file={r / 'munged.log'}", f"--seed-file={r / 'munged.seed'}"], r / "munged.pid")
        slurmctld = shutil.which("slurmctld") or "/usr/sbin/slurmctld"
        slurmd = shutil.which("slurmd") or "/usr/sbin/slurmd"
        self._run("slurmctld", [slurmctld, "-f", str(self.conf)], r / "slurmctld.pid")
        self._run("slurmd", [slurmd, "-f", str(self.conf)], r / "slurmd.pid")
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if s.returncode == 0 and s.stdout.split() and all(x == "idle" for x in s.stdout.split()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the node did not become idle in {timeout} s: {self.log_tails()}")

    def log_tails(self, chars: int = 2000) -> str:
        """The last ``chars`` characters of slurmctld.log and slurmd.log, for a failure message."""
        return "".join(f"\n==== {f} ====\n{(self.root / f).read_text(errors='replace')[-chars:]}"
                       for f in ("slurmctld.log", "slurmd.log") if (self.root / f).is_file())

    def _daemon_pids(self) -> List[int]:
        """Pids of the daemons this cluster started that still run them, in start order (munged,
        slurmctld, slurmd); a pid file's pid now running another program is left out."""
        out = []
        for name, pidfile in self.started:
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if _pid_alive(pid, name):
                out.append(pid)
        return out

    def pids(self) -> List[int]:
        """Pids of the daemons this cluster started (and of its job step daemons) still running."""
        return [p for p in stepd_pids() if p not in self.stepd_before] + self._daemon_pids()

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel every job, stop the daemons (TERM, then KILL) and wait until no process of
        theirs runs and no port of theirs is open. Idempotent.

        Raises:
            RuntimeError: a daemon or a port is still there after ``timeout`` seconds.
        """
        if self.started and shutil.which("scancel"):
            subprocess.run(["scancel", "--user", "root"], env=self.env, capture_output=True, timeout=30)
            deadline = time.time() + timeout  # let the cancelled jobs end before slurmd goes
            while time.time() < deadline:
                q = subprocess.run(["squeue", "-h"], env=self.env, capture_output=True, text=True, timeout=30)
                if q.returncode != 0 or not q.stdout.strip():
                    break
                time.sleep(0.5)
        for pid in reversed(self._daemon_pids()):  # slurmd, slurmctld, then munged
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + timeout
        while time.time() < deadline and (self.pids() or any(port_open(p) for p in self.ports)):
            time.sleep(0.2)
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        left, ports = self.pids(), [p for p in self.ports if port_open(p)]
        if left or ports:
            raise RuntimeError(f"still running after stop: pids {left}, open ports {ports}")


def start_cluster(root: Path) -> Tuple[Optional[LocalSlurm], Optional[str]]:
    """Install (if needed) and start a :class:`LocalSlurm` under ``root``.

    Returns:
        ``(cluster, None)``, or ``(None, reason)`` when this environment cannot install SLURM
        (not root, no apt-get, apt-get failing).

    Raises:
        RuntimeError: SLURM is installed but the cluster does not start (the daemons started
            so far are stopped first): a real failure, not a reason to skip.
    """
    reason = ensure_installed()
    if reason:
        return None, reason
    cluster = LocalSlurm(root, cpus=max(2, os.cpu_count() or 2))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster, None
