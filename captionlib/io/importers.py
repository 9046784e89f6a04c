"""Import precomputed features into dump shards (the body of ``caption_import_feats``).

Any model's features enter the pipeline this way: CNN features of images and videos
(self-critical.pytorch, per-video HDF5 files) and frame-level embeddings of audio models
(BEATs, EAT, CLAP, ...). Nothing here depends on the modality: a clip's features are one
(frames, D) matrix read by the clip's *source id*.

Source ids come from one of two lists:

* ``clip2id`` (``<clip-id> <corpus id>``, written by the image/video data prep): the COCO
  image id, MSVD clip name, MSR-VTT video id.
* ``wav.scp`` (audio data dirs, which have no ``clip2id``; :func:`audio_source_ids`): the
  audio file's name without its extension (``Whistling`` for ``.../validation/Whistling.wav``),
  or, with ``audio_root``, its path below ``audio_root`` without the extension
  (``validation/Whistling``), so that features written in a tree that mirrors the audio tree
  are found. Clotho needs the latter: 4 file names of Clotho v2.1 occur in two splits.

Layouts (``--layout``), each read by source id:

* ``sc_fc``: self-critical.pytorch ``prepro_feats.py`` fc features, ``<source>/<id>.npy``
  holding one vector (D,) -> stored as (1, D).
* ``sc_att``: self-critical.pytorch att features, ``<source>/<id>.npz`` with key ``feat``,
  a grid (H, W, D) (``cocotalk_att``, 14 x 14 x 2048) or a set (N, D) -> stored as (N, D)
  (row-major over H, W). Also the Top-Down bottom-up features ``cocobu_att/<id>.npz``
  (num_boxes x 2048, Anderson et al. 2018, as converted by self-critical.pytorch).
* ``hdf5``: one HDF5 file ``<source>`` with one dataset per id, (T, D) (the usual video
  layout, e.g. per-frame ResNet features of MSVD/MSR-VTT) or (D,) -> (1, D); an id with
  ``/`` names a dataset in a group (``validation/Whistling``).
* ``frames_npy``: ``<source>/<id>.npy`` holding the frames of one clip, (T, D) (e.g. the
  last-layer frame embeddings of an audio model), or a clip embedding (D,) -> (1, D).

The frame rate of imported features is never needed: the pipeline counts frames, not
seconds. Rows are stored as float32 through :class:`captionlib.io.feats.FeatShardWriter`,
with the same side files as the extractors.
"""

import functools
import logging
import os
import re
from typing import Dict, Optional

import numpy as np

from captionlib.io.datadir import PathLike, read_scp
from captionlib.io.feats import FeatShardWriter
from captionlib.utils.fileio import NPY_ERRORS

#: ``--layout`` of ``caption_import_feats`` (see the module docstring).
LAYOUTS = ("sc_fc", "sc_att", "hdf5", "frames_npy")


def _check_id(corpus_id: str) -> None:
    parts = corpus_id.split("/")
    if "\\" in corpus_id or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"corpus id {corpus_id!r} cannot name a file")


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
    except NPY_ERRORS as e:
        raise _unreadable(path, e) from None


def _load_npy(source: str, corpus_id: str):
    arr, path = _np_load(source, corpus_id, ".npy")
    if not isinstance(arr, np.ndarray):  # an .npz archive under a .npy name
        arr.close()
        raise ValueError(f"{path}: expected an .npy array, got an .npz archive")
    return arr, path


def _load_fc(source: str, corpus_id: str):
    arr, path = _load_npy(source, corpus_id)
    if arr.ndim != 1:
        raise ValueError(f"{path}: expected an fc vector (D,), got shape {arr.shape}")
    return arr.reshape(1, -1), path


def _load_frames(source: str, corpus_id: str):
    arr, path = _load_npy(source, corpus_id)
    if arr.ndim not in (1, 2):
        raise ValueError(f"{path}: expected frames (T, D) or one vector (D,), got shape {arr.shape}")
    return arr.reshape(-1, arr.shape[-1]), path


def _load_att(source: str, corpus_id: str):
    npz, path = _np_load(source, corpus_id, ".npz")
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: expected an .npz archive with array 'feat', got a single .npy array")
    with npz:
        if "feat" not in npz:
            raise ValueError(f"{path}: no array 'feat' (has {sorted(npz.files)})")
        try:
            arr = npz["feat"]
        except NPY_ERRORS as e:
            raise _unreadable(path, e) from None
    if arr.ndim not in (2, 3) or arr.shape[-1] < 1:
        raise ValueError(f"{path}: expected att features (H, W, D) or (N, D), got shape {arr.shape}")
    return arr.reshape(-1, arr.shape[-1]), path


