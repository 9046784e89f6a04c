"""Feature files: one writer API for Kaldi ark (kaldiio) and HDF5 (h5py), one lazy reader.

Layout (``docs/CONVENTIONS.md`` section 3.5, ESPnet's ``file_writer_helper`` idea):

* ``filetype="ark"``: ``kaldiio.WriteHelper("ark,scp:<prefix>.ark,<prefix>.scp")``;
  scp lines ``<clip-id> /abs/<prefix>.ark:<byte offset>``.
* ``filetype="hdf5"``: one file ``<prefix>.h5`` with one float32 dataset per clip
  id at the root; scp lines ``<clip-id> /abs/<prefix>.h5:<clip-id>``.

Paths in scp files are absolute, so dump directories can be subset or copied.
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
from typing import Dict, Iterator, KeysView, Optional

import numpy as np

from captionlib.io.datadir import PathLike, read_scp, write_lines_atomic

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
    On a clean exit the scp file (and for hdf5 the ``.h5`` file) is moved into
    place; on an exception nothing is committed.

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
            import kaldiio

            self._tmp_scp = self.scp_path + ".tmp"
            self._helper = kaldiio.WriteHelper(f"ark,scp:{self.data_path},{self._tmp_scp}")
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
        if self.filetype == "ark":
            self._helper(key, arr)
        else:
            self._h5.create_dataset(key, data=arr)
            self._scp_lines.append(f"{key} {self.data_path}:{key}")
        self.num_frames[key] = int(arr.shape[0])

    __setitem__ = write

    def close(self, commit: bool = True) -> None:
        """Flush and close; with ``commit`` move the outputs to their final names."""
        if self._closed:
            return
        self._closed = True
        if self.filetype == "ark":
            self._helper.close()
            if commit:
                os.replace(self._tmp_scp, self.scp_path)
            elif os.path.exists(self._tmp_scp):
                os.unlink(self._tmp_scp)
        else:
            self._h5.close()
            if commit:
                os.replace(self._tmp_h5, self.data_path)
                write_lines_atomic(self.scp_path, self._scp_lines)
            elif os.path.exists(self._tmp_h5):
                os.unlink(self._tmp_h5)

    def __enter__(self) -> "FeatWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)


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
            location are named), that hold NaN/Inf (the clip and frame are named), or whose
            dimension is not ``dim`` (the clip and shape are named).
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
            import kaldiio

            try:
                arr = kaldiio.load_mat(value, fd_dict=ark)
            except Exception as e:  # a truncated or overwritten ark
                raise ValueError(f"{self.feats_scp}: clip {key}: cannot read features at {value} "
                                 f"({type(e).__name__}: {e})") from e
        arr = np.asarray(arr, dtype=np.float32)
        if self.dim is not None and (arr.ndim != 2 or arr.shape[1] != self.dim):
            raise ValueError(f"{self.feats_scp}: clip {key} has features of shape {arr.shape}, expected (frames, {self.dim})")
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
