"""What a training run was made with: the code's git revision and the library versions.

The trainer (:class:`captionlib.train.trainer.Trainer`, so ``caption_train``,
``caption_rl_train`` and ``caption_pretrain_tagging``) writes ``<output_dir>/env.yaml``
beside ``config.yaml`` once this run's first epoch is saved (:func:`write_environment`), and
``caption_results`` lists the environments that trained the rows of ``RESULTS.md``, so a
table says which commit and which torch made it (ESPnet's RESULTS.md has an "Environments"
section for the same reason; ``config.yaml`` says with which options). ``caption_pack``
copies them into the packed model's manifest.

``env.yaml`` holds (:func:`environment`):

==================  ===========================================================================
``captionlib``      the package version (``captionlib.__version__``)
``git_revision``    ``git rev-parse HEAD`` of the git checkout whose top directory holds the
                    imported ``captionlib`` (``unknown``: no such checkout, e.g. a wheel
                    installed into a virtual environment, or no ``git``)
``git_modified``    whether the checkout's tracked code differs from the revision
                    (:data:`CODE_PATHS`; ``null`` when unknown)
``python``          ``platform.python_version()``
``torch``           ``torch.__version__`` (``2.13.0+cpu``, ``2.5.1+cu124``, ...)
``cuda``            ``torch.version.cuda`` of the build (``null``: a CPU build)
``device``          ``cpu`` or the GPU name; ``N x cpu``, ``N x <GPU name>`` under N processes
``cpu``             the processor's model name (``/proc/cpuinfo``; ``platform.machine()``
                    elsewhere): CPU results change with the vector kernels it runs
``threads``         ``torch.get_num_threads()``: CPU results change with it (float summation
                    order), e.g. 1 thread under ``OMP_NUM_THREADS=1`` against 2
==================  ===========================================================================

No date or host name is written, so two runs of the same code on the same kind of machine
write the same file.
"""

import glob
import logging
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from captionlib.utils.fileio import atomic_write_text, read_yaml_mapping

PathLike = Union[str, Path]
#: The file written in each training output dir.
ENV_FILE = "env.yaml"
#: Seconds a ``git`` call may take before the revision counts as unknown.
GIT_TIMEOUT_S = 30
#: The checkout's paths whose changes make ``git_modified`` true: the code that trains (the
#: recipes' own files, e.g. a regenerated ``RESULTS.md`` or an edited ``conf/``, do not count;
#: the options are in ``config.yaml``).
CODE_PATHS = ("captionlib", "captionbin", "utils", "egs/TEMPLATE", "setup.py")


def _git(args: List[str], cwd: Optional[PathLike]) -> Optional[str]:
    """The stripped stdout of ``git <args>`` in ``cwd``; ``None`` when git is missing, fails
    or takes more than :data:`GIT_TIMEOUT_S` seconds. Takes no optional lock
    (``GIT_OPTIONAL_LOCKS=0``: ``git status`` leaves the index alone, so a user's own ``git``
    commands beside a training run do not meet an ``index.lock``)."""
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                           env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_revision(cwd: Optional[PathLike] = None) -> str:
    """``git rev-parse HEAD`` in ``cwd`` (default: the current directory), or ``"unknown"``
    (not a git checkout, no ``git`` on PATH, or a repository git refuses to read)."""
    return _git(["rev-parse", "HEAD"], cwd) or "unknown"


def git_modified(cwd: Optional[PathLike] = None, paths: Sequence[str] = ()) -> Optional[bool]:
    """Whether tracked files of the checkout at ``cwd`` (under ``paths``, relative to ``cwd``;
    all files when empty) differ from its ``HEAD``, staged or not (untracked and ignored files
    do not count); ``None`` when git cannot tell."""
    out = _git(["status", "--porcelain", "--untracked-files=no", "--", *paths], cwd)
    return None if out is None else bool(out)


def source_dir() -> Path:
    """The directory that holds the imported ``captionlib`` package (the repository root
    of a source checkout or an editable install)."""
    return Path(__file__).resolve().parents[2]


def code_revision() -> Tuple[str, Optional[bool]]:
    """``(git_revision, git_modified)`` of the code that runs: of the checkout whose top
    directory is :func:`source_dir`; ``("unknown", None)`` when there is none (a wheel in a
    virtual environment inside some other repository does not take that repository's)."""
    src = source_dir()
    top = _git(["rev-parse", "--show-toplevel"], src)
    if top is None or Path(top).resolve() != src:
        return "unknown", None
    return git_revision(src), git_modified(src, [p for p in CODE_PATHS if (src / p).exists()])


