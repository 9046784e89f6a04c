"""File I/O that every layer needs: atomic writes, loading torch files without running code,
and the lock of an experiment directory.

Loading is safe: :func:`load_checkpoint` reads model files, checkpoints (``latest.pth``) and
packed-model members with ``torch.load(weights_only=True)``, which rebuilds tensors and plain
Python values (dict, list, tuple, str, bytes, int, float, bool, None) and refuses any other
type, so a crafted file cannot run code when it is loaded (a pickle can name any callable,
e.g. ``os.system``; see the ``weights_only`` notes of ``torch.load``). Files written by older
captionlib versions that held other types are converted once by
``captionbin.caption_convert_model``.

torch is imported inside the functions that need it, so that the torch-free layers
(:mod:`captionlib.metrics`) can write files atomically without importing it.
"""

import codecs
import contextlib
import functools
import io
import os
import pickle
import re
import socket
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import yaml

PathLike = Union[str, Path]


def convert_command(path: PathLike, output: str = "<new file>") -> str:
    """The command line that converts ``path`` from an older, pickled captionlib format into
    the safe one (``captionbin.caption_convert_model``)."""
    return (f"python -m captionbin.caption_convert_model --trust_pickle true --input {os.fspath(path)} "
            f"--output {output}")


class UnsafeFileError(ValueError):
    """A file that would need unsafe (code-running) unpickling to be loaded.

    Attributes:
        path: the file, as named in the message.
        refused: the module-qualified names of the types/callables it needs (``[]`` if unknown).
    """

    def __init__(self, message: str, path: str, refused: List[str]):
        super().__init__(message)
        self.path, self.refused = path, refused


def _read_umask() -> int:
    """The process's file-creation mask (read by setting it and setting it back: done once, at
    import, as it is not thread-safe)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


@contextlib.contextmanager
def atomic_open(path: PathLike) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path`` for binary writing; when the block ends without
    an error it is flushed, fsynced and renamed to ``path`` (``os.replace``), otherwise removed.

    A crash never leaves a truncated file: readers see the old file or the new one. Parent
    directories are created. The file gets the mode that ``open`` would give it (0666 less the
    umask the process had when this module was imported), not ``mkstemp``'s 0600. A failed
    write (a full disk: ``OSError``, or torch's ``RuntimeError`` from its zip writer) is raised
    again naming ``path``.

    Example:
        >>> with atomic_open("exp/a/model.zip") as f:
        ...     f.write(data)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the file from the group
        except OSError:  # a file system without modes (vfat, some CIFS mounts)
            pass
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise OSError(e.errno, f"writing {path}: {e.strerror or e}") from e
        if isinstance(e, RuntimeError):
            raise RuntimeError(f"writing {path}: {e}") from e
        raise


def atomic_write_text(path: PathLike, text: str) -> None:
    """Write a UTF-8 text file atomically (see :func:`atomic_open`). File names that are not
    UTF-8 (held by Python as surrogate escapes) are written back as their original bytes."""
    with atomic_open(path) as f:
        f.write(text.encode("utf-8", "surrogateescape"))


def read_yaml_mapping(path: PathLike, what: str) -> Optional[Dict[str, Any]]:
    """The YAML mapping of the file ``path`` (a ``config.yaml``, an ``env.yaml``); ``None``
    when the file does not exist.

    Raises:
        ValueError: naming the file and ``what`` it should hold, when it cannot be read as
            UTF-8 YAML or is not a mapping.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read {what}: {e}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a YAML mapping, got {type(obj).__name__}")
    return obj


