"""Atomic checkpoint writing and the n-best bookkeeping of an experiment directory."""

import contextlib
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Union

import torch


@contextlib.contextmanager
def atomic_open(path: Union[str, Path]) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing; when the block ends without
    an error it is flushed, fsynced and renamed to ``path`` (``os.replace``), otherwise removed.

    A crash never leaves a truncated file: readers see the old file or the new one. Parent
    directories are created.

    Example:
        >>> with atomic_open("exp/a/model.zip") as f:
        ...     f.write(data)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_save(obj: Any, path: Union[str, Path]) -> None:
    """``torch.save`` to a temporary file in the same directory, then ``os.replace``
    (see :func:`atomic_open`)."""
    with atomic_open(path) as f:
        torch.save(obj, f)


def load_checkpoint(path: Union[str, Path], map_location: Any = "cpu") -> Any:
    """``torch.load`` of a checkpoint or model file written by :func:`atomic_save`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is truncated or not a torch checkpoint, naming the path.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model/checkpoint file")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # zip/pickle errors of a truncated or foreign file
        raise ValueError(f"{path}: cannot read this model/checkpoint file, truncated or not written by "
                         f"torch.save ({type(e).__name__}: {e})") from e


def atomic_write_text(path: Union[str, Path], text: str) -> None:
    """Write a UTF-8 text file atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as f:
        f.write(text.encode("utf-8"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


@contextlib.contextmanager
def exp_dir_lock(exp_dir: Union[str, Path]) -> Iterator[Path]:
    """Hold ``<exp_dir>/.lock`` (``<pid> <host>``) while training in ``exp_dir``, so that a
    second trainer started on the same directory stops at once instead of interleaving
    checkpoints. A lock left by a process that no longer runs on this host is taken over.

    Raises:
        RuntimeError: the lock is held by a live process (or by one on another host, which
            cannot be checked from here), naming the lock file, PID and host.
    """
    lock = Path(exp_dir) / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"{os.getpid()} {socket.gethostname()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            held = lock.read_text().split()
            pid, host = (int(held[0]), held[1]) if len(held) == 2 and held[0].isdigit() else (None, None)
            if pid is not None and host == socket.gethostname() and not _pid_alive(pid):
                lock.unlink(missing_ok=True)  # stale: its process is gone
                continue
            raise RuntimeError(
                f"{exp_dir} is in use by process {' on '.join(held) or '?'} (lock file {lock}); wait for it to "
                f"finish, or remove the lock file if that process is gone"
            ) from None
        with os.fdopen(fd, "w") as f:
            f.write(me + "\n")
        break
    try:
        yield lock
    finally:
        if lock.is_file() and lock.read_text().strip() == me:
            lock.unlink()
