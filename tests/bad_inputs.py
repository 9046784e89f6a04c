"""Builders of bad inputs for the hardening tests (issue 11): each writes one kind of broken
file that a user can meet, so tests of every format (audio, features, model files, and
later images, video, AudioCaps) can feed the same cases to the component that meets them first."""

from pathlib import Path
from typing import Dict, Optional

import numpy as np


def write_wav(path: Path, seconds: float = 1.0, fs: int = 16000, seed: int = 0) -> Path:
    """A valid float32 mono WAV of noise."""
    import soundfile as sf

    wave = np.random.default_rng(seed).uniform(-0.5, 0.5, int(seconds * fs)).astype(np.float32)
    sf.write(str(path), wave, fs, subtype="FLOAT")
    return path


def write_nonfinite_wav(path: Path, seconds: float = 1.0, fs: int = 16000, at: int = 100) -> Path:
    """A float32 WAV whose samples ``at`` and ``at + 1`` are NaN and +Inf."""
    import soundfile as sf

    wave = np.zeros(int(seconds * fs), dtype=np.float32)
    wave[at], wave[at + 1] = np.nan, np.inf
    sf.write(str(path), wave, fs, subtype="FLOAT")
    return path


def write_raw_ark(prefix: Path, feats: Dict[str, np.ndarray]) -> Path:
    """``prefix.ark`` + ``prefix.scp`` written with kaldiio directly, bypassing our writer's
    checks (so NaN or wrong-dimension features can reach the readers). Returns the scp."""
    import kaldiio

    scp = Path(str(prefix) + ".scp")
    with kaldiio.WriteHelper(f"ark,scp:{prefix}.ark,{scp}") as w:
        for key, mat in feats.items():
            w[key] = np.asarray(mat, dtype=np.float32)
    return scp


def truncate(path: Path, fraction: float = 0.5) -> Path:
    """Cut a file to ``fraction`` of its bytes (an interrupted copy or a full disk)."""
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: int(len(data) * fraction)])
    return path


class CodeOnLoad:
    """A value whose unpickling runs code: it creates the file ``marker`` (``pathlib.Path.touch``,
    standing for the ``os.system`` call of a real attack). A test that loads a file holding it
    asserts that ``marker`` does not exist afterwards."""

    def __init__(self, marker: Path):
        self.marker = Path(marker)

    def __reduce__(self):
        return Path.touch, (self.marker,)


def write_code_running_torch_file(path: Path, marker: Path, like: Optional[dict] = None, key: str = "model") -> Path:
    """A torch file (``torch.save``) whose ``key`` value runs code when unpickled (see
    :class:`CodeOnLoad`): a crafted model file, checkpoint or ``latest.pth``, with the other
    keys of ``like`` (e.g. a real model file's ``model_conf`` and ``token_list``)."""
    import torch

    torch.save({**(like or {}), key: CodeOnLoad(marker)}, path)
    return path


def write_code_running_pickle(path: Path, marker: Path) -> Path:
    """A pickle shaped like an old CIDEr-D document-frequency file (``cider_df.pkl``) whose
    ``words`` run code when unpickled (see :class:`CodeOnLoad`)."""
    import pickle

    obj = {"format": "captionlib.cider_df", "version": 1, "n": 4, "num_docs": 1, "words": CodeOnLoad(marker),
           "keys": np.zeros(0, np.uint64), "counts": np.zeros(0)}
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


def write_code_running_npz(path: Path, marker: Path) -> Path:
    """An ``.npz`` archive whose ``words`` array is an object array holding a pickle that runs
    code when loaded with ``allow_pickle=True`` (see :class:`CodeOnLoad`)."""
    words = np.empty(1, dtype=object)
    words[0] = CodeOnLoad(marker)
    with open(path, "wb") as f:  # a file object: np.savez keeps the name as given
        np.savez(f, format=np.array("captionlib.cider_df"), version=np.array(1), n=np.array(4),
                 num_docs=np.array(1), words=words, keys=np.zeros(0, np.uint64), counts=np.zeros(0))
    return path


def replace_zip_member(path: Path, member: str, data: bytes, fix_manifest: bool = True) -> Path:
    """Replace (or add) ``member`` of the zip archive ``path`` by ``data``; with
    ``fix_manifest``, a packed model's ``manifest.json`` gets the member's new size and SHA-256,
    so that the archive passes the integrity check and the member itself meets the loader."""
    import hashlib
    import json
    import zipfile

    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    members[member] = data
    if fix_manifest and "manifest.json" in members:
        manifest = json.loads(members["manifest.json"])
        files = [f for f in manifest.get("files", []) if f["name"] != member]
        manifest["files"] = files + [{"name": member, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
        members["manifest.json"] = json.dumps(manifest).encode("utf-8")
    with zipfile.ZipFile(path, "w") as z:
        for name, value in members.items():
            z.writestr(name, value)
    return path


def write_gray16_png(path: Path, width: int = 64, height: int = 4) -> Path:
    """A 16-bit grayscale PNG (Pillow mode ``I;16``) holding a horizontal gradient from 0 to
    65535 (column ``j`` at ``round(65535 * j / (width - 1))``), which ``convert("RGB")`` clips to
    nearly all white."""
    from PIL import Image

    row = np.round(np.linspace(0, 65535, width)).astype(np.uint16)
    Image.fromarray(np.repeat(row[None], height, axis=0)).save(path)
    return path


def write_truncated_video(path: Path, num_frames: int = 20, fraction: float = 1 / 3, size: int = 96) -> Path:
    """An mpeg4 ``.avi`` at 10 fps of ``num_frames`` random-noise key frames, cut to ``fraction``
    of its bytes (an interrupted copy): its header still declares ``num_frames`` frames (AVI
    ``dwLength``), the file holds only the first few."""
    import av

    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
        stream.codec_context.gop_size = 1
        for _ in range(num_frames):
            img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return truncate(path, fraction)


def write_h5_features(path: Path, feats: Dict[str, np.ndarray]) -> Path:
    """One HDF5 file with one dataset per key, written as given with h5py (bypassing our
    writer's checks, so e.g. an empty (0, D) dataset can reach the importer)."""
    import h5py

    with h5py.File(path, "w") as f:
        for key, mat in feats.items():
            f[key] = np.asarray(mat)
    return path


def write_samples_wav(path: Path, samples: int = 1, fs: int = 44100) -> Path:
    """A 16-bit PCM mono WAV of exactly ``samples`` samples (1: a clip whose ``reco2dur``
    rounds to 0.000)."""
    import soundfile as sf

    sf.write(str(path), np.full(samples, 0.25, np.float32), fs, subtype="PCM_16")
    return path
