"""What a training run was made with: the code's git revision and the library versions.

Each training binary (``caption_train``, ``caption_rl_train``, ``caption_pretrain_tagging``)
writes ``<output_dir>/env.yaml`` beside ``config.yaml`` (:func:`write_environment`), and
``caption_results`` lists the environments that trained the rows of ``RESULTS.md``, so a
table says which commit and which torch made it (ESPnet's RESULTS.md has an "Environments"
section for the same reason; ``config.yaml`` says with which options). ``caption_pack``
copies it into the packed model's manifest.

``env.yaml`` holds (:func:`environment`):

==================  ===========================================================================
``captionlib``      the package version (``captionlib.__version__``)
``git_revision``    ``git rev-parse HEAD`` of the checkout the imported ``captionlib`` lives in
                    (``unknown``: not a git checkout, e.g. a wheel install, or no ``git``)
``git_modified``    whether tracked files of that checkout differ from the revision
                    (``git status --porcelain --untracked-files=no``); ``null`` when unknown
``python``          ``platform.python_version()``
``torch``           ``torch.__version__`` (``2.13.0+cpu``, ``2.5.1+cu124``, ...)
``cuda``            ``torch.version.cuda`` of the build (``null``: a CPU build)
``device``          ``cpu`` or the GPU name; ``N x cpu``, ``N x <GPU name>`` under N processes
``threads``         ``torch.get_num_threads()``: CPU results change with it (float summation
                    order), e.g. 1 thread under ``OMP_NUM_THREADS=1`` against 2
==================  ===========================================================================

No date or host name is written, so two runs of the same code on the same kind of machine
write the same file.
"""

import logging
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml

from captionlib.utils.fileio import atomic_write_text

PathLike = Union[str, Path]
#: The file written in each training output dir.
ENV_FILE = "env.yaml"
#: Seconds a ``git`` call may take before the revision counts as unknown.
GIT_TIMEOUT_S = 30


def _git(args: List[str], cwd: Optional[PathLike]) -> Optional[str]:
    """The stripped stdout of ``git <args>`` in ``cwd``; ``None`` when git is missing, fails
    or takes more than :data:`GIT_TIMEOUT_S` seconds."""
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_revision(cwd: Optional[PathLike] = None) -> str:
    """``git rev-parse HEAD`` in ``cwd`` (default: the current directory), or ``"unknown"``
    (not a git checkout, no ``git`` on PATH, or a repository git refuses to read)."""
    return _git(["rev-parse", "HEAD"], cwd) or "unknown"


def git_modified(cwd: Optional[PathLike] = None) -> Optional[bool]:
    """Whether tracked files of the checkout at ``cwd`` differ from its ``HEAD`` (staged or
    not; untracked and ignored files do not count); ``None`` when git cannot tell."""
    out = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    return None if out is None else bool(out)


def source_dir() -> Path:
    """The directory that holds the imported ``captionlib`` package (the repository root
    of a source checkout or an editable install)."""
    return Path(__file__).resolve().parents[2]


def environment(device: str = "cpu") -> Dict[str, Any]:
    """The environment of this process, as written to ``env.yaml`` (see the module docstring).

    Args:
        device: the ``device`` entry (``"cpu"``, ``"NVIDIA H100 80GB HBM3"``, ``"2 x ..."``).

    Returns:
        ``{captionlib, git_revision, git_modified, python, torch, cuda, device, threads}``.
    """
    import torch

    import captionlib

    src = source_dir()
    revision = git_revision(src)
    return {
        "captionlib": captionlib.__version__,
        "git_revision": revision,
        "git_modified": None if revision == "unknown" else git_modified(src),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": None if torch.version.cuda is None else str(torch.version.cuda),
        "device": device,
        "threads": torch.get_num_threads(),
    }


def describe(env: Dict[str, Any]) -> str:
    """One line for an ``env.yaml`` mapping, e.g. ``captionlib 0.1.0 (git c1c2108), torch
    2.13.0+cpu, Python 3.12.3, cpu, 2 threads``; ``(git c1c2108, modified)`` when tracked files
    differed."""
    revision = str(env.get("git_revision", "unknown"))
    git = f"git {revision[:7]}" if revision != "unknown" else "no git revision"
    if env.get("git_modified"):
        git += ", modified"
    cuda = f" (CUDA {env['cuda']})" if env.get("cuda") else ""
    return (f"captionlib {env.get('captionlib', '?')} ({git}), torch {env.get('torch', '?')}{cuda}, "
            f"Python {env.get('python', '?')}, {env.get('device', '?')}, {env.get('threads', '?')} threads")


def read_environment(path: PathLike) -> Optional[Dict[str, Any]]:
    """The mapping of an ``env.yaml`` file; ``None`` when the file does not exist.

    Raises:
        ValueError: naming the file, when it is not a YAML mapping.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read the environment file: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a YAML mapping, got {type(obj).__name__}")
    return obj


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


def numbered_copies(path: PathLike) -> List[Path]:
    """The existing ``<path>.1``, ``<path>.2``, ... in order, up to the first missing number."""
    path = Path(path)
    found = []
    while (copy := path.with_name(f"{path.name}.{len(found) + 1}")).exists():
        found.append(copy)
    return found


def keep_previous(path: PathLike) -> Path:
    """Move ``path`` to the next free ``<path>.N`` (N = 1, 2, ...) and return that name."""
    path = Path(path)
    kept = path.with_name(f"{path.name}.{len(numbered_copies(path)) + 1}")
    os.replace(path, kept)
    return kept


def write_environment(output_dir: PathLike, env: Dict[str, Any], resuming: bool) -> None:
    """Write ``env`` to ``<output_dir>/env.yaml`` (atomically) and log it.

    A run that resumes (``resuming``) in another environment than the ``env.yaml`` it left
    keeps that file as ``env.yaml.N`` and logs a warning naming what changed, so the model's
    epochs stay attributed to the code that trained them; in the same one it leaves the file
    as it is. A fresh run replaces the file and removes the ``env.yaml.N`` of the run it
    replaces.

    Raises:
        ValueError: naming the file, for an existing ``env.yaml`` that is not a YAML mapping.
    """
    path = Path(output_dir) / ENV_FILE
    logging.info("environment: %s", describe(env))
    if not resuming:
        for stale in numbered_copies(path):
            stale.unlink()
    old = read_environment(path) if resuming else None
    if old == env:
        return
    if old is not None:
        changed = [f"{k}: {old.get(k)!r} -> {env.get(k)!r}" for k in dict.fromkeys([*old, *env])
                   if old.get(k) != env.get(k)]
        kept = keep_previous(path)
        logging.warning("%s resumes in another environment than it started in (kept as %s): %s",
                        output_dir, kept.name, "; ".join(changed))
    atomic_write_text(path, yaml.safe_dump(env, sort_keys=False))