def check_writable(path: PathLike, inputs: Sequence[Optional[PathLike]] = ()) -> None:
    """Check, before any long work, that a file can be written at ``path`` (by
    :func:`atomic_open`: its missing parent directories made): ``path`` is no directory,
    its nearest existing ancestor is a directory we may write in, and it is none of the
    files in ``inputs`` (``None`` entries are ignored), which the output would replace.

    Raises:
        ValueError: naming ``path`` and what is in the way.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory; expected the path of an output file")
    for other in inputs:
        if other is not None and (os.path.realpath(other) == os.path.realpath(path)
                                  or (path.exists() and os.path.exists(other) and os.path.samefile(other, path))):
            raise ValueError(f"{path}: is also an input ({other}); writing there would replace it")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{path}: cannot be written: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{path}: cannot be written: no write permission in {parent}")


def atomic_save(obj: Any, path: PathLike) -> None:
    """``torch.save`` to a temporary file in the same directory, then ``os.replace``
    (see :func:`atomic_open`). ``obj`` should hold only what :func:`load_checkpoint` loads:
    tensors and plain Python values."""
    import torch

    with atomic_open(path) as f:
        torch.save(obj, f)


#: what np.load / NpzFile raise for a truncated, corrupt or foreign file
NPY_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)
_NUMERIC_KINDS = "biufc"  # bool, signed and unsigned integers, floats, complex numbers


def load_numeric_arrays(path: PathLike, what: str, fix: str) -> Union[np.ndarray, Dict[str, np.ndarray]]:
    """An ``.npy`` array, or every array of an ``.npz`` archive (by name), read with
    ``np.load(allow_pickle=False)`` and checked to hold numbers (bool, int, float, complex).

    Args:
        path: the file (named in every message).
        what: what the file is given as, e.g. ``"--feats_stats (feature statistics)"``.
        fix: how to write a good one, ending the messages (e.g. ``"recompute it with ..."``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: one line naming ``path`` and ``what``: an object array or a pickle (refused:
            loading it would unpickle, and a pickle can run code), an array of another
            non-numeric dtype (strings, records, dates), or a file numpy cannot read.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file ({what})")
    plain = f"{what} must hold plain numeric arrays (np.save / np.savez of numbers)"
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                arrays = {k: loaded[k] for k in loaded.files}
        else:
            arrays = {"": loaded}
    except NPY_ERRORS as e:
        if "allow_pickle=False" in str(e):  # numpy's refusal of an object array or of a pickled file
            raise ValueError(f"{path}: {plain}; it holds an object array or a pickle, refused because loading "
                             f"it would unpickle (and unpickling can run code): {fix}") from None
        raise ValueError(f"{path}: cannot read {what} ({type(e).__name__}: {e}): {fix}") from None
    for name, arr in arrays.items():
        if arr.dtype.kind not in _NUMERIC_KINDS:
            shown = f"array {name!r}" if name else "the array"
            raise ValueError(f"{path}: {plain}; {shown} has dtype {arr.dtype}: {fix}")
    return arrays[""] if "" in arrays and len(arrays) == 1 else arrays


def numpy_safe_globals() -> List[Any]:
    """The pickle globals that rebuild numpy arrays and scalars of numbers, for
    ``torch.serialization.safe_globals``, and nothing else.

    The authors' training scripts save more than the weights: PANNs' ``main.py`` writes
    ``{"iteration", "model", "sampler"}``, the sampler's state holding numpy index arrays and
    integers, so ``torch.load(weights_only=True)`` refuses the published ``Cnn14_mAP=0.431.pth``
    (autrainer issue #66). Allowed: ``ndarray`` and ``dtype`` (classes whose rebuilding runs
    no code of the file), the array and scalar constructors ``_reconstruct`` and ``scalar``
    under both the names numpy 1 pickles them with (``numpy.core.multiarray``) and numpy 2's
    (``numpy._core.multiarray``), and the dtype classes of booleans, integers, floats and
    complex numbers (numpy >= 1.25 builds each dtype as an instance of one: ``Int64DType``
    ...). Object, string, structured and datetime dtypes stay refused.
    """
    reconstruct = np.empty(0).__reduce__()[0]  # numpy's own functions, whatever module holds them
    scalar = np.int64(0).__reduce__()[0]
    named = [(f, f"numpy.{core}.multiarray.{name}") for f, name in ((reconstruct, "_reconstruct"), (scalar, "scalar"))
             for core in ("core", "_core")]
    codes = np.typecodes["AllInteger"] + np.typecodes["AllFloat"] + "?"
    dtype_classes = sorted({type(np.dtype(c)) for c in codes} - {np.dtype}, key=str)
    return [np.ndarray, np.dtype] + named + dtype_classes


@functools.lru_cache(maxsize=1)
def _unpickler_globals() -> Dict[str, Any]:
    """:func:`numpy_safe_globals` by the name a pickle gives them, with the two more that
    plain ``pickle`` (not ``torch.save``) writes for numpy arrays: ``_frombuffer`` (protocol 5)
    and ``_codecs.encode`` (the bytes of protocol 2)."""
    names = {}
    for g in numpy_safe_globals():
        obj, name = g if isinstance(g, tuple) else (g, f"{g.__module__}.{g.__qualname__}")
        names[name] = obj
    frombuffer = np.arange(1).__reduce_ex__(5)[0]
    names.update({f"numpy.{core}.numeric._frombuffer": frombuffer for core in ("core", "_core")})
    names["_codecs.encode"] = codecs.encode
    return names


class _RefusedGlobal(pickle.UnpicklingError):
    """A global that :class:`_NumpyUnpickler` does not allow."""


class _NumpyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        obj = _unpickler_globals().get(f"{module}.{name}")
        if obj is None:
            raise _RefusedGlobal(f"refused global {module}.{name}: only numpy arrays and numbers are read")
        return obj


class _Inert:
    """What :class:`_GlobalsScanner` hands the pickle for every global it names: calling,
    building or filling it does nothing (so scanning runs no code of the pickle)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "_Inert":
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_Inert":
        return _Inert()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


class _GlobalsScanner(pickle.Unpickler):
    """Reads a pickle of any protocol only to record the globals it names (each replaced by
    :class:`_Inert`; persistent ids, e.g. torch's storages, by ``None``)."""

    def __init__(self, file: BinaryIO):
        super().__init__(file)
        self.names: List[str] = []

    def find_class(self, module: str, name: str) -> Any:
        self.names.append(f"{module}.{name}")
        return _Inert

    def persistent_load(self, pid: Any) -> None:
        return None


def _pickle_globals(data: bytes) -> List[str]:
    """The globals (classes, functions) named by the pickles of ``data`` (several one after
    the other, as torch's legacy format writes them), in order, each once; nothing of the
    pickle is run. A malformed pickle gives the names read up to the damage."""
    names: List[str] = []
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        scanner = _GlobalsScanner(stream)
        try:
            scanner.load()
        except Exception:  # damaged, or a value our stand-in cannot fill: keep what was read
            names += scanner.names
            break
        names += scanner.names
    return list(dict.fromkeys(names))


def safe_unpickle(data: bytes) -> Any:
    """A plain pickle read without running code from it: containers, strings, numbers and numpy
    arrays and scalars of numbers (:func:`numpy_safe_globals`); any other class or function it
    names is refused (the restricted ``Unpickler.find_class`` of the ``pickle`` docs).

    Raises:
        pickle.UnpicklingError: the pickle names other globals (the message lists every one of
            them, and only them), or is malformed; EOFError, ValueError: a truncated or
            unreadable pickle.
    """
    try:
        return _NumpyUnpickler(io.BytesIO(data)).load()
    except _RefusedGlobal as e:
        refused = [n for n in _pickle_globals(data) if n not in _unpickler_globals()] or [str(e).split()[2][:-1]]
        raise pickle.UnpicklingError(
            f"refused global{'s' if len(refused) > 1 else ''} {', '.join(refused)}: only numpy arrays and numbers "
            "are read (unpickling other classes or functions could run code)") from None


def _numpy_global_names() -> List[str]:
    """The names (``module.qualname``) of :func:`numpy_safe_globals`."""
    return [g[1] if isinstance(g, tuple) else f"{g.__module__}.{g.__qualname__}" for g in numpy_safe_globals()]


def _torch_allowed_globals() -> set:
    """The globals ``torch.load(weights_only=True)`` allows (torch's own, and any added with
    ``add_safe_globals``), by name; empty with a torch that does not expose them."""
    import torch

    unpickler = getattr(torch, "_weights_only_unpickler", None)
    names = set()
    for getter in ("_get_allowed_globals", "_get_user_allowed_globals"):
        try:
            names |= set(getattr(unpickler, getter)())
        except Exception:  # another torch version: the caller falls back on torch's message
            pass
    return names


def _pickle_bytes(source: Union[Path, BinaryIO]) -> bytes:
    """The pickle of a torch file: the ``data.pkl`` member of the zip format, else the whole
    file (the legacy format, or a plain pickle)."""
    if isinstance(source, Path):
        data = source.read_bytes()
    else:
        source.seek(0)
        data = source.read()
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                member = next((n for n in z.namelist() if n.rsplit("/", 1)[-1] == "data.pkl"), None)
                return z.read(member) if member is not None else b""
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error):
            return b""
    return data


def refused_globals(source: Union[Path, BinaryIO], message: str, numpy_values: bool = False) -> List[str]:
    """The globals of a torch file that ``torch.load(weights_only=True)`` refused (read from its
    pickle without running it), without those :func:`numpy_safe_globals` let through when
    ``numpy_values``; else the one named in torch's error ``message``.

    torch's own scan (``get_unsafe_globals_in_checkpoint``) reads the zip format of pickle
    protocol 2 only; other files (the legacy format, a plain pickle, a pickle of protocol 4 or 5,
    which ``weights_only`` cannot read at all) are scanned with :func:`_pickle_globals`."""
    import torch

    allowed = set(_numpy_global_names()) if numpy_values else set()
    try:
        if not isinstance(source, (str, Path)):
            source.seek(0)
        names = torch.serialization.get_unsafe_globals_in_checkpoint(source)
    except Exception:  # not torch's zip format of protocol 2: scan the pickle ourselves
        torch_allowed = _torch_allowed_globals()
        names = [n for n in _pickle_globals(_pickle_bytes(source)) if n not in torch_allowed] if torch_allowed else []
    refused = sorted(n for n in names if n not in allowed)
    return refused or [n for n in re.findall(r"GLOBAL ([\w.]+)", message)[:1] if n not in allowed]


def _reason(error: Exception) -> str:
    """The gist of a ``torch.load`` error: for ``weights_only``'s, the unpickler's own words
    (not torch's advice to retry with the check turned off)."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
    text = " ".join(text.split("Check the documentation of torch.load")[0].split())
    if text.startswith("Unsupported operand"):  # e.g. FRAME (149), of pickle protocol 4 and 5
        text += (" of a pickle protocol that weights_only loading cannot read: save it again with torch.save's "
                 "default pickle_protocol")
    return text


def load_checkpoint(path: PathLike, map_location: Any = "cpu", data: Optional[bytes] = None,
                    member: Optional[str] = None, numpy_values: bool = False) -> Any:
    """``torch.load(weights_only=True)`` of a model file, checkpoint or packed-model member:
    tensors and plain Python values only, so that loading never runs code.

    Args:
        path: the file (named in every message).
        map_location: as ``torch.load``.
        data: the file's bytes, when it is not on disk (``path`` then only names it).
        member: ``data`` is this member of the archive ``path`` (e.g. ``model.pth`` of a packed
            model), named ``<path> (member <member>)`` in messages; the converter command
            names the archive.
        numpy_values: also let numpy arrays and scalars of numbers through
            (:func:`numpy_safe_globals`: the authors' checkpoints of pretrained encoders, the
            ``latest.pth`` of older versions being converted). Needs
            ``torch.serialization.safe_globals`` (torch >= 2.6); an older torch refuses them.

    Raises:
        FileNotFoundError: no such file.
        UnsafeFileError: (a ValueError) the file holds other types, naming the file, the types
            refused (only those: not numpy's let through by ``numpy_values``; any pickle
            protocol, torch's zip or legacy format) and the converter command (the ``latest.pth``
            of older captionlib versions holds numpy's RNG state and is converted once with
            ``caption_convert_model``).
        ValueError: the file is truncated or not a torch file (or one weights_only cannot
            read for another reason), naming the path.
    """
    import torch

    name = f"{path} (member {member})" if member is not None else os.fspath(path)
    if data is None and not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such model/checkpoint file")
    source = io.BytesIO(data) if data is not None else Path(path)
    allow = getattr(torch.serialization, "safe_globals", None) if numpy_values else None
    try:
        with allow(numpy_safe_globals()) if allow is not None else contextlib.nullcontext():
            return torch.load(source, map_location=map_location, weights_only=True)
    except Exception as e:  # zip/pickle errors of a truncated or foreign file, or a refused global
        refused = refused_globals(source, str(e), numpy_values) if isinstance(e, pickle.UnpicklingError) else []
        if refused:
            raise UnsafeFileError(
                f"{name}: refused to load: it holds other things than tensors and plain Python values "
                f"({', '.join(refused)}), and unpickling them could run code. Model files, checkpoints and packed "
                "models of this captionlib never do; a file written by an older captionlib is converted once with "
                f"`{convert_command(path)}` (only for files you made yourself)", name, refused) from None
        raise ValueError(f"{name}: cannot read this model/checkpoint file, truncated or not written by "
                         f"torch.save ({type(e).__name__}: {_reason(e)})") from e


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


#: Exported by egs/TEMPLATE/caption.sh (its PID): the top of a trainer's launcher chain.
PIPELINE_PID_ENV = "CAPTIONLIB_PIPELINE_PID"
MAX_LAUNCHERS = 16  # ancestors followed at most (run.pl -> torchrun -> ... is 4 deep)


def _parent_of(pid: int) -> Optional[int]:
    """The parent PID of ``pid`` from ``/proc`` (Linux), or ``None`` where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])  # "pid (comm) state ppid ...": comm may hold spaces


