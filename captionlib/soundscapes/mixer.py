"""Sound-scene mixer: sample a clip's annotation, then render it to a waveform.

A clip (:class:`SoundscapeSpec`) is a quiet coloured-noise background plus 1-3 foreground
events of distinct classes from an event library. Events are placed one after another:
each later event either overlaps the one before it (it starts inside that event and at
least ``min_overlap_s`` before its end) or follows after every earlier event has ended.
A short event may repeat 2-4 times with short gaps. Each event has a loudness class with
its own signal-to-noise range (``loud``, ``normal``, ``distant``; distant events are also
low-passed, as air absorption and distance dull a sound), and the whole arrangement is
shifted to a random position in the clip. Everything is drawn from one
``numpy.random.Generator``, so a clip is a pure function of its seed.

Scaper (Salamon et al., WASPAA 2017) is the usual tool for this; its last release (1.6.5)
does not run with numpy 2 (``np.Inf``), which the toolkit needs, hence this small mixer.
SNR here is the ratio of RMS levels (the event's RMS over its whole recording, the
background's over the clip) in dB; Scaper uses LUFS.
"""

from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from captionlib.soundscapes.captions import EventMention, onset_order
from captionlib.soundscapes.library import EventFile


@dataclass(frozen=True)
class SoundscapeConfig:
    """Distributions of the generated clips.

    Attributes:
        duration_s: clip length in seconds.
        sample_rate: Hz (library audio is resampled to it).
        event_count_weights: relative probabilities of 1, 2, 3, ... foreground events.
        overlap_prob: probability that a later event overlaps the one before it.
        min_overlap_s: an overlap lasts at least this long (seconds).
        gap_s: (min, max) silence between events in sequence, seconds.
        repeat_prob: probability that an event of at most ``max_repeat_event_s`` repeats.
        max_repeat_event_s: longest recording (seconds) that may repeat.
        repeat_gap_s: (min, max) gap between repetitions, seconds.
        loudness_probs: probability of each loudness class.
        snr_db: (min, max) event-to-background SNR in dB per loudness class.
        distant_lowpass_hz: (min, max) cut-off of the low-pass applied to distant events.
        background_dbfs: (min, max) RMS level of the background in dB full scale.
        background_slope: (min, max) exponent b of the background's 1/f^b power spectrum
            (1: pink, 2: brown).
    """

    duration_s: float = 10.0
    sample_rate: int = 16000
    event_count_weights: Tuple[float, ...] = (0.35, 0.4, 0.25)
    overlap_prob: float = 0.35
    min_overlap_s: float = 0.5
    gap_s: Tuple[float, float] = (0.2, 1.5)
    repeat_prob: float = 0.25
    max_repeat_event_s: float = 2.5
    repeat_gap_s: Tuple[float, float] = (0.15, 0.6)
    loudness_probs: Tuple[Tuple[str, float], ...] = (("loud", 0.2), ("normal", 0.55), ("distant", 0.25))
    snr_db: Tuple[Tuple[str, Tuple[float, float]], ...] = (
        ("loud", (26.0, 32.0)), ("normal", (14.0, 22.0)), ("distant", (4.0, 10.0)),
    )
    distant_lowpass_hz: Tuple[float, float] = (1500.0, 3000.0)
    background_dbfs: Tuple[float, float] = (-55.0, -45.0)
    background_slope: Tuple[float, float] = (1.0, 2.0)


def check_sample_rate(sample_rate: object, lowpass_hz: Tuple[float, float] = SoundscapeConfig.distant_lowpass_hz,
                      option: str = "--sample_rate") -> None:
    """Check, before any clip is mixed, that the low-pass of distant events (cut-offs in
    ``lowpass_hz``, a Butterworth filter) can run at ``sample_rate``: every cut-off must lie
    in (0, sample_rate / 2).

    Raises:
        ValueError: one line naming ``option`` (or ``distant_lowpass_hz``) and the valid range.
    """
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"{option} must be a positive integer (Hz), got {sample_rate!r}")
    low, high = lowpass_hz
    if not 0.0 < low <= high:
        raise ValueError(f"--mixer_conf: distant_lowpass_hz must be (min, max) with 0 < min <= max, got {lowpass_hz}")
    if high >= sample_rate / 2.0:
        raise ValueError(f"{option} must be above {2 * high:g} Hz, got {sample_rate}: the low-pass of distant events "
                         f"(distant_lowpass_hz {low:g}-{high:g} Hz) needs cut-offs below half the sample rate")


