"""Log-mel spectrogram features (the seed system's input, ``seeds/000`` section 3.2).

64 mel bands from a 2048-point FFT of 40 ms Hann-windowed frames every 20 ms, at
the file's own sample rate. The STFT is ``torch.stft`` (``center=True``, zero
padding of ``n_fft // 2`` on both sides, as ``librosa`` >= 0.10 does by default),
the power spectrum is projected with ``librosa.filters.mel`` (Slaney mel scale and
area normalisation, librosa's defaults), and the natural log is taken after
flooring the mel energies at ``floor`` (default ``1e-10``, i.e. -23.03; the same
floor as ``librosa.power_to_db``'s ``amin``), so digital silence stays finite.

The computation runs in ``dtype`` (default float32; the output is float32 either way).
float32 is about twice as fast as float64. Its FFT round-off is relative to a frame's
loudest bins, so bands far below them differ most: on 26 real Clotho clips (at 44.1 and
16 kHz) the float32 features differ from the float64 ones by at most 1.7e-3 in natural-log
units (8e-5 x (1 + |value|); in bands > 100 dB below the frame's peak), by < 5e-6 relative
in Frobenius norm per clip, and the global mean/std by ~1e-7 relative.
``dtype="float64"`` matches ``librosa`` (which computes its FFT in float64) to ~2e-6.

Two options give other front ends; their defaults are the seed's and leave the features
unchanged: ``log="db"`` takes ``10 * log10(max(mel, floor))`` instead of the natural log,
and ``pad_mode="reflect"`` pads the signal by reflection instead of zeros for the centred
frames. With ``fs: 32000``, a 1024-point window and FFT, a 320-sample hop, 64 bands from
50 to 14,000 Hz, ``log: db`` and ``pad_mode: reflect`` this is the front end of PANNs (Kong
et al. 2020; torchlibrosa's ``Spectrogram`` + ``LogmelFilterBank`` with ``ref=1.0``,
``amin=1e-10``, ``top_db=None``): ``egs/clotho/conf/feats_panns.yaml``.

:class:`KaldiFbank` (``frontend: kaldi`` in a features config, :func:`make_extractor`) is
Kaldi's fbank instead, BEATs' input (``egs/clotho/conf/feats_beats.yaml``).

Reference: X. Xu, H. Dinkel, M. Wu, K. Yu, "A CRNN-GRU based reinforcement
learning approach to audio captioning", DCASE 2020 workshop (seed 000).
"""

import warnings
from typing import Any, Dict, Optional, Tuple

import librosa
import numpy as np
import torch

DTYPES = ("float32", "float64")
LOGS = ("ln", "db")
PAD_MODES = ("constant", "reflect")


