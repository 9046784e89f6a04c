"""Audio file loading with soundfile (libsndfile) and resampling with soxr."""

import os
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from captionlib.io.datadir import PathLike


@dataclass(frozen=True)
class AudioInfo:
    """Header information of an audio file.

    Attributes:
        sample_rate: samples per second (Hz).
        frames: samples per channel.
        channels: number of channels.
        duration: length in seconds (``frames / sample_rate``).
    """

    sample_rate: int
    frames: int
    channels: int

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate


def audio_info(path: PathLike) -> AudioInfo:
    """Read the header of an audio file without decoding the samples.

    Args:
        path: any format libsndfile reads (WAV, FLAC, OGG, ...).

    Returns:
        :class:`AudioInfo`.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: ``"<path>: cannot read audio: ..."`` if libsndfile cannot parse it.
    """
    import soundfile as sf

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: audio file not found")
    try:
        info = sf.info(path)
    except Exception as e:  # soundfile.LibsndfileError / RuntimeError / TypeError
        raise ValueError(f"{path}: cannot read audio: {e}") from None
    return AudioInfo(sample_rate=int(info.samplerate), frames=int(info.frames), channels=int(info.channels))


def load_audio(path: PathLike, fs: Optional[int] = None) -> Tuple[np.ndarray, int]:
    """Load an audio file as mono float32, optionally resampled.

    Integer PCM is scaled to ``[-1, 1)`` by soundfile. Multi-channel audio is
    averaged over channels. When ``fs`` is given and differs from the file's rate
    the signal is resampled with ``soxr.resample`` (quality ``"HQ"``).

    Args:
        path: audio file.
        fs: target sample rate in Hz, or ``None`` to keep the file's rate.

    Returns:
        ``(wave, sample_rate)``: ``wave`` is float32 of shape ``(samples,)``;
        ``sample_rate`` in Hz is ``fs`` if given, else the file's rate.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming ``path`` if it cannot be decoded, holds 0 samples, or
            ``fs`` is not positive.
    """
    import soundfile as sf

    path = os.fspath(path)
    if fs is not None and fs <= 0:
        raise ValueError(f"{path}: target sample rate must be positive, got {fs}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: audio file not found")
    try:
        data, sr = sf.read(path, dtype="float32", always_2d=True)
    except Exception as e:
        raise ValueError(f"{path}: cannot read audio: {e}") from None
    if data.shape[0] == 0:
        raise ValueError(f"{path}: empty audio (0 samples)")
    wave = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    wave = np.ascontiguousarray(wave, dtype=np.float32)
    if fs is not None and fs != sr:
        import soxr

        wave = soxr.resample(wave, sr, fs, quality="HQ").astype(np.float32, copy=False)
        sr = fs
    return wave, int(sr)
