"""Audio file loading with soundfile (libsndfile) and resampling with soxr.

Formats libsndfile cannot open (e.g. AAC in ``.m4a``, or MP3 with an old libsndfile) are
decoded by PyAV (FFmpeg's libraries) instead, so feature dumps and ``caption_infer`` read
every file the same way. A file libsndfile opens is read by libsndfile only.
"""

import logging
import os
import re
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import soundfile as sf
import soxr

from captionlib.io.datadir import PathLike

#: Audio file extensions the toolkit looks for (directories given to caption_infer, AudioCaps
#: audio folders): libsndfile reads wav/flac/ogg/mp3, the PyAV fallback the rest (m4a).
AUDIO_EXTENSIONS = ("wav", "flac", "ogg", "mp3", "m4a")


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


def _decode_with_pyav(path: str, sf_error: Exception) -> Tuple[np.ndarray, int]:
    """Decode the first audio stream of ``path`` with PyAV (the fallback of :func:`load_audio`
    and :func:`audio_info` when libsndfile cannot open a file).

    Returns:
        ``(samples, channels)`` float32 array and the sample rate in Hz.

    Raises:
        ValueError: ``"<path>: cannot read audio: <libsndfile's error>; PyAV: <its error>"``
            when PyAV is not installed, finds no audio stream or cannot decode it.
    """
    try:
        import av  # only for files libsndfile cannot open; a missing PyAV is reported per file

        chunks, sr = [], None
        with av.open(path) as container:
            if not container.streams.audio:
                raise ValueError("no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="fltp")  # planar float32, same layout and rate
            for frame in container.decode(stream):
                sr = sr or frame.sample_rate
                chunks += [f.to_ndarray() for f in resampler.resample(frame)]
            chunks += [f.to_ndarray() for f in resampler.resample(None)]
            sr = sr or stream.rate
            channels = stream.channels
    except Exception as e:  # ImportError, av.error.FFmpegError, ValueError
        raise ValueError(f"{path}: cannot read audio: {sf_error}; PyAV: {type(e).__name__}: {e}") from None
    if not chunks:
        return np.zeros((0, max(int(channels or 1), 1)), np.float32), int(sr)
    return np.ascontiguousarray(np.concatenate(chunks, axis=1).T, dtype=np.float32), int(sr)


_SHOULD_BE = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)


def _report_truncation(msg: str, strict: bool) -> None:
    if strict:
        raise ValueError(msg)
    logging.warning("%s (strict: make this an error)", msg)


#: The tail of an Ogg file searched for its last page: a page is at most 65,307 bytes.
_OGG_TAIL_BYTES = 65536


def _ogg_end_missing(path: str) -> Optional[str]:
    """Why an Ogg file looks cut short, or ``None``.

    The last page is the ``OggS`` capture pattern (version 0) in the file's last 64 KiB
    whose page (27-byte header, segment table, segments) ends exactly at the end of the file;
    the pattern inside a page's data, which can occur by chance, gives no such page. Without
    one the last page is cut short; with one, it must carry the end-of-stream flag (header
    type bit 0x04), which a finished encoder sets (RFC 3533, section 6). libsndfile reads a
    cut file's complete pages without complaint, so the length alone cannot tell.
    """
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(size - _OGG_TAIL_BYTES, 0))
        tail = f.read()
    start = tail.rfind(b"OggS")
    while start >= 0:
        page = tail[start:]
        if len(page) >= 27 and page[4] == 0 and len(page) >= 27 + page[26]:
            if 27 + page[26] + sum(page[27:27 + page[26]]) == len(page):
                return None if page[5] & 0x04 else "its last Ogg page lacks the end-of-stream flag"
        start = tail.rfind(b"OggS", 0, start)
    return "its last Ogg page is cut short"


#: MPEG audio frames an MP3's decoded length may fall short of its Xing/Info/VBRI header's
#: count (2 frames of 1152 samples: encoder padding) before it counts as truncated.
_MP3_SLACK_SAMPLES = 2304


def _mp3_counts_frames(path: str) -> bool:
    """Whether an MP3 carries a frame count (a Xing, Info or VBRI tag in its first frame,
    after any ID3v2 tag): only then is libsndfile's length the encoder's, not a guess from
    the bitrate of the first frame, which a VBR file without the tag does not keep."""
    with open(path, "rb") as f:
        head = f.read(10)
        skip = 0
        if head[:3] == b"ID3" and len(head) == 10:  # ID3v2: 4 syncsafe size bytes + header (+ footer)
            skip = 10 + (head[6] << 21 | head[7] << 14 | head[8] << 7 | head[9]) + (10 if head[5] & 0x10 else 0)
        f.seek(skip)
        first = f.read(4096)
    return any(tag in first for tag in (b"Xing", b"Info", b"VBRI"))


