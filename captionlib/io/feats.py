"""Feature files: one writer API for Kaldi ark (kaldiio) and HDF5 (h5py), one lazy reader.

Layout (``docs/CONVENTIONS.md`` section 3.5, ESPnet's ``file_writer_helper`` idea):

* ``filetype="ark"``: ``kaldiio.WriteHelper("ark,scp:<prefix>.ark,<prefix>.scp")``;
  scp lines ``<clip-id> /abs/<prefix>.ark:<byte offset>``.
* ``filetype="hdf5"``: one file ``<prefix>.h5`` with one float32 dataset per clip
  id at the root; scp lines ``<clip-id> /abs/<prefix>.h5:<clip-id>``.

Paths in scp files are absolute, so dump directories can be subset or copied.
:class:`FeatShardWriter` adds the per-job side files of a dump directory
(``utt2num_frames.JOB``, ``feats_dim.JOB``, ``feats_type.JOB``) and the progress log, for every
shard producer (audio extraction, visual extraction, feature import).
Each job writes its own files (never share one h5 across writers). The scp file
is written last and atomically (and the h5 file is renamed into place only when
complete), so an scp that exists always points to complete data.

:class:`FeatReader` reads an scp mixing both kinds of lines and opens files lazily,
re-opening them after a ``fork`` (DataLoader workers), since h5py handles must
not cross processes.
"""

import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, KeysView, Optional, Tuple

import kaldiio
import numpy as np

from captionlib.io.datadir import PathLike, read_scp, write_lines_atomic, write_scp
from captionlib.utils.cli import str_or_none
from captionlib.utils.fileio import check_writable

# h5py is imported where an HDF5 file is opened: the binaries' parsers import this module,
# and their --help must not pay for h5py (tests/captionbin/test_caption_export_cnn.py).

FILETYPES = ("ark", "hdf5")
_H5_SUFFIXES = (".h5", ".hdf5")


def _check_key(key: str) -> None:
    if not key or any(c.isspace() for c in key) or "/" in key or ":" in key:
        raise ValueError(f"feature key {key!r} must be non-empty, without whitespace, '/' or ':'")


def _as_matrix(key: str, array) -> np.ndarray:
    arr = np.asarray(array, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"features of {key!r} must be 2-D (frames, dim), got shape {arr.shape}")
    _check_finite(key, arr)
    return arr


def _check_finite(key: str, arr: np.ndarray) -> None:
    """Raise ``ValueError`` naming ``key`` and the first frame if ``arr`` holds NaN/Inf."""
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"features of {key!r} contain {int(bad.sum())} non-finite values (NaN/Inf), "
                         f"the first at frame {int(np.argwhere(bad)[0, 0])}")