class _H5Source:
    def __init__(self, source: str) -> None:
        import h5py  # not at module level: the binaries' --help / --print_config stay light

        if not os.path.isfile(source):
            raise FileNotFoundError(f"no such HDF5 file: {source}")
        self.path = source
        self.dataset_type = h5py.Dataset
        try:
            self.file = h5py.File(source, "r")
        except OSError as e:  # h5py's "file signature not found" etc. do not name the file
            raise ValueError(f"{source} is not a readable HDF5 file ({e})") from None

    def __call__(self, corpus_id: str):
        obj = self.file.get(corpus_id)
        if not isinstance(obj, self.dataset_type):
            raise KeyError(f"no dataset {corpus_id!r} in {self.path}")
        try:
            arr = obj[()]
        except OSError as e:
            raise ValueError(f"{self.path}: cannot read dataset {corpus_id!r} ({e})") from None
        if arr.ndim not in (1, 2):
            raise ValueError(f"{self.path}: dataset {corpus_id!r} has shape {arr.shape}, expected (T, D) or (D,)")
        return arr.reshape(-1, arr.shape[-1]) if arr.ndim == 2 else arr.reshape(1, -1), self.path

    def close(self) -> None:
        self.file.close()


def default_feats_type(source: PathLike) -> str:
    """The feature-type name derived from ``source``: its basename without an HDF5 extension.

    Example:
        >>> default_feats_type("/data/coco/cocobu_att/")
        'cocobu_att'
    """
    base = os.path.basename(os.path.normpath(os.fspath(source)))
    base = re.sub(r"\.(h5|hdf5)$", "", base)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base) or "imported"


def audio_source_ids(wav_scp: PathLike, audio_root: Optional[PathLike] = None) -> Dict[str, str]:
    """The source id of every clip of an audio data dir, from the paths in its ``wav.scp``.

    Args:
        wav_scp: ``<clip-id> <audio path>`` lines.
        audio_root: where the audio tree starts (``None``: ids are bare file names).

    Returns:
        ``{clip_id: id}``: the file name without its extension, or with ``audio_root`` the path
        below ``audio_root`` without the extension, ``/``-separated (symlinks resolved first).

    Raises:
        ValueError: a malformed ``wav.scp``, or a path not below ``audio_root`` (naming
            ``<wav_scp>:<line>``, the clip and both paths).

    Example:
        >>> audio_source_ids("data/validation/wav.scp", "/data/clotho")["clotho-validation-00001"]
        'validation/Whistling'
    """
    root = os.path.realpath(os.fspath(audio_root)) if audio_root is not None else None
    ids = {}
    for i, (key, path) in enumerate(read_scp(wav_scp).items(), start=1):
        if root is None:
            ids[key] = os.path.splitext(os.path.basename(path))[0]
            continue
        rel = os.path.relpath(os.path.realpath(path), root)
        if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
            raise ValueError(f"{wav_scp}:{i}: clip {key}: {path} is not below audio_root {audio_root}")
        ids[key] = os.path.splitext(rel)[0].replace(os.sep, "/")
    return ids


def _check_array(arr: np.ndarray, where: str, path: str, feats_dim: Optional[int]) -> np.ndarray:
    """``arr`` (frames, D) as float32, or ValueError (prefixed ``<where>: <path>``) for non-numeric,
    empty or non-finite features or a dimension other than ``feats_dim``."""
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{where}: {path}: non-numeric features of dtype {arr.dtype}")
    if arr.size == 0:  # the clip would train and decode with no features
        raise ValueError(f"{where}: {path}: empty features of shape {arr.shape}")
    if feats_dim is not None and arr.shape[1] != feats_dim:
        raise ValueError(f"{where}: {path}: features of shape {arr.shape}, expected dimension feats_dim={feats_dim}")
    arr = arr.astype(np.float32)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{where}: {path}: {int(bad.sum())} non-finite values (NaN/Inf), "
                         f"the first in row {int(np.argwhere(bad)[0, 0])}")
    return arr


