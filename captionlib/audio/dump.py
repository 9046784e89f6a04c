"""Feature extraction over a ``wav.scp`` shard (the body of ``caption_dump_feats``)."""

import logging
import os
from collections import Counter
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch

from captionlib.audio.features import make_extractor
from captionlib.audio.io import load_audio
from captionlib.io.datadir import PathLike, read_scp
from captionlib.io.feats import FeatShardWriter

#: ``logmel``: the log-mel itself; ``pretrained``: what a frozen pretrained encoder makes of it
#: (``transform``, see :mod:`captionlib.models.pretrained_feats`).
FEATS_TYPES = ("logmel", "pretrained")


def dump_feats(
    wav_scp: PathLike,
    out_prefix: PathLike,
    filetype: str = "ark",
    feats_type: str = "logmel",
    n_mels: int = 64,
    n_fft: int = 2048,
    win_length_s: float = 0.04,
    hop_length_s: float = 0.02,
    fs: Optional[int] = None,
    write_num_frames: Optional[PathLike] = None,
    log_interval: int = 100,
    num_threads: int = 1,
    dtype: str = "float32",
    strict: bool = False,
    transform: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    **logmel_options: Any,
) -> Dict[str, int]:
    """Extract features for every clip of ``wav_scp`` into one ark or h5 file.

    Writes ``<out_prefix>.{ark|h5}`` and ``<out_prefix>.scp`` (absolute paths, via
    :class:`captionlib.io.feats.FeatWriter`), ``utt2num_frames`` (``<clip-id> <frames>``)
    and one-line ``feats_dim``/``feats_type`` files. For ``out_prefix=DIR/feats.JOB``
    these are ``DIR/utt2num_frames.JOB``, ``DIR/feats_dim.JOB`` and ``DIR/feats_type.JOB``
    (``dump_feats.sh`` merges them; see :class:`captionlib.io.feats.FeatShardWriter`).
    Logs progress (clips done, clips/s, ETA) every ``log_interval`` clips.

    Args:
        wav_scp: ``<clip-id> <audio path>`` lines (path may contain spaces).
        out_prefix: output path without extension, e.g. ``dump/logmel/dev/feats.3``.
        filetype: ``"ark"`` or ``"hdf5"``.
        feats_type: ``"logmel"`` (:class:`captionlib.audio.features.LogMel`), or ``"pretrained"``:
            ``transform`` (a frozen encoder) maps each log-mel (frames, n_mels) to what is stored.
        n_mels: mel bands (feature dim); n_fft: FFT size in samples; win_length_s: window
            length in seconds; hop_length_s: frame shift in seconds.
        fs: resample to this rate in Hz first (``None``: the file's own rate; clips of the
            shard at different rates are then logged once as a warning with the count of clips
            per rate, since a mel band covers other frequencies at each rate).
        write_num_frames: path of the ``utt2num_frames`` output (default derived as above).
        log_interval: clips between progress lines.
        num_threads: torch intra-op threads (1: one core per job, Kaldi's habit for JOB arrays;
            0: leave torch's setting). Set process-wide and left set.
        dtype: computation dtype, ``"float32"`` (fast) or ``"float64"`` (:mod:`captionlib.audio.features`).
        strict: an audio file shorter than its header says is an error (default: a logged
            warning naming it; see :func:`captionlib.audio.io.check_truncation`).
        transform: see ``feats_type`` (:mod:`captionlib.models.pretrained_feats`).
        logmel_options: ``fmin``, ``fmax``, ``log``, ``pad_mode``, and ``frontend`` (``stft``, the
            default, or ``kaldi``: Kaldi fbank) of :func:`~captionlib.audio.features.make_extractor`.

    Returns:
        ``{clip_id: frames}``.

    Raises:
        ValueError: unknown ``feats_type``/``filetype``/``dtype``/``log``/``pad_mode``/``frontend``,
            malformed ``wav_scp``, or a clip whose audio is unreadable/empty (message names the
            wav.scp line, the clip id and the audio path).
        FileNotFoundError: a missing audio file (same naming).
    """
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    _check_feats_type(feats_type, transform)
    extractor = make_extractor(n_mels=n_mels, n_fft=n_fft, win_length_s=win_length_s, hop_length_s=hop_length_s,
                               dtype=dtype, **logmel_options)
    wavs = read_scp(wav_scp)
    prefix = os.path.abspath(os.fspath(out_prefix))
    kind = f"log-mel in {dtype}" if logmel_options.get("frontend", "stft") == "stft" else "Kaldi fbank"
    logging.info("extracting %s features (%s) of %d clips from %s to %s.*", feats_type, kind, len(wavs), wav_scp,
                 prefix)
    rates: Counter = Counter()  # clips per sample rate (one rate unless fs is None)
    with FeatShardWriter(prefix, filetype, feats_type, write_num_frames, len(wavs), log_interval) as writer:
        for i, (key, path) in enumerate(wavs.items(), start=1):
            try:
                wave, rate = load_audio(path, fs=fs, strict=strict)
                feats = extractor(wave, rate) if transform is None else transform(extractor(wave, rate))
            except (ValueError, FileNotFoundError) as e:
                raise type(e)(f"{wav_scp}:{i}: clip {key}: {e}") from None
            rates[rate] += 1
            writer[key] = feats
    warn_mixed_rates(wav_scp, rates)
    return dict(writer.num_frames)


def _check_feats_type(feats_type: str, transform) -> None:
    """Raise ValueError for an unknown ``feats_type``, or ``pretrained`` without a ``transform``
    (``logmel`` with one)."""
    if feats_type not in FEATS_TYPES:
        raise ValueError(f"unknown feats_type {feats_type!r}; expected one of {FEATS_TYPES}")
    if (feats_type == "pretrained") != (transform is not None):
        raise ValueError(f"feats_type {feats_type!r} {'needs' if transform is None else 'takes no'} transform "
                         "(the frozen encoder of captionlib.models.pretrained_feats)")


def warn_mixed_rates(wav_scp: PathLike, rates: Counter) -> None:
    """Warn once when the clips of ``wav_scp`` came at several sample rates (``rates``: clips
    per rate in Hz) and were not resampled (``fs: null``)."""
    if len(rates) > 1:
        logging.warning(
            "%s: the clips have %d sample rates (clips per rate: %s) and fs is null, so each clip's "
            "features are computed at its own rate and a mel band covers other frequencies at each "
            "rate; set fs to resample every clip to one rate", wav_scp, len(rates),
            ", ".join(f"{r} Hz: {n}" for r, n in sorted(rates.items())),
        )