class FeatWriter:
    """Write 2-D float32 feature matrices keyed by clip id to ``<prefix>.{ark|h5}`` + ``<prefix>.scp``.

    Use as a context manager; ``writer[key] = array`` (or :meth:`write`) adds a clip.
    Both files are written under temporary names and moved into place on a clean exit; on
    an exception nothing is committed, so an earlier dump at the same prefix stays whole.

    Args:
        out_prefix: output path without extension, e.g. ``dump/logmel/dev/feats.3``.
            Made absolute, so scp lines hold absolute paths.
        filetype: ``"ark"`` (Kaldi binary float matrices via kaldiio) or ``"hdf5"``.

    Attributes:
        num_frames: ``{key: frames}`` of everything written so far.
        dim: feature dimension (``None`` until the first write).
        data_path, scp_path: final paths of the data and scp files.

    Raises:
        ValueError: unknown ``filetype``; a bad key, a duplicate key, a non-2-D array
            or a dimension different from the previous arrays.

    Example:
        >>> with FeatWriter("dump/feats.1", "hdf5") as w:
        ...     w["clotho-validation-00001"] = np.zeros((100, 64), np.float32)
    """

    def __init__(self, out_prefix: PathLike, filetype: str = "ark") -> None:
        if filetype not in FILETYPES:
            raise ValueError(f"filetype must be one of {FILETYPES}, got {filetype!r}")
        self.filetype = filetype
        prefix = os.path.abspath(os.fspath(out_prefix))
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        self.scp_path = prefix + ".scp"
        self.data_path = prefix + (".ark" if filetype == "ark" else ".h5")
        self.num_frames: Dict[str, int] = {}
        self.dim: Optional[int] = None
        self._scp_lines = []
        self._closed = False
        if filetype == "ark":
            self._tmp_scp, self._tmp_ark = self.scp_path + ".tmp", self.data_path + ".tmp"
            self._helper = kaldiio.WriteHelper(f"ark,scp:{self._tmp_ark},{self._tmp_scp}")
        else:
            import h5py

            self._tmp_h5 = self.data_path + ".tmp"
            self._h5 = h5py.File(self._tmp_h5, "w")

    def write(self, key: str, array) -> None:
        """Add the matrix ``array`` (frames, dim), stored as float32, under ``key``."""
        if self._closed:
            raise ValueError(f"{self.scp_path}: writer already closed")
        _check_key(key)
        if key in self.num_frames:
            raise ValueError(f"{self.scp_path}: duplicate key {key!r}")
        arr = _as_matrix(key, array)
        if self.dim is None:
            self.dim = int(arr.shape[1])
        elif arr.shape[1] != self.dim:
            raise ValueError(f"{key!r}: dimension {arr.shape[1]} differs from {self.dim} of earlier clips")
        try:
            if self.filetype == "ark":
                self._helper(key, arr)
            else:
                self._h5.create_dataset(key, data=arr)
        except OSError as e:  # a full disk: name the file
            raise OSError(e.errno, f"writing {self.data_path} (as {self._tmp_paths()[0]}): {e.strerror or e}") from e
        if self.filetype != "ark":
            self._scp_lines.append(f"{key} {self.data_path}:{key}")
        self.num_frames[key] = int(arr.shape[0])

    def __setitem__(self, key: str, array) -> None:
        self.write(key, array)

    def close(self, commit: bool = True) -> None:
        """Flush and close; with ``commit`` move the outputs to their final names. Without, or
        when closing fails (a full disk), the temporary files are removed.

        Raises:
            OSError: the files could not be written, naming the data file.
        """
        if self._closed:
            return
        self._closed = True
        try:
            try:
                (self._helper if self.filetype == "ark" else self._h5).close()
            except OSError as e:  # its last writes: a full disk
                if not commit:  # closing after another error: that one is the one to see
                    return
                raise OSError(e.errno, f"writing {self.data_path}: {e.strerror or e}") from e
            if not commit:
                return
            if self.filetype == "ark":  # the scp lines point into the temporary ark: point them at its final name
                lines = [f"{key} {self.data_path}{value[len(self._tmp_ark):]}" for key, value in
                         (line.split(" ", 1) for line in
                          Path(self._tmp_scp).read_text(encoding="utf-8").split("\n") if line)]
                os.replace(self._tmp_ark, self.data_path)
                write_lines_atomic(self.scp_path, lines)
            else:
                os.replace(self._tmp_h5, self.data_path)
                write_lines_atomic(self.scp_path, self._scp_lines)
        finally:
            for tmp in self._tmp_paths():
                if os.path.exists(tmp):
                    os.unlink(tmp)

    def _tmp_paths(self) -> Tuple[str, ...]:
        """The temporary files written before :meth:`close` commits them."""
        return (self._tmp_ark, self._tmp_scp) if self.filetype == "ark" else (self._tmp_h5,)

    def __enter__(self) -> "FeatWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)


def shard_sibling(out_prefix: PathLike, name: str) -> str:
    """Path of a per-job side file of a dump shard.

    ``<dir>/<name>.<JOB>`` when ``out_prefix`` is ``<dir>/feats.<JOB>`` (the layout that
    ``egs/TEMPLATE/scripts/dump_feats.sh`` merges), else ``<out_prefix>.<name>``.

    Example:
        >>> shard_sibling("dump/logmel/dev/feats.3", "utt2num_frames")
        'dump/logmel/dev/utt2num_frames.3'
    """
    out_prefix = os.fspath(out_prefix)
    d, base = os.path.split(out_prefix)
    m = re.fullmatch(r"feats\.(.+)", base)
    return os.path.join(d, f"{name}.{m.group(1)}") if m else f"{out_prefix}.{name}"