class LogMel:
    """Callable log-mel extractor; mel filter banks are cached per sample rate.

    Args:
        n_mels: number of mel bands (output dim).
        n_fft: FFT size in samples; must be >= the window length in samples.
        win_length_s: analysis window length in seconds (Hann window).
        hop_length_s: frame shift in seconds.
        fmin: lowest mel filter edge in Hz.
        fmax: highest edge in Hz (``None``: Nyquist).
        floor: mel energies are clamped to at least this before ``log``.
        dtype: ``"float32"`` (fast) or ``"float64"`` (reference) for the STFT, power,
            mel projection and log; see the module docstring for the differences.
        log: ``"ln"`` (natural log, the seed's) or ``"db"`` (``10 * log10``, decibels of
            power with reference 1, as ``librosa.power_to_db(ref=1.0, amin=floor, top_db=None)``).
        pad_mode: padding of ``n_fft // 2`` samples at both ends for the centred frames:
            ``"constant"`` (zeros, the seed's) or ``"reflect"`` (``librosa.stft``'s and
            torchlibrosa's ``pad_mode="reflect"``; needs a wave longer than ``n_fft // 2``).

    Raises:
        ValueError: a non-positive size/length/floor, a negative ``fmin``, an ``fmax`` not above
            ``fmin``, or an unknown ``dtype``/``log``/``pad_mode``; at a sample rate whose
            Nyquist frequency is below ``fmax`` (or not above ``fmin``), or where a mel band
            gets no FFT bin (its feature would be constant), :meth:`mel_filters` raises.

    Example:
        >>> feat = LogMel(n_mels=64)(wave, 44100)   # (frames, 64) float32
    """

    def __init__(
        self,
        n_mels: int = 64,
        n_fft: int = 2048,
        win_length_s: float = 0.04,
        hop_length_s: float = 0.02,
        fmin: float = 0.0,
        fmax: Optional[float] = None,
        floor: float = 1e-10,
        dtype: str = "float32",
        log: str = "ln",
        pad_mode: str = "constant",
    ) -> None:
        if n_mels <= 0 or n_fft <= 0 or win_length_s <= 0 or hop_length_s <= 0 or floor <= 0:
            raise ValueError("n_mels, n_fft, win_length_s, hop_length_s and floor must be positive")
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        if log not in LOGS or pad_mode not in PAD_MODES:
            raise ValueError(f"log must be one of {LOGS} and pad_mode one of {PAD_MODES}, got {log!r}, {pad_mode!r}")
        if fmin < 0 or (fmax is not None and fmax <= fmin):
            raise ValueError(f"fmin must be >= 0 and fmax (null: Nyquist) above fmin, got fmin {fmin}, fmax {fmax}")
        self.n_mels = n_mels
        self.n_fft = n_fft
        self.win_length_s = win_length_s
        self.hop_length_s = hop_length_s
        self.fmin = fmin
        self.fmax = fmax
        self.floor = floor
        self.dtype = dtype
        self.log = log
        self.pad_mode = pad_mode
        self._mel: Dict[int, np.ndarray] = {}

    def frame_params(self, fs: int) -> Tuple[int, int]:
        """``(win_length, hop_length)`` in samples at sample rate ``fs`` (rounded).

        Raises:
            ValueError: if the window is longer than ``n_fft`` or a length rounds to 0.
        """
        win = int(round(self.win_length_s * fs))
        hop = int(round(self.hop_length_s * fs))
        if win <= 0 or hop <= 0:
            raise ValueError(f"window/hop of {self.win_length_s}/{self.hop_length_s} s is 0 samples at {fs} Hz")
        if win > self.n_fft:
            raise ValueError(
                f"window of {win} samples ({self.win_length_s} s at {fs} Hz) exceeds n_fft={self.n_fft}; "
                "raise n_fft or resample (fs option)"
            )
        return win, hop

    def mel_filters(self, fs: int) -> np.ndarray:
        """Mel filter bank ``(n_mels, n_fft // 2 + 1)`` in ``dtype`` from ``librosa.filters.mel``.

        Raises:
            ValueError: ``fmax`` above the Nyquist frequency ``fs / 2`` or ``fmin`` not below it
                (bands above it would hold no energy), or a band without any FFT bin
                (too many ``n_mels`` for ``n_fft`` at ``fs``): such a band's feature is constant.
        """
        if fs not in self._mel:
            nyquist = fs / 2
            if (self.fmax or nyquist) > nyquist or self.fmin >= nyquist:
                raise ValueError(f"mel bands from fmin {self.fmin} to fmax {self.fmax} Hz do not fit below the "
                                 f"Nyquist frequency {nyquist:g} Hz of audio at {fs} Hz: lower fmax/fmin or set fs")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # librosa's empty-filter warning: raised below
                mel = librosa.filters.mel(sr=fs, n_fft=self.n_fft, n_mels=self.n_mels, fmin=self.fmin,
                                          fmax=self.fmax, dtype=self.dtype)
            empty = int((mel.max(axis=1) == 0).sum())
            if empty:
                raise ValueError(f"{empty} of the {self.n_mels} mel bands get no FFT bin at n_fft {self.n_fft} and "
                                 f"{fs} Hz (their features would be constant): lower n_mels or raise n_fft")
            self._mel[fs] = mel
        return self._mel[fs]

    def num_frames(self, num_samples: int, fs: int) -> int:
        """Frames produced for ``num_samples`` samples: ``1 + num_samples // hop``."""
        return 1 + num_samples // self.frame_params(fs)[1]

    def __call__(self, wave: np.ndarray, fs: int) -> np.ndarray:
        """Compute log-mel features.

        Args:
            wave: mono signal, shape ``(samples,)``, any float/int dtype.
            fs: its sample rate in Hz.

        Returns:
            float32 array ``(frames, n_mels)`` with ``frames = 1 + samples // hop``.

        Raises:
            ValueError: empty or non-1-D ``wave``, a wave shorter than one analysis window
                (``win_length_s``: no frame would see a whole window of audio; e.g. a
                1-sample file), window longer than ``n_fft``, or with ``pad_mode="reflect"`` a
                wave of at most ``n_fft // 2`` samples.
        """
        x = np.asarray(wave)
        if x.ndim != 1:
            raise ValueError(f"expected a mono wave of shape (samples,), got shape {x.shape}")
        if x.size == 0:
            raise ValueError("empty wave (0 samples)")
        win, hop = self.frame_params(fs)
        if self.pad_mode == "reflect" and x.size <= self.n_fft // 2:
            raise ValueError(f"a wave of {x.size} samples is too short for pad_mode reflect "
                             f"(needs more than n_fft // 2 = {self.n_fft // 2})")
        if x.size < win:
            raise ValueError(f"a wave of {x.size} samples ({x.size / fs:.4f} s) is shorter than one analysis window "
                             f"({win} samples, win_length_s {self.win_length_s})")
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=self.dtype))
        spec = torch.stft(
            xt,
            n_fft=self.n_fft,
            hop_length=hop,
            win_length=win,
            window=torch.hann_window(win, periodic=True, dtype=xt.dtype),
            center=True,
            pad_mode=self.pad_mode,
            return_complex=True,
        ).T  # (frames, n_fft // 2 + 1), contiguous (torch.stft returns a transposed view)
        power = spec.real.square() + spec.imag.square()
        mel = power @ torch.from_numpy(self.mel_filters(fs)).T  # (frames, n_mels)
        mel = mel.clamp_(min=self.floor)
        mel = mel.log_() if self.log == "ln" else mel.log10_().mul_(10.0)
        return mel.numpy().astype(np.float32, copy=False)


