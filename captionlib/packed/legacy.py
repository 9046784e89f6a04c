"""Conversion of files written by older captionlib versions (model files, checkpoints, packed
models, pickled CIDEr-D document frequencies) into the formats that load without running code:
:func:`convert_legacy_file` (``captionbin.caption_convert_model``).
"""

import io
import zipfile
from pathlib import Path
from typing import Optional

from captionlib.packed.archive import (
    CIDER_DF,
    LEGACY_CIDER_DF,
    MANIFEST,
    MODEL,
    ZIP_MAGIC,
    PathLike,
    read_packed,
    write_packed,
)
from captionlib.packed.pack import _cider_df_npz
from captionlib.utils.fileio import UnsafeFileError, atomic_open, load_checkpoint, safe_unpickle


def convert_legacy_file(path: PathLike, output: PathLike, trust_pickle: bool = False) -> str:
    """Convert a file written by an older captionlib into the formats that load without
    running code: a model file or checkpoint (``latest.pth``: numpy's RNG state becomes plain
    values, see :func:`captionlib.train.trainer.numpy_rng_state`), a packed model (its
    ``model.pth`` likewise, its ``cider_df.pkl`` becomes ``cider_df.npz``), or a pickled
    CIDEr-D document-frequency file (to ``.npz``). ``output`` is written atomically (it may be
    ``path``).

    The old pickle is read allowing only numpy arrays and numbers (nothing in it is run:
    :func:`~captionlib.utils.fileio.safe_unpickle`, ``weights_only`` with
    :func:`~captionlib.utils.fileio.numpy_safe_globals`), and only with ``trust_pickle=True``
    (``caption_convert_model --trust_pickle true``), an explicit step for files you made yourself.

    Returns:
        What was converted: ``"packed model"``, ``"document frequencies"`` or ``"torch file"``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``trust_pickle`` not set; or naming ``path``: not one of those files, or one
            holding other types than those this converter knows.
    """
    if not trust_pickle:
        raise ValueError(f"{path}: converting reads an old pickled file: pass "
                         "trust_pickle=True, only for files you made yourself")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    names = []
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    if MANIFEST in names:
        manifest, members = read_packed(path)
        members[MODEL] = _safe_torch_bytes(members[MODEL], f"{path} (member {MODEL})")
        if LEGACY_CIDER_DF in members:
            name = f"{path} (member {LEGACY_CIDER_DF})"
            members[CIDER_DF] = _legacy_df_npz(members.pop(LEGACY_CIDER_DF), name)
            if members[CIDER_DF] is None:
                raise ValueError(f"{name}: not a captionlib CIDEr-D document-frequency file")
        write_packed(output, manifest, members)
        return "packed model"
    data = path.read_bytes()
    npz = None if data[:4] == ZIP_MAGIC else _legacy_df_npz(data, str(path))
    if "format.npy" in names:  # already an .npz document-frequency file: checked and copied
        data, kind = _cider_df_npz(path), "document frequencies"
    elif npz is not None:
        data, kind = npz, "document frequencies"
    else:
        data, kind = _safe_torch_bytes(data, str(path)), "torch file"
    with atomic_open(output) as f:
        f.write(data)
    return kind


def _legacy_df_npz(data: bytes, name: str) -> Optional[bytes]:
    """The ``.npz`` bytes of the pickled document-frequency file of an older version, or
    ``None`` when ``data`` is no such pickle. ``data`` is read once with
    :func:`~captionlib.utils.fileio.safe_unpickle` (numpy arrays and numbers only, no code run).

    Raises:
        ValueError: naming ``name``: a document-frequency pickle of another version.
    """
    from captionlib.metrics.cider_d import _DF_FORMAT, DocumentFrequency

    try:
        obj = safe_unpickle(data)
    except Exception:  # a torch file of the legacy (non-zip) format, or no pickle at all
        return None
    if not (isinstance(obj, dict) and obj.get("format") == _DF_FORMAT):
        return None
    try:
        df = DocumentFrequency.from_dict(obj)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{name}: not a captionlib CIDEr-D document-frequency file ({e})") from None
    buf = io.BytesIO()
    df.save(buf)
    return buf.getvalue()


def _safe_torch_bytes(data: bytes, name: str) -> bytes:
    """A torch file saved again with plain values only: the numpy RNG state of an old
    ``latest.pth`` converted. Read with ``weights_only`` letting numpy arrays and numbers
    through (:func:`~captionlib.utils.fileio.numpy_safe_globals`: no code run), checked by
    loading the result with ``weights_only`` alone.

    Raises:
        ValueError: naming ``name``: not a torch file, or one still holding other types.
    """
    import torch

    from captionlib.train.trainer import numpy_rng_state

    def no_safe_form(e: UnsafeFileError) -> ValueError:
        return ValueError(f"{name}: holds {', '.join(e.refused) or 'types'}, which this converter has no safe "
                          "form for: not a captionlib model file, checkpoint or packed model")

    try:
        obj = load_checkpoint(name, data=data, numpy_values=True)
    except UnsafeFileError as e:
        raise no_safe_form(e) from None
    except Exception as e:
        raise ValueError(f"{name}: not a torch file ({type(e).__name__}: {e})") from None
    rng = obj.get("rng") if isinstance(obj, dict) else None
    if isinstance(rng, dict) and isinstance(rng.get("numpy"), tuple):
        rng["numpy"] = numpy_rng_state(rng["numpy"])
    buf = io.BytesIO()
    torch.save(obj, buf)
    try:
        load_checkpoint(name, data=buf.getvalue())
    except UnsafeFileError as e:
        raise no_safe_form(e) from None
    return buf.getvalue()