class FeatShardWriter(FeatWriter):
    """A :class:`FeatWriter` for one JOB shard of a dump directory, with its side files and progress log.

    Besides ``<out_prefix>.{ark|h5}`` + ``<out_prefix>.scp``, a clean exit writes
    ``utt2num_frames`` (``<clip-id> <frames>``, sorted) and, when at least one clip was
    written, the one-line ``feats_dim`` and ``feats_type`` files, named by
    :func:`shard_sibling` (``DIR/utt2num_frames.JOB`` ... for ``out_prefix=DIR/feats.JOB``).
    Shared by every shard producer (``caption_dump_feats``, ``caption_extract_visual_feats``,
    ``caption_import_feats``) so that ``dump_feats.sh`` can merge any of them.

    Every ``log_interval`` clips (and after the last of ``total``) it logs
    ``processed <i>/<total> clips (<rate> clips/s, <elapsed> s elapsed, ETA <eta> s)``;
    the clock starts when the writer is created.

    Args:
        out_prefix: output path without extension, e.g. ``dump/cnn_resnet101_pooled/train/feats.3``.
        filetype: ``"ark"`` or ``"hdf5"``.
        feats_type: the name written to ``feats_type`` (e.g. ``logmel``, ``cnn_resnet101_grid``).
        num_frames_path: ``utt2num_frames`` output (default: ``shard_sibling(out_prefix, "utt2num_frames")``).
        total: number of clips expected (for the progress lines; ``None``: unknown).
        log_interval: clips between progress lines (0: none).

    Raises:
        ValueError: as :class:`FeatWriter`.
    """

    def __init__(
        self,
        out_prefix: PathLike,
        filetype: str,
        feats_type: str,
        num_frames_path: Optional[PathLike] = None,
        total: Optional[int] = None,
        log_interval: int = 0,
    ) -> None:
        super().__init__(out_prefix, filetype)
        prefix = self.scp_path[: -len(".scp")]
        self.feats_type = feats_type
        self.num_frames_path = (os.fspath(num_frames_path) if num_frames_path
                                else shard_sibling(prefix, "utt2num_frames"))
        self.dim_path = shard_sibling(prefix, "feats_dim")
        self.type_path = shard_sibling(prefix, "feats_type")
        self.total = total
        self.log_interval = log_interval
        self._t0 = time.time()

    def write(self, key: str, array) -> None:
        """Add ``array`` (frames, dim) under ``key`` and log progress every ``log_interval`` clips."""
        super().write(key, array)
        i = len(self.num_frames)
        if self.log_interval > 0 and (i % self.log_interval == 0 or i == self.total):
            elapsed = time.time() - self._t0
            rate = i / max(elapsed, 1e-9)
            total = "?" if self.total is None else str(self.total)
            eta = "?" if self.total is None else f"{max(self.total - i, 0) / max(rate, 1e-9):.1f}"
            logging.info(
                "processed %d/%s clips (%.1f clips/s, %.1f s elapsed, ETA %s s)", i, total, rate, elapsed, eta
            )

    def close(self, commit: bool = True) -> None:
        """Close as :meth:`FeatWriter.close`; on commit also write the side files."""
        if self._closed:
            return
        super().close(commit)
        if not commit:
            return
        write_scp(self.num_frames_path, self.num_frames)
        if self.dim is not None:
            write_lines_atomic(self.dim_path, [str(self.dim)])
            write_lines_atomic(self.type_path, [self.feats_type])
        logging.info("wrote %d clips (dim %s, %s) to %s", len(self.num_frames), self.dim, self.feats_type,
                     self.scp_path)


def add_shard_arguments(parser, log_interval: int = 100) -> None:
    """Add the output options of a shard job (``--out_prefix``, ``--filetype``, ``--log_interval``,
    ``--write_num_frames``): the arguments of :class:`FeatShardWriter` that a binary exposes."""
    parser.add_argument(
        "--out_prefix", default=None, help="(required) output path without extension, e.g. DIR/feats.JOB"
    )
    parser.add_argument("--filetype", default="ark", choices=FILETYPES, help="feature file format")
    parser.add_argument("--log_interval", type=int, default=log_interval, help="log progress (rate, ETA) every N clips")
    parser.add_argument(
        "--write_num_frames",
        default=None,
        type=str_or_none,
        help="utt2num_frames output (default: DIR/utt2num_frames.JOB from --out_prefix DIR/feats.JOB)",
    )


def run_shard_job(func, args, errors=(ValueError, OSError)) -> Dict[str, int]:
    """Call ``func(**options)`` with the parsed options of a shard binary (less ``config``,
    ``print_config``, ``log_level``); log an error of a type in ``errors`` and exit with status 1.
    The shard's files are checked to be writable first (``out_prefix``), before any work.

    Returns:
        what ``func`` returns (``{clip_id: frames}``).
    """
    kwargs = {k: v for k, v in vars(args).items() if k not in ("config", "print_config", "log_level")}
    try:
        if kwargs.get("out_prefix"):
            check_writable(os.fspath(kwargs["out_prefix"]) + ".scp")
        return func(**kwargs)
    except errors as e:
        logging.error("%s", e.args[0] if isinstance(e, KeyError) and e.args else e)
        sys.exit(1)


def _parse_h5_value(value: str):
    """Return ``(h5_path, key)`` if ``value`` is ``<path>.h5:<key>``, else ``None``."""
    m = re.fullmatch(r"(.+?\.(?:h5|hdf5)):([^:]+)", value)
    return (m.group(1), m.group(2)) if m else None