def check_truncation(path: str, info, strict: bool = False) -> None:
    """Warn (or with ``strict`` raise) when a file holds less audio than its header promises:

    - a WAV cut short by an interrupted copy: its ``data`` chunk says N bytes, the file holds
      fewer, as libsndfile reports in the ``extra_info`` of ``soundfile.info(path)`` (or of an
      open ``soundfile.SoundFile``); libsndfile then reads only the samples present;
    - an Ogg file (Vorbis, Opus, FLAC in Ogg) whose last page is incomplete or lacks the
      end-of-stream flag (RFC 3533).

    An MP3 whose Xing/Info/VBRI tag counts more samples than it decodes is found by
    :func:`load_audio` after decoding (:func:`audio_info` reports the tag's count).

    Raises:
        ValueError: with ``strict``, naming the file and what is missing.
    """
    m = _SHOULD_BE.search(getattr(info, "extra_info", "") or "")
    if m is not None and int(m.group(2)) < int(m.group(1)):
        _report_truncation(
            f"{path}: truncated? its header promises {m.group(1)} bytes of audio data, the file holds "
            f"{m.group(2)}; only the {info.frames / info.samplerate:.3f} s present are used", strict)
    elif getattr(info, "format", None) == "OGG":
        problem = _ogg_end_missing(path)
        if problem:
            _report_truncation(f"{path}: truncated? {problem}; only the {info.frames / info.samplerate:.3f} s "
                               "present are used", strict)


def audio_info(path: PathLike, strict: bool = False) -> AudioInfo:
    """Read the header of an audio file without decoding the samples.

    A file libsndfile cannot open is decoded with PyAV to count its samples (see
    :func:`load_audio`).

    Args:
        path: any format libsndfile or PyAV reads (WAV, FLAC, OGG, MP3, M4A, ...).
        strict: a file shorter than its header says is an error (default: a warning), see
            :func:`check_truncation`.

    Returns:
        :class:`AudioInfo`: of the samples present, except for an MP3 cut short after its
        Xing/Info tag: the tag's count (:func:`load_audio` finds it when decoding).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: ``"<path>: cannot read audio: ..."`` if neither libsndfile nor PyAV can
            parse it; with ``strict``, a truncated file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: audio file not found")
    try:
        info = sf.info(path)
    except Exception as e:  # soundfile.LibsndfileError / RuntimeError / TypeError
        data, sr = _decode_with_pyav(path, e)
        return AudioInfo(sample_rate=sr, frames=data.shape[0], channels=data.shape[1])
    check_truncation(path, info, strict)
    return AudioInfo(sample_rate=int(info.samplerate), frames=int(info.frames), channels=int(info.channels))


def load_audio(path: PathLike, fs: Optional[int] = None, strict: bool = False) -> Tuple[np.ndarray, int]:
    """Load an audio file as mono float32, optionally resampled.

    Read with soundfile (libsndfile: WAV, FLAC, OGG, MP3, ...); a file libsndfile cannot
    open (e.g. AAC in ``.m4a``) is decoded with PyAV (FFmpeg) to float32 instead.
    Integer PCM is scaled to ``[-1, 1)`` by soundfile. Multi-channel audio is
    averaged over channels. When ``fs`` is given and differs from the file's rate
    the signal is resampled with ``soxr.resample`` (quality ``"HQ"``).

    Args:
        path: audio file.
        fs: target sample rate in Hz, or ``None`` to keep the file's rate.
        strict: a file shorter than its header says is an error (default: a logged
            warning naming it), see :func:`check_truncation`.

    Returns:
        ``(wave, sample_rate)``: ``wave`` is float32 of shape ``(samples,)``;
        ``sample_rate`` in Hz is ``fs`` if given, else the file's rate.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: naming ``path`` if neither libsndfile nor PyAV can decode it, holds 0 samples or
            non-finite (NaN/Inf) samples, or ``fs`` is not positive; with ``strict``, if it
            is truncated.
    """
    path = os.fspath(path)
    if fs is not None and fs <= 0:
        raise ValueError(f"{path}: target sample rate must be positive, got {fs}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: audio file not found")
    try:
        f = sf.SoundFile(path)
    except Exception as e:
        data, sr = _decode_with_pyav(path, e)
    else:
        with f:  # one open: the header check and the samples
            check_truncation(path, f, strict)
            try:
                data, sr = f.read(dtype="float32", always_2d=True), f.samplerate
            except Exception as e:
                raise ValueError(f"{path}: cannot read audio: {e}") from None
            short = 0 < data.shape[0] < f.frames  # e.g. an MP3 whose Xing tag counts the whole file
            if f.format == "MP3":
                short = short and data.shape[0] < f.frames - _MP3_SLACK_SAMPLES and _mp3_counts_frames(path)
            if short:
                _report_truncation(f"{path}: truncated? its header declares {f.frames} samples, "
                                   f"{data.shape[0]} decode; only the {data.shape[0] / sr:.3f} s present "
                                   "are used", strict)
    if data.shape[0] == 0:
        raise ValueError(f"{path}: empty audio (0 samples)")
    bad = ~np.isfinite(data)
    if bad.any():  # float WAVs can hold NaN/Inf; they would become NaN features
        first = int(np.argwhere(bad)[0, 0])
        raise ValueError(f"{path}: {int(bad.sum())} non-finite samples (NaN/Inf), the first at sample {first} "
                         f"({first / sr:.3f} s)")
    wave = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    wave = np.ascontiguousarray(wave, dtype=np.float32)
    if fs is not None and fs != sr:
        wave = soxr.resample(wave, sr, fs, quality="HQ").astype(np.float32, copy=False)
        sr = fs
    return wave, int(sr)