def cpu_name() -> str:
    """The processor's model name (the first ``model name`` of ``/proc/cpuinfo``), or
    ``platform.machine()`` where that file is missing or has none."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return found.group(1).strip() if found else platform.machine()


def environment(device: str = "cpu") -> Dict[str, Any]:
    """The environment of this process, as written to ``env.yaml`` (see the module docstring).

    Args:
        device: the ``device`` entry (``"cpu"``, ``"NVIDIA H100 80GB HBM3"``, ``"2 x ..."``).

    Returns:
        ``{captionlib, git_revision, git_modified, python, torch, cuda, device, cpu, threads}``.
    """
    import torch

    import captionlib

    revision, modified = code_revision()
    return {
        "captionlib": captionlib.__version__,
        "git_revision": revision,
        "git_modified": modified,
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": None if torch.version.cuda is None else str(torch.version.cuda),
        "device": device,
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
    }


#: What :func:`write_environment` keeps as ``env.yaml.N`` for the epochs trained before it when a
#: resumed run has no ``env.yaml`` (a run of a captionlib that did not write one).
NOT_RECORDED = {"not_recorded": "the epochs before this file's run were trained without env.yaml"}


def describe(env: Dict[str, Any]) -> str:
    """One line for an ``env.yaml`` mapping, e.g. ``captionlib 0.1.0 (git c1c2108), torch
    2.13.0+cpu, Python 3.12.3, cpu (AMD EPYC), 2 threads``; ``(git c1c2108, modified)`` when
    the tracked code differed; ``not recorded`` for :data:`NOT_RECORDED`."""
    if "not_recorded" in env:
        return "not recorded"
    revision = str(env.get("git_revision", "unknown"))
    git = f"git {revision[:7]}" if revision != "unknown" else "no git revision"
    if env.get("git_modified"):
        git += ", modified"
    cuda = f" (CUDA {env['cuda']})" if env.get("cuda") else ""
    device = str(env.get("device", "?"))
    if device.endswith("cpu") and env.get("cpu"):
        device += f" ({env['cpu']})"
    threads = env.get("threads", "?")
    return (f"captionlib {env.get('captionlib', '?')} ({git}), torch {env.get('torch', '?')}{cuda}, "
            f"Python {env.get('python', '?')}, {device}, {threads} thread{'' if threads == 1 else 's'}")


def read_environment(path: PathLike) -> Optional[Dict[str, Any]]:
    """The mapping of an ``env.yaml`` file; ``None`` when the file does not exist.

    Raises:
        ValueError: naming the file, when it is not a YAML mapping.
    """
    return read_yaml_mapping(path, "the environment file")


def changes(old: Mapping[str, Any], new: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None,
            ignore: Sequence[str] = ()) -> List[str]:
    """``"key: old -> new"`` for each key of ``old`` or ``new`` (in that order) whose values
    differ, a key missing from ``old`` taken at its ``defaults`` value, keys of ``ignore``
    left out: the lines of a resume's warning (``config.yaml``, ``env.yaml``)."""
    defaults = defaults or {}
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in dict.fromkeys([*old, *new])
            if k not in ignore and old.get(k, defaults.get(k)) != new.get(k)]


def run_environments(output_dir: PathLike) -> List[Dict[str, Any]]:
    """The environments a training dir was trained in, first to last: ``env.yaml.1``,
    ``env.yaml.2``, ... (kept by :func:`write_environment` when a resume ran elsewhere),
    then ``env.yaml``; ``[]`` when it has none (a run older than ``env.yaml``).

    Raises:
        ValueError: naming the file, for one that is not a YAML mapping.
    """
    out = Path(output_dir)
    envs = [read_environment(p) for p in numbered_copies(out / ENV_FILE)]
    current = read_environment(out / ENV_FILE)
    return [e for e in envs + [current] if e is not None]


def _numbered(path: Path) -> List[Tuple[int, Path]]:
    """``(N, <path>.N)`` of the existing copies (N a positive number, no leading zero), by N."""
    pattern = re.compile(re.escape(path.name) + r"\.([1-9][0-9]*)")
    return sorted((int(m.group(1)), p) for p in path.parent.glob(f"{glob.escape(path.name)}.*")
                  if (m := pattern.fullmatch(p.name)))


def numbered_copies(path: PathLike) -> List[Path]:
    """The existing ``<path>.N`` files (N a positive number, no leading zero), by N."""
    return [p for _, p in _numbered(Path(path))]


def keep_previous(path: PathLike) -> Path:
    """Move ``path`` to ``<path>.N``, N one more than the highest existing copy (1 for the
    first), and return that name.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    copies = _numbered(path)
    kept = path.with_name(f"{path.name}.{copies[-1][0] + 1 if copies else 1}")
    os.replace(path, kept)
    return kept


def write_environment(output_dir: PathLike, env: Dict[str, Any], resuming: bool) -> None:
    """Write ``env`` to ``<output_dir>/env.yaml`` (atomically) and log it.

    Called once a run has saved its first epoch. A run that resumes (``resuming``: epochs
    were trained before it) in another environment than the ``env.yaml`` it left keeps that
    file as ``env.yaml.N`` and logs a warning naming what changed, so the model's epochs stay
    attributed to the code that trained them; in the same one it leaves the file as it is. A
    resumed run without ``env.yaml`` keeps :data:`NOT_RECORDED` as ``env.yaml.N`` for the
    epochs before it. An ``env.yaml`` that cannot be read is kept as ``env.yaml.N`` with a
    warning (training goes on; ``caption_results`` names the file). A fresh run replaces the
    file and removes the ``env.yaml.N`` of the run it replaces.
    """
    path = Path(output_dir) / ENV_FILE
    logging.info("environment: %s", describe(env))
    if not resuming:
        for stale in numbered_copies(path):
            stale.unlink()
    else:
        try:
            old = read_environment(path)
        except ValueError as e:
            logging.warning("%s (kept as %s)", e, keep_previous(path).name)
        else:
            if old == env:
                return
            if old is None:
                atomic_write_text(path, yaml.safe_dump(NOT_RECORDED, sort_keys=False))
                logging.warning("%s: its epochs before this run were trained without env.yaml (kept as %s: not "
                                "recorded)", output_dir, keep_previous(path).name)
            else:
                logging.warning("%s resumes in another environment than it started in (kept as %s): %s",
                                output_dir, keep_previous(path).name, "; ".join(changes(old, env)))
    atomic_write_text(path, yaml.safe_dump(env, sort_keys=False))