def _open_loader(layout: str, source: str):
    """The reader of ``layout``: ``loader(id) -> ((frames, D) array, path)``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "hdf5":
        return _H5Source(source)
    if not os.path.isdir(source):
        raise FileNotFoundError(f"no such feature directory: {source}")
    return functools.partial({"sc_fc": _load_fc, "sc_att": _load_att, "frames_npy": _load_frames}[layout], source)


def import_feats(
    clip2id: Optional[PathLike],
    layout: str,
    source: PathLike,
    out_prefix: PathLike,
    filetype: str = "ark",
    feats_type: Optional[str] = None,
    log_interval: int = 1000,
    write_num_frames: Optional[PathLike] = None,
    wav_scp: Optional[PathLike] = None,
    audio_root: Optional[PathLike] = None,
    feats_dim: Optional[int] = None,
) -> Dict[str, int]:
    """Copy the precomputed features of every clip of ``clip2id`` (or ``wav_scp``) into one ark or h5 shard.

    Args:
        clip2id: ``<clip-id> <corpus id>`` lines; ``None`` to take the ids from ``wav_scp``.
        layout: one of :data:`LAYOUTS` (see the module docstring).
        source: the feature directory (``sc_fc``, ``sc_att``, ``frames_npy``) or HDF5 file (``hdf5``).
        out_prefix: output path without extension, e.g. ``dump/cocobu_att/train/feats.1``;
            the side files are those of :class:`captionlib.io.feats.FeatShardWriter`.
        filetype: ``ark`` or ``hdf5``.
        feats_type: name written to ``feats_type`` (default :func:`default_feats_type` of ``source``).
        log_interval: clips between progress lines (0: none).
        write_num_frames: ``utt2num_frames`` output (default derived from ``out_prefix``).
        wav_scp: audio clips whose ids :func:`audio_source_ids` derives (instead of ``clip2id``).
        audio_root: with ``wav_scp``: the ids are the paths below it (see :func:`audio_source_ids`).
        feats_dim: the dimension D every clip must have (``None``: that of the first clip).

    Returns:
        ``{clip_id: rows}``.

    Raises:
        ValueError: unknown layout, not exactly one of ``clip2id`` and ``wav_scp`` (or
            ``audio_root`` without ``wav_scp``), a malformed list, a ``source`` that is not an
            HDF5 file (``hdf5``; names the file), an unreadable (truncated/corrupt/foreign)
            ``.npy``, ``.npz`` or HDF5 dataset, a wrong shape, empty features (0 rows or
            dimension 0, e.g. a (0, D) dataset) or NaN/Inf values, or a dimension other than
            ``feats_dim`` or than earlier clips' (the per-clip messages name ``<list>:<line>``,
            the clip, the source id and the file).
        FileNotFoundError: a missing source, or a missing feature file.
        KeyError: an id missing from the HDF5 file (same naming).
    """
    if (clip2id is None) == (wav_scp is None) or (audio_root is not None and wav_scp is None):
        raise ValueError("give clip2id or wav_scp (one of them; audio_root only with wav_scp)")
    source = os.fspath(source)
    loader = _open_loader(layout, source)
    id_list = clip2id if clip2id is not None else wav_scp
    ids = read_scp(clip2id) if clip2id is not None else audio_source_ids(wav_scp, audio_root)
    feats_type = feats_type or default_feats_type(source)
    prefix = os.path.abspath(os.fspath(out_prefix))
    logging.info("importing %d clips (%s layout, from %s) as %s to %s.*", len(ids), layout, source, feats_type, prefix)
    try:
        with FeatShardWriter(prefix, filetype, feats_type, write_num_frames, len(ids), log_interval) as writer:
            for i, (key, corpus_id) in enumerate(ids.items(), start=1):
                where = f"{id_list}:{i}: clip {key} (id {corpus_id})"
                try:
                    arr, path = loader(corpus_id)
                except KeyError as e:
                    raise KeyError(f"{where}: {e.args[0]}") from None
                except (ValueError, FileNotFoundError) as e:
                    raise type(e)(f"{where}: {e}") from None
                arr = _check_array(arr, where, path, feats_dim)
                try:
                    writer[key] = arr
                except ValueError as e:  # a dimension other than the earlier clips'
                    raise ValueError(f"{where}: {path}: {e}") from None
    finally:
        if layout == "hdf5":
            loader.close()
    return dict(writer.num_frames)