def _launchers() -> List[int]:
    """The processes this one's run depends on, nearest first: its parent (run.pl's job,
    torchrun, a shell), and on Linux every ancestor up to the pipeline that started it
    (``$CAPTIONLIB_PIPELINE_PID``: caption.sh, so that a killed run.pl between them counts)."""
    chain = [os.getppid()]
    top = os.environ.get(PIPELINE_PID_ENV, "")
    if not top.isdigit():
        return chain
    while chain[-1] != int(top):
        parent = _parent_of(chain[-1])
        if parent is None or parent <= 1 or len(chain) >= MAX_LAUNCHERS:
            return chain[:1]  # the pipeline is no ancestor (e.g. it runs on another host): the parent only
        chain.append(parent)
    return chain


def _read_lock(lock: Path) -> Tuple[Optional[int], Optional[str], List[int]]:
    """PID, host and launcher PIDs of a lock file ``<pid> <host> [<launcher>,...]``
    (``None``, ``None``, ``[]`` for an unreadable or malformed one)."""
    try:
        held = lock.read_text().split()
    except OSError:
        return None, None, []
    if len(held) < 2 or not held[0].isdigit():
        return None, None, []
    launchers = [int(p) for p in held[2].split(",") if p.isdigit()] if len(held) > 2 else []
    return int(held[0]), held[1], launchers


