"""Import precomputed visual features into dump shards (the body of ``caption_import_feats``).

Layouts (``--layout``), each read by corpus id (COCO image id, MSVD clip name, MSR-VTT
video id; the second column of ``clip2id``, written by data prep):

* ``sc_fc``: self-critical.pytorch ``prepro_feats.py`` fc features, ``<source>/<id>.npy``
  holding one vector (D,) -> stored as (1, D).
* ``sc_att``: self-critical.pytorch att features, ``<source>/<id>.npz`` with key ``feat``,
  a grid (H, W, D) (``cocotalk_att``, 14 x 14 x 2048) or a set (N, D) -> stored as (N, D)
  (row-major over H, W). Also the Top-Down bottom-up features ``cocobu_att/<id>.npz``
  (num_boxes x 2048, Anderson et al. 2018, as converted by self-critical.pytorch).
* ``hdf5``: one HDF5 file ``<source>`` with one dataset per id, (T, D) (the usual video
  layout, e.g. per-frame ResNet features of MSVD/MSR-VTT) or (D,) -> (1, D).

Rows are stored as float32 through :class:`captionlib.io.feats.FeatShardWriter`, with the
same side files as the extractors.
"""

import functools
import logging
import os
import re
import zipfile
import zlib
from typing import Dict, Optional

import h5py
import numpy as np

from captionlib.io.datadir import PathLike, read_scp
from captionlib.io.feats import FeatShardWriter
from captionlib.visual import LAYOUTS  # noqa: F401 (re-exported)


def _check_id(corpus_id: str) -> None:
    if corpus_id in (".", "..") or "/" in corpus_id or "\\" in corpus_id:
        raise ValueError(f"corpus id {corpus_id!r} cannot name a file")


# what np.load / NpzFile raise for a truncated, corrupt or foreign file
_NPY_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


def _unreadable(path: str, e: Exception) -> ValueError:
    return ValueError(f"{path}: cannot read features ({type(e).__name__}: {e})")


def _np_load(source: str, corpus_id: str, ext: str):
    """``np.load`` of ``<source>/<corpus_id><ext>``: (the loaded object, its path).

    Raises:
        FileNotFoundError: no such file; ValueError: an unreadable one (naming it).
    """
    _check_id(corpus_id)
    path = os.path.join(source, f"{corpus_id}{ext}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no feature file {path}")
    try:
        return np.load(path, allow_pickle=False), path
    except _NPY_ERRORS as e:
        raise _unreadable(path, e) from None


def _load_fc(source: str, corpus_id: str):
    arr, path = _np_load(source, corpus_id, ".npy")
    if not isinstance(arr, np.ndarray):  # an .npz archive under a .npy name
        arr.close()
        raise ValueError(f"{path}: expected an .npy array, got an .npz archive")
    if arr.ndim != 1:
        raise ValueError(f"{path}: expected an fc vector (D,), got shape {arr.shape}")
    return arr.reshape(1, -1), path


def _load_att(source: str, corpus_id: str):
    npz, path = _np_load(source, corpus_id, ".npz")
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: expected an .npz archive with array 'feat', got a single .npy array")
    with npz:
        if "feat" not in npz:
            raise ValueError(f"{path}: no array 'feat' (has {sorted(npz.files)})")
        try:
            arr = npz["feat"]
        except _NPY_ERRORS as e:
            raise _unreadable(path, e) from None
    if arr.ndim not in (2, 3) or arr.shape[-1] < 1:
        raise ValueError(f"{path}: expected att features (H, W, D) or (N, D), got shape {arr.shape}")
    return arr.reshape(-1, arr.shape[-1]), path


class _H5Source:
    def __init__(self, source: str) -> None:
        if not os.path.isfile(source):
            raise FileNotFoundError(f"no such HDF5 file: {source}")
        self.path = source
        try:
            self.file = h5py.File(source, "r")
        except OSError as e:  # h5py's "file signature not found" etc. do not name the file
            raise ValueError(f"{source} is not a readable HDF5 file ({e})") from None

    def __call__(self, corpus_id: str):
        obj = self.file.get(corpus_id)
        if not isinstance(obj, h5py.Dataset):
            raise KeyError(f"no dataset {corpus_id!r} in {self.path}")
        try:
            arr = obj[()]
        except OSError as e:
            raise ValueError(f"{self.path}: cannot read dataset {corpus_id!r} ({e})") from None
        if arr.ndim not in (1, 2):
            raise ValueError(f"{self.path}: dataset {corpus_id!r} has shape {arr.shape}, expected (T, D) or (D,)")
        return arr.reshape(-1, arr.shape[-1]) if arr.ndim == 2 else arr.reshape(1, -1), self.path