def logmel(
    wave: np.ndarray,
    fs: int,
    n_mels: int = 64,
    n_fft: int = 2048,
    win_length_s: float = 0.04,
    hop_length_s: float = 0.02,
    dtype: str = "float32",
) -> np.ndarray:
    """Functional form of :class:`LogMel`: ``(samples,)`` at ``fs`` Hz -> float32 ``(frames, n_mels)``.

    Raises:
        ValueError: as :class:`LogMel` and its ``__call__``.
    """
    extractor = LogMel(n_mels=n_mels, n_fft=n_fft, win_length_s=win_length_s, hop_length_s=hop_length_s, dtype=dtype)
    return extractor(wave, fs)


#: front ends of ``caption_dump_feats``' ``frontend`` option: ``stft`` (:class:`LogMel`, the
#: default) or ``kaldi`` (:class:`KaldiFbank`)
FRONTENDS = ("stft", "kaldi")
#: options of :class:`LogMel` that :class:`KaldiFbank` does not take, with the value that means
#: "not set" (a config giving another value with ``frontend: kaldi`` is an error, not ignored)
_LOGMEL_ONLY = {"n_fft": 2048, "dtype": "float32", "log": "ln", "pad_mode": "constant"}


class KaldiFbank:
    """Kaldi's log mel filter-bank features (``compute-fbank-feats``: its computation, with the
    options below; 23 bands in Kaldi, 80 here by default), the front end of BEATs (Chen et al.
    2023, through ``torchaudio.compliance.kaldi.fbank``) and of most Kaldi/ESPnet speech systems.

    Per frame of ``win_length_s`` every ``hop_length_s`` (Kaldi's ``snip_edges``: only whole
    frames, ``1 + (samples - win) // hop`` of them), on the wave scaled to 16-bit integer range
    (times 32768, as Kaldi reads a wav file): the frame's mean removed, pre-emphasis 0.97
    (the first sample against itself), the Povey window (a symmetric Hann window to the power
    0.85), zero-padded to the next power of two, the power spectrum, ``n_mels`` triangular
    filters equally spaced on Kaldi's mel scale ``1127 ln(1 + f / 700)`` from ``fmin`` to ``fmax``
    (the Nyquist bin left out), and the natural log floored at float32's epsilon
    (1.19e-7, ln = -15.94). No dither (torchaudio's default; Kaldi's is 1).

    A band narrower than the FFT's bin spacing gets no FFT bin, so its feature is the constant
    floor: Kaldi and kaldi-native-fbank refuse such a configuration ("num_mel_bins too large"),
    torchaudio computes it, and so does this class (BEATs' 128 bands at 16 kHz have one such
    band, and its checkpoints were trained with it). Elsewhere the features equal
    kaldi-native-fbank's (tests/captionlib/audio/test_kaldi_fbank.py).

    Args:
        n_mels: mel bands (output dim).
        win_length_s: frame length in seconds (Kaldi ``--frame-length`` 25 ms).
        hop_length_s: frame shift in seconds (Kaldi ``--frame-shift`` 10 ms).
        fmin: low edge of the first band in Hz (Kaldi ``--low-freq``, default 20).
        fmax: high edge of the last band in Hz; ``None``: the Nyquist frequency (Kaldi
            ``--high-freq 0``).

    Raises:
        ValueError: a non-positive size or length, ``fmin`` < 0 or ``fmax`` not above it; at a
            sample rate whose Nyquist frequency is below ``fmax`` (or not above ``fmin``),
            :meth:`mel_filters` raises.

    Example:
        >>> feat = KaldiFbank(n_mels=128)(wave, 16000)   # (frames, 128) float32, BEATs' input
    """

    def __init__(self, n_mels: int = 80, win_length_s: float = 0.025, hop_length_s: float = 0.01,
                 fmin: float = 20.0, fmax: Optional[float] = None) -> None:
        if n_mels <= 0 or win_length_s <= 0 or hop_length_s <= 0:
            raise ValueError("n_mels, win_length_s and hop_length_s must be positive")
        if fmin < 0 or (fmax is not None and fmax <= fmin):
            raise ValueError(f"fmin must be >= 0 and fmax (null: Nyquist) above fmin, got fmin {fmin}, fmax {fmax}")
        self.n_mels, self.win_length_s, self.hop_length_s = n_mels, win_length_s, hop_length_s
        self.fmin, self.fmax = fmin, fmax
        self._mel: Dict[int, torch.Tensor] = {}

    def frame_params(self, fs: int) -> Tuple[int, int, int]:
        """``(window, hop, FFT size)`` in samples at ``fs`` Hz, truncated as Kaldi does (a 25 ms window
        at 11,025 Hz is 275 samples); the FFT size is the window rounded up to a power of two.

        Raises:
            ValueError: a window or hop of 0 samples.
        """
        # Kaldi truncates (int(fs * ms * 0.001)); the rounding to 6 decimals only removes float
        # error (0.025 * 16000 must be 400, not 399.99999999999994)
        win, hop = int(round(self.win_length_s * fs, 6)), int(round(self.hop_length_s * fs, 6))
        if win <= 0 or hop <= 0:
            raise ValueError(f"window/hop of {self.win_length_s}/{self.hop_length_s} s is 0 samples at {fs} Hz")
        return win, hop, 1 << (win - 1).bit_length()

    def mel_filters(self, fs: int) -> torch.Tensor:
        """Kaldi's mel filter bank ``(n_mels, n_fft // 2 + 1)`` (float32; the Nyquist column 0).

        Raises:
            ValueError: ``fmax`` above the Nyquist frequency or ``fmin`` not below it.
        """
        if fs not in self._mel:
            nyquist = fs / 2
            high = nyquist if self.fmax is None else self.fmax
            if high > nyquist or self.fmin >= high:
                raise ValueError(f"mel bands from fmin {self.fmin} to fmax {self.fmax} Hz do not fit below the "
                                 f"Nyquist frequency {nyquist:g} Hz of audio at {fs} Hz: lower fmax/fmin or set fs")
            n_fft = self.frame_params(fs)[2]
            mel = lambda f: 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)  # noqa: E731
            low, delta = mel(self.fmin), (mel(high) - mel(self.fmin)) / (self.n_mels + 1)
            left = low + delta * np.arange(self.n_mels)[:, None]  # (n_mels, 1) band edges in mel
            bins = mel(np.arange(n_fft // 2) * fs / n_fft)[None, :]  # (1, n_fft // 2) FFT bins in mel
            up, down = (bins - left) / delta, (left + 2 * delta - bins) / delta
            weights = np.maximum(0.0, np.minimum(up, down))
            self._mel[fs] = torch.from_numpy(np.pad(weights, ((0, 0), (0, 1))).astype(np.float32))
        return self._mel[fs]

    def num_frames(self, num_samples: int, fs: int) -> int:
        """Frames produced for ``num_samples`` samples: ``1 + (num_samples - win) // hop``
        (0 below one window)."""
        win, hop, _ = self.frame_params(fs)
        return 0 if num_samples < win else 1 + (num_samples - win) // hop

    def __call__(self, wave: np.ndarray, fs: int) -> np.ndarray:
        """Compute the features.

        Args:
            wave: mono signal ``(samples,)`` in [-1, 1] (float) or int16, at ``fs`` Hz.
            fs: its sample rate in Hz.

        Returns:
            float32 array ``(frames, n_mels)``, ``frames = 1 + (samples - win) // hop``.

        Raises:
            ValueError: a non-1-D wave, one shorter than one frame, or integers other than int16
                (their scale is unknown).
        """
        x = np.asarray(wave)
        if x.ndim != 1:
            raise ValueError(f"expected a mono wave of shape (samples,), got shape {x.shape}")
        if np.issubdtype(x.dtype, np.integer) and x.dtype != np.int16:
            raise ValueError(f"integer samples must be int16 (Kaldi's scale), got {x.dtype}: pass floats in [-1, 1]")
        win, hop, n_fft = self.frame_params(fs)
        if x.size < win:
            raise ValueError(f"a wave of {x.size} samples ({x.size / fs:.4f} s) is shorter than one frame "
                             f"({win} samples, win_length_s {self.win_length_s})")
        scale = 1.0 if np.issubdtype(x.dtype, np.integer) else 32768.0
        frames = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32) * np.float32(scale)).unfold(0, win, hop)
        frames = frames - frames.mean(dim=1, keepdim=True)
        frames = frames - 0.97 * torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
        frames = frames * torch.hann_window(win, periodic=False).pow(0.85)
        power = torch.fft.rfft(frames, n=n_fft).abs().pow(2)
        mel = power @ self.mel_filters(fs).T
        return mel.clamp_(min=torch.finfo(torch.float32).eps).log_().numpy()


def make_extractor(frontend: str = "stft", **options: Any):
    """The front end ``frontend`` (:data:`FRONTENDS`) with ``options`` (the feature config's
    keys of :class:`LogMel` or :class:`KaldiFbank`): ``(wave, fs) -> (frames, n_mels)``.

    Raises:
        ValueError: an unknown ``frontend``; with ``kaldi``, a :class:`LogMel`-only option
            (``n_fft``, ``dtype``, ``log``, ``pad_mode``) set to other than its default (it would
            be ignored); the front end's own errors.
    """
    if frontend not in FRONTENDS:
        raise ValueError(f"frontend must be one of {FRONTENDS}, got {frontend!r}")
    if frontend == "stft":
        return LogMel(**options)
    given = sorted(f"{k}: {options[k]}" for k, v in _LOGMEL_ONLY.items() if options.get(k, v) != v)
    if given:
        raise ValueError(f"{', '.join(given)}: not options of frontend kaldi (Kaldi's fbank: FFT of the frame "
                         "rounded up to a power of two, float32, natural log, whole frames only)")
    return KaldiFbank(**{k: v for k, v in options.items() if k not in _LOGMEL_ONLY})
