"""Tests of captionlib.audio.features: log-mel against librosa on real Clotho audio."""

import re
from pathlib import Path

import librosa
import numpy as np
import pytest

from captionlib.audio.features import LogMel, logmel
from captionlib.audio.io import load_audio

CLIP = "/work/shared/data/clotho_fixture/validation/living room clock.wav"
FIXTURE = Path("/work/shared/data/clotho_fixture")
SUBSET = Path("/work/shared/data/clotho_subset")
# full-length clips (16-30 s) with the largest float32/float64 differences of clotho_subset
LONG_CLIPS = [SUBSET / "evaluation" / "turning pages book slow quickly.wav", SUBSET / "validation" / "Wind Tunnel.wav"]


def _librosa_logmel(wave, sr, win, hop):
    mel = librosa.feature.melspectrogram(
        y=wave.astype(np.float64),
        sr=sr,
        n_fft=2048,
        hop_length=hop,
        win_length=win,
        window="hann",
        center=True,
        pad_mode="constant",
        power=2.0,
        n_mels=64,
    )
    return np.log(np.maximum(mel, 1e-10)).T


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fs", [None, 16000])
def test_matches_librosa_melspectrogram(fs, dtype):
    wave, sr = load_audio(CLIP, fs=fs)
    feats = logmel(wave, sr, dtype=dtype)
    win, hop = round(0.04 * sr), round(0.02 * sr)
    ref = _librosa_logmel(wave, sr, win, hop)
    assert feats.dtype == np.float32
    assert feats.shape == ref.shape == (1 + len(wave) // hop, 64)
    assert feats.shape[0] == 101  # 2 s at a 20 ms hop, centred frames
    np.testing.assert_allclose(feats, ref, rtol=0, atol=1e-4)


def test_float32_agrees_with_float64_on_real_clips():
    clips = sorted(FIXTURE.glob("*/*.wav")) + [c for c in LONG_CLIPS if c.is_file()]
    assert len(clips) >= 4
    f32, f64 = LogMel(), LogMel(dtype="float64")
    assert f32.dtype == "float32" and f32.mel_filters(44100).dtype == np.float32
    assert f64.mel_filters(44100).dtype == np.float64
    for clip in clips:
        for fs in (None, 16000):
            wave, sr = load_audio(clip, fs=fs)
            a, b = f32(wave, sr), f64(wave, sr)
            assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
            # relative to the clip's features as a whole (elementwise relative error is
            # meaningless for log values near 0)
            assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-5, clip
            # float32 FFT round-off is relative to the frame's loudest bins: the worst elements
            # (up to 1.7e-3, 8e-5 * (1 + |value|), on clotho_subset at 44.1/16 kHz) sit in
            # bands > 100 dB below them
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4, err_msg=str(clip))


def test_seed_frame_parameters_at_44k1():
    lm = LogMel()
    assert lm.frame_params(44100) == (1764, 882)  # 40 ms window, 20 ms hop
    assert lm.mel_filters(44100).shape == (64, 1025)
    assert lm.num_frames(88200, 44100) == 101


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_silence_is_floored_and_finite(dtype):
    feats = logmel(np.zeros(4410, np.float32), 44100, dtype=dtype)
    assert np.all(np.isfinite(feats))
    np.testing.assert_allclose(feats, np.log(1e-10), rtol=1e-6)


def test_louder_input_shifts_log_energy():
    wave, sr = load_audio(CLIP)
    a = logmel(wave, sr)
    b = logmel(2 * wave, sr)
    loud = a > -15  # away from the floor
    np.testing.assert_allclose((b - a)[loud], np.log(4.0), atol=1e-4)


def test_bad_inputs():
    with pytest.raises(ValueError, match="exceeds n_fft"):
        logmel(np.ones(96000, np.float32), 96000)  # 40 ms = 3840 samples > 2048
    with pytest.raises(ValueError, match="mono"):
        logmel(np.ones((2, 100), np.float32), 16000)
    with pytest.raises(ValueError, match="empty"):
        logmel(np.ones(0, np.float32), 16000)
    with pytest.raises(ValueError, match="dtype must be one of"):
        LogMel(dtype="float16")


@pytest.mark.parametrize("options, fs, message", [
    ({"fmin": 8000, "fmax": 4000}, None, "fmax (null: Nyquist) above fmin"),
    ({"fmin": -1}, None, "fmin must be >= 0"),
    ({"fmin": 30000}, 44100, "do not fit below the Nyquist frequency 22050 Hz of audio at 44100 Hz"),
    ({"fmax": 100000}, 44100, "do not fit below the Nyquist frequency 22050 Hz"),
    ({"fmax": 14000}, 16000, "do not fit below the Nyquist frequency 8000 Hz of audio at 16000 Hz"),
    ({"n_mels": 256, "n_fft": 256, "win_length_s": 0.004}, 16000, "mel bands get no FFT bin at n_fft 256"),
])
def test_mel_bands_without_energy_are_refused(options, fs, message):
    """Bands above the Nyquist frequency or without an FFT bin gave constant features (exit 0,
    only librosa's UserWarning); now a ValueError saying which option to change."""
    with pytest.raises(ValueError, match=re.escape(message)):
        lm = LogMel(**options)
        lm(np.random.default_rng(0).standard_normal(fs), fs)


def test_a_wave_shorter_than_one_window_is_refused():
    """A 1-sample file gave one frame at the log floor (exit 0), and caption_infer captioned it."""
    for n in (1, 881):  # one window of 0.02 s is 882 samples at 44.1 kHz
        with pytest.raises(ValueError, match=f"a wave of {n} samples .* is shorter than one analysis window"):
            LogMel(win_length_s=0.02)(np.ones(n), 44100)
    assert LogMel(win_length_s=0.02)(np.ones(882), 44100).shape[0] == 1 + 882 // 882