def _in_use_message(exp_dir: PathLike, lock: PathLike, pid: Optional[int], host: Optional[str],
                    launchers: Sequence[int]) -> str:
    """The "in use" error of :func:`exp_dir_lock`. When the holder runs on this host but one of
    its launchers (recorded in the lock) is gone (e.g. run.pl or torchrun was killed with
    ``kill -9``), it says so, and how to stop the orphaned holder."""
    msg = f"{exp_dir} is in use by process {pid if pid is not None else '?'} on {host or '?'} (lock file {lock})"
    gone = [p for p in launchers if not _pid_alive(p)] if host == socket.gethostname() else []
    if pid is not None and gone:
        return (f"{msg}; its launcher (process {gone[0]}) is gone, so nothing waits for it (an orphan, e.g. of "
                f"a killed run.pl or torchrun): stop it with `kill {pid}`, then run again")
    return f"{msg}; wait for it to finish, or remove the lock file if that process is gone"


@contextlib.contextmanager
def exp_dir_lock(exp_dir: PathLike) -> Iterator[Path]:
    """Hold ``<exp_dir>/.lock`` while training in ``exp_dir``, so that a second trainer started
    on the same directory stops at once instead of interleaving checkpoints. A lock left by a
    process that no longer runs on this host is taken over.

    The lock file holds ``<pid> <host> <launcher pids, comma-separated>``: the launchers
    (parent, and up to the caption.sh that started it, see :func:`_launchers`) let the error
    tell an orphaned holder (its launcher killed) from a live run.
    egs/TEMPLATE/caption.sh reads the same file before it starts a trainer.

    Raises:
        RuntimeError: the lock is held by a live process (or by one on another host, which
            cannot be checked from here), naming the lock file, PID and host; and, when the
            holder's launcher is gone, saying so and how to stop it (``kill <pid>``).
    """
    lock = Path(exp_dir) / ".lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    me = f"{os.getpid()} {socket.gethostname()}"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pid, host, launchers = _read_lock(lock)
            if pid is not None and host == socket.gethostname() and not _pid_alive(pid):
                lock.unlink(missing_ok=True)  # stale: its process is gone
                continue
            raise RuntimeError(_in_use_message(exp_dir, lock, pid, host, launchers)) from None
        with os.fdopen(fd, "w") as f:
            f.write(f"{me} {','.join(map(str, _launchers()))}\n")
        break
    try:
        yield lock
    finally:
        if lock.is_file() and lock.read_text().split()[:2] == me.split():
            lock.unlink()
