"""Builders of bad inputs for the hardening tests (issue 11): each writes one kind of broken
file that a user can meet, so tests of every format (audio, features, model files, and
later images, video, AudioCaps) can feed the same cases to the component that meets them first."""

from pathlib import Path
from typing import Dict

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