def mixer_config(overrides: Dict[str, object], **fields) -> SoundscapeConfig:
    """A :class:`SoundscapeConfig` from YAML-style overrides (lists become tuples).

    Raises:
        ValueError: an unknown field, a value whose type differs from the default's
            (numbers: int or float; sequences: list or tuple), or a sample rate too low for
            the low-pass of distant events (:func:`check_sample_rate`).
    """
    defaults = asdict(SoundscapeConfig())
    conf = {**fields, **overrides}
    for key, value in conf.items():
        if key not in defaults:
            raise ValueError(f"--mixer_conf: unknown field {key!r}; fields: {', '.join(defaults)}")
        ref = defaults[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ((isinstance(ref, (int, float)) and not number)
                or (isinstance(ref, tuple) and not isinstance(value, (list, tuple)))):
            raise ValueError(f"--mixer_conf: {key} must be like {ref!r}, got {value!r}")

    def tuples(v):
        return tuple(tuples(x) for x in v) if isinstance(v, (list, tuple)) else v

    config = SoundscapeConfig(**{k: tuples(v) for k, v in conf.items()})
    check_sample_rate(config.sample_rate, config.distant_lowpass_hz)
    return config


@dataclass
class PlacedEvent:
    """One foreground event of a clip (all times in seconds from the clip start).

    Attributes:
        label, file: class label and recording (as named in the library).
        noun, verb_3sg, verb_ing: caption phrases.
        onsets_s: start of each occurrence (ascending; several = repeated).
        duration_s: length of the recording (one occurrence).
        loudness: ``loud``, ``normal`` or ``distant``.
        snr_db: RMS level over the background's, in dB.
        lowpass_hz: low-pass cut-off (distant events) or ``None``.
    """

    label: str
    file: str
    noun: str
    verb_3sg: str
    verb_ing: str
    onsets_s: List[float]
    duration_s: float
    loudness: str
    snr_db: float
    lowpass_hz: Optional[float] = None

    @property
    def onset_s(self) -> float:
        """Start of the first occurrence (seconds)."""
        return self.onsets_s[0]

    @property
    def offset_s(self) -> float:
        """End of the last occurrence (seconds)."""
        return self.onsets_s[-1] + self.duration_s

    def mention(self) -> EventMention:
        """The event as the caption writer sees it."""
        return EventMention(
            self.noun, self.verb_3sg, self.verb_ing, self.onset_s, self.offset_s, len(self.onsets_s), self.loudness
        )


@dataclass
class SoundscapeSpec:
    """The annotation of one clip: everything needed to render it and caption it."""

    duration_s: float
    sample_rate: int
    background_dbfs: float
    background_slope: float
    background_seed: int
    events: List[PlacedEvent] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready dict (one line of ``annotations_<split>.jsonl``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SoundscapeSpec":
        """Inverse of :meth:`to_dict`.

        Raises:
            TypeError: unknown or missing keys.
        """
        d = dict(d)
        d["events"] = [PlacedEvent(**e) for e in d.get("events", [])]
        return cls(**d)


def _choose(rng: np.random.Generator, pairs: Sequence[Tuple[str, float]]) -> str:
    names = [n for n, _ in pairs]
    p = np.asarray([w for _, w in pairs], dtype=float)
    return names[int(rng.choice(len(names), p=p / p.sum()))]


def _place(
    rng: np.random.Generator, files: Sequence[EventFile], durations: Dict[str, float], cfg: SoundscapeConfig
) -> Optional[List[Tuple[EventFile, List[float]]]]:
    """Onsets of each occurrence of ``files`` in placement order, or ``None`` if too long."""
    placed: List[Tuple[EventFile, List[float]]] = []
    end = 0.0  # latest offset so far
    prev_on = prev_off = 0.0
    for i, f in enumerate(files):
        d = durations[f.path]
        count = 1
        if d <= cfg.max_repeat_event_s and rng.random() < cfg.repeat_prob:
            count = int(rng.integers(2, 5))
        gaps = rng.uniform(*cfg.repeat_gap_s, size=count - 1)
        if i == 0:
            start = 0.0
        elif rng.random() < cfg.overlap_prob and prev_off - cfg.min_overlap_s > prev_on:
            start = float(rng.uniform(prev_on, prev_off - cfg.min_overlap_s))
        else:
            start = end + float(rng.uniform(*cfg.gap_s))
        onsets = [start + k * d + float(gaps[:k].sum()) for k in range(count)]
        placed.append((f, onsets))
        prev_on, prev_off = onsets[0], onsets[-1] + d
        end = max(end, prev_off)
    return placed if end <= cfg.duration_s else None


def sample_soundscape(
    rng: np.random.Generator,
    pool: Sequence[EventFile],
    durations: Dict[str, float],
    cfg: SoundscapeConfig = SoundscapeConfig(),
    max_tries: int = 50,
) -> SoundscapeSpec:
    """Draw the annotation of one clip.

    Args:
        rng: the clip's random generator (the clip depends on nothing else).
        pool: recordings this split may use.
        durations: seconds per recording path (``len(audio) / sample_rate``).
        cfg: distributions.
        max_tries: arrangements tried before dropping an event (events longer than the
            clip together are re-drawn).

    Returns:
        The clip's :class:`SoundscapeSpec`, events in onset order.

    Raises:
        ValueError: empty pool, or no recording fits in ``cfg.duration_s``.
    """
    if not pool:
        raise ValueError("the recording pool is empty")
    by_label: Dict[str, List[EventFile]] = {}
    for f in pool:
        if durations[f.path] <= cfg.duration_s:
            by_label.setdefault(f.label, []).append(f)
    if not by_label:
        raise ValueError(f"no recording of the pool fits in a {cfg.duration_s} s clip")
    labels = sorted(by_label)
    w = np.asarray(cfg.event_count_weights[: len(labels)], dtype=float)
    n = 1 + int(rng.choice(len(w), p=w / w.sum()))
    placed = None
    while placed is None:
        for _ in range(max_tries):
            chosen = rng.choice(len(labels), size=n, replace=False)
            files = [by_label[labels[j]][int(rng.integers(len(by_label[labels[j]])))] for j in chosen]
            placed = _place(rng, files, durations, cfg)
            if placed is not None:
                break
        n -= 1
        if placed is None and n == 0:
            raise ValueError(f"cannot arrange any event in a {cfg.duration_s} s clip")
    span = max(on[-1] + durations[f.path] for f, on in placed)
    shift = float(rng.uniform(0.0, cfg.duration_s - span))
    snr_ranges = dict(cfg.snr_db)
    events = []
    for f, onsets in placed:
        loudness = _choose(rng, cfg.loudness_probs)
        snr = float(rng.uniform(*snr_ranges[loudness]))
        lowpass = float(rng.uniform(*cfg.distant_lowpass_hz)) if loudness == "distant" else None
        events.append(PlacedEvent(
            f.label, f.path, f.noun, f.verb_3sg, f.verb_ing, [round(t + shift, 4) for t in onsets],
            durations[f.path], loudness, round(snr, 2), None if lowpass is None else round(lowpass, 1),
        ))
    events.sort(key=onset_order)
    return SoundscapeSpec(
        cfg.duration_s, cfg.sample_rate,
        background_dbfs=round(float(rng.uniform(*cfg.background_dbfs)), 2),
        background_slope=round(float(rng.uniform(*cfg.background_slope)), 3),
        background_seed=int(rng.integers(2**31)),
        events=events,
    )


def coloured_noise(num_samples: int, slope: float, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian noise with a 1/f^slope power spectrum (flat below 20 Hz), unit RMS.

    Returns:
        (num_samples,) float64.
    """
    spec = np.fft.rfft(rng.standard_normal(num_samples))
    freqs = np.fft.rfftfreq(num_samples, 1.0 / sample_rate)
    spec *= np.maximum(freqs, 20.0) ** (-slope / 2.0)
    x = np.fft.irfft(spec, n=num_samples)
    return x / max(float(np.sqrt(np.mean(x**2))), 1e-12)


def _rms(x: np.ndarray) -> float:
    return max(float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))), 1e-12)


def render(spec: SoundscapeSpec, load: Callable[[str], np.ndarray], peak: float = 0.99) -> np.ndarray:
    """Mix a clip.

    Args:
        spec: the annotation.
        load: ``path -> (samples,) float`` mono audio at ``spec.sample_rate``.
        peak: the mix is scaled down (as a whole, keeping every SNR) when its peak exceeds it.

    Returns:
        (round(duration_s * sample_rate),) float32 in [-peak, peak].

    Raises:
        ValueError: an event whose onset lies outside the clip (a malformed annotation).
    """
    from scipy.signal import butter, sosfilt  # here, not at the top: scipy.signal takes ~1 s to import

    sr = spec.sample_rate
    n = int(round(spec.duration_s * sr))
    bg_rms = 10.0 ** (spec.background_dbfs / 20.0)
    mix = bg_rms * coloured_noise(n, spec.background_slope, sr, np.random.default_rng(spec.background_seed))
    for e in spec.events:
        x = np.asarray(load(e.file), dtype=np.float64)
        if e.lowpass_hz is not None:
            x = sosfilt(butter(2, e.lowpass_hz, fs=sr, output="sos"), x)
        x = x * (bg_rms * 10.0 ** (e.snr_db / 20.0) / _rms(x))
        for t in e.onsets_s:
            a = int(round(t * sr))
            if not 0 <= a < n:
                raise ValueError(f"event {e.label} ({e.file}): onset {t} s outside the {spec.duration_s} s clip")
            b = min(n, a + len(x))
            mix[a:b] += x[: b - a]
    top = float(np.max(np.abs(mix)))
    if top > peak:
        mix *= peak / top
    return mix.astype(np.float32)