class FeatReader:
    """Lazy read-only mapping ``clip_id -> np.ndarray float32 (frames, dim)`` over a feats.scp.

    Each line is dispatched on its value: ``<path>.h5:<key>`` / ``<path>.hdf5:<key>``
    reads dataset ``key`` with h5py, anything else (``<path>.ark:<offset>``,
    optionally with a Kaldi slice) goes to ``kaldiio.load_mat``. Files are opened on
    first use and kept open; the handles belong to the process that opened them and
    are dropped and re-opened when the reader is used after ``fork`` (DataLoader
    workers) or after unpickling (``spawn``).

    Args:
        feats_scp: path of the scp file.
        dim: the feature dimension every clip must have (``None``: not checked).

    Raises:
        ValueError: malformed scp (``"<file>:<line>: ..."``, from :func:`read_scp`); on
            reading, features that cannot be read (a truncated ark: the scp, clip and
            location are named), that are not numbers, that hold NaN/Inf (the clip and
            frame are named), that are no matrix of at least one frame, or whose dimension
            is not ``dim`` (the clip and shape are named).
        KeyError: unknown clip id.

    Example:
        >>> reader = FeatReader("dump/logmel/validation/feats.scp")
        >>> reader["clotho-validation-00001"].shape
        (1501, 64)
    """

    def __init__(self, feats_scp: PathLike, dim: Optional[int] = None) -> None:
        self.feats_scp = os.fspath(feats_scp)
        self.dim = dim
        self._scp = read_scp(self.feats_scp)
        self._pid = os.getpid()
        self._h5: Dict[str, object] = {}
        self._ark: Dict[str, object] = {}

    def _handles(self):
        if os.getpid() != self._pid:
            # Inherited handles belong to the parent: never use or close them here.
            self._h5, self._ark, self._pid = {}, {}, os.getpid()
        return self._h5, self._ark

    def __getitem__(self, key: str) -> np.ndarray:
        value = self._scp[key]
        h5, ark = self._handles()
        loc = _parse_h5_value(value)
        if loc is not None:
            path, dset = loc
            f = h5.get(path)
            if f is None:
                import h5py

                f = h5[path] = h5py.File(path, "r")
            try:
                arr = f[dset][()]
            except KeyError:
                raise KeyError(f"{self.feats_scp}: dataset {dset!r} not found in {path}") from None
        else:
            try:
                arr = kaldiio.load_mat(value, fd_dict=ark)
            except Exception as e:  # a truncated or overwritten ark
                raise ValueError(f"{self.feats_scp}: clip {key}: cannot read features at {value} "
                                 f"({type(e).__name__}: {e})") from e
        try:
            arr = np.asarray(arr, dtype=np.float32)
        except (ValueError, TypeError) as e:  # e.g. an HDF5 dataset of strings
            raise ValueError(f"{self.feats_scp}: clip {key}: the features at {value} are not numbers ({e})") from None
        if arr.ndim != 2 or (self.dim is not None and arr.shape[1] != self.dim):
            raise ValueError(f"{self.feats_scp}: clip {key} has features of shape {arr.shape}, expected "
                             f"(frames, {self.dim or 'dim'})")
        if arr.shape[0] == 0:
            raise ValueError(f"{self.feats_scp}: clip {key} has 0 frames of features at {value}")
        try:
            _check_finite(key, arr)
        except ValueError as e:
            raise ValueError(f"{self.feats_scp}: {e}") from None
        return arr

    def get_path(self, key: str) -> str:
        """The raw scp value of ``key`` (``path:offset`` or ``path.h5:key``)."""
        return self._scp[key]

    def keys(self) -> KeysView:
        """Clip ids in scp order."""
        return self._scp.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._scp)

    def __len__(self) -> int:
        return len(self._scp)

    def __contains__(self, key: object) -> bool:
        return key in self._scp

    def items(self):
        """Iterate ``(clip_id, array)`` in scp order (loads every array)."""
        for k in self._scp:
            yield k, self[k]

    def close(self) -> None:
        """Close the files this process opened."""
        if os.getpid() == self._pid:
            for f in list(self._h5.values()) + list(self._ark.values()):
                try:
                    f.close()
                except Exception:  # pragma: no cover - best effort
                    logging.debug("could not close %r", f)
        self._h5, self._ark = {}, {}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_h5"], state["_ark"] = {}, {}
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __enter__(self) -> "FeatReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover
            pass


def copy_feats(in_scp: PathLike, out_prefix: PathLike, filetype: str) -> Dict[str, int]:
    """Copy every matrix of ``in_scp`` to a new ``<out_prefix>.{ark|h5}`` + ``.scp`` (ESPnet's copy-feats).

    Returns:
        ``{clip_id: frames}`` of the copied clips.
    """
    with FeatReader(in_scp) as reader, FeatWriter(out_prefix, filetype) as writer:
        for key in reader.keys():
            writer[key] = reader[key]
        return dict(writer.num_frames)
