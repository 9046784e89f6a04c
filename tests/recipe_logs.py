"""The message of a failed recipe run: run.pl, queue.pl and slurm.pl print only
``log is in <file>``, and the error is in that file (a CI run's temporary dirs are gone
when its report is read)."""

import glob
import os
import re
import subprocess
from pathlib import Path
from typing import Union

#: A line of run.pl/queue.pl/slurm.pl naming the log of a failed job (``JOB`` for every job's).
LOG_IS_IN = re.compile(r"log is in (\S+)")


def failure_report(r: subprocess.CompletedProcess, cwd: Union[str, Path], chars: int = 8000) -> str:
    """The last ``chars`` characters of ``r``'s stdout and stderr, then the last ``chars`` of
    each log file that a ``log is in <path>`` line of them names (``path`` relative to
    ``cwd``; ``JOB`` matches each job's log); a named log that does not exist is said so."""
    out = (r.stdout or "") + (r.stderr or "")
    parts = [out[-chars:]]
    for name in dict.fromkeys(LOG_IS_IN.findall(out)):
        logs = sorted(glob.glob(os.path.join(str(cwd), glob.escape(name).replace("JOB", "*"))))
        parts += [f"\n===== {log} (last {chars} characters)\n{Path(log).read_text(errors='replace')[-chars:]}"
                  for log in logs] or [f"\n===== {name}: no such log"]
    return "".join(parts)