def default_feats_type(source: PathLike) -> str:
    """The feature-type name derived from ``source``: its basename without an HDF5 extension.

    Example:
        >>> default_feats_type("/data/coco/cocobu_att/")
        'cocobu_att'
    """
    base = os.path.basename(os.path.normpath(os.fspath(source)))
    base = re.sub(r"\.(h5|hdf5)$", "", base)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base) or "imported"


def import_feats(
    clip2id: PathLike,
    layout: str,
    source: PathLike,
    out_prefix: PathLike,
    filetype: str = "ark",
    feats_type: Optional[str] = None,
    log_interval: int = 1000,
    write_num_frames: Optional[PathLike] = None,
) -> Dict[str, int]:
    """Copy the precomputed features of every clip of ``clip2id`` into one ark or h5 shard.

    Args:
        clip2id: ``<clip-id> <corpus id>`` lines.
        layout: one of :data:`LAYOUTS` (see the module docstring).
        source: the feature directory (``sc_fc``, ``sc_att``) or HDF5 file (``hdf5``).
        out_prefix: output path without extension, e.g. ``dump/cocobu_att/train/feats.1``;
            the side files are those of :class:`captionlib.io.feats.FeatShardWriter`.
        filetype: ``ark`` or ``hdf5``.
        feats_type: name written to ``feats_type`` (default :func:`default_feats_type` of ``source``).
        log_interval: clips between progress lines (0: none).
        write_num_frames: ``utt2num_frames`` output (default derived from ``out_prefix``).

    Returns:
        ``{clip_id: rows}``.

    Raises:
        ValueError: unknown layout, malformed ``clip2id``, a ``source`` that is not an HDF5
            file (``hdf5``; names the file), an unreadable (truncated/corrupt/foreign) ``.npy``,
            ``.npz`` or HDF5 dataset, a wrong shape, empty features (0 rows or dimension 0,
            e.g. a (0, D) dataset) or NaN/Inf values, or a dimension different
            from earlier clips (the per-clip messages name ``<clip2id>:<line>``, the clip, the
            corpus id and the file).
        FileNotFoundError: a missing source, or a missing feature file.
        KeyError: an id missing from the HDF5 file (same naming).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    source = os.fspath(source)
    if layout == "hdf5":
        loader = _H5Source(source)
    elif not os.path.isdir(source):
        raise FileNotFoundError(f"no such feature directory: {source}")
    else:
        loader = functools.partial(_load_fc if layout == "sc_fc" else _load_att, source)
    ids = read_scp(clip2id)
    feats_type = feats_type or default_feats_type(source)
    prefix = os.path.abspath(os.fspath(out_prefix))
    logging.info("importing %d clips (%s layout, from %s) as %s to %s.*", len(ids), layout, source, feats_type, prefix)
    try:
        with FeatShardWriter(prefix, filetype, feats_type, write_num_frames, len(ids), log_interval) as writer:
            for i, (key, corpus_id) in enumerate(ids.items(), start=1):
                where = f"{clip2id}:{i}: clip {key} (id {corpus_id})"
                try:
                    arr, path = loader(corpus_id)
                except KeyError as e:
                    raise KeyError(f"{where}: {e.args[0]}") from None
                except (ValueError, FileNotFoundError) as e:
                    raise type(e)(f"{where}: {e}") from None
                if not np.issubdtype(arr.dtype, np.number):
                    raise ValueError(f"{where}: {path}: non-numeric features of dtype {arr.dtype}")
                if arr.size == 0:  # the clip would train and decode with no features
                    raise ValueError(f"{where}: {path}: empty features of shape {arr.shape}")
                arr = arr.astype(np.float32)
                bad = ~np.isfinite(arr)
                if bad.any():
                    raise ValueError(f"{where}: {path}: {int(bad.sum())} non-finite values (NaN/Inf), "
                                     f"the first in row {int(np.argwhere(bad)[0, 0])}")
                try:
                    writer[key] = arr
                except ValueError as e:
                    raise ValueError(f"{where}: {path}: {e}") from None
    finally:
        if layout == "hdf5":
            loader.file.close()
    return dict(writer.num_frames)
