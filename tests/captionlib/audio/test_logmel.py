"""Tests of captionlib.audio.features: log-mel against librosa on real Clotho audio."""

import librosa
import numpy as np
import pytest

from captionlib.audio.features import LogMel, logmel
from captionlib.audio.io import load_audio

CLIP = "/work/shared/data/clotho_fixture/validation/living room clock.wav"


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


@pytest.mark.parametrize("fs", [None, 16000])
def test_matches_librosa_melspectrogram(fs):
    wave, sr = load_audio(CLIP, fs=fs)
    feats = logmel(wave, sr)
    win, hop = round(0.04 * sr), round(0.02 * sr)
    ref = _librosa_logmel(wave, sr, win, hop)
    assert feats.dtype == np.float32
    assert feats.shape == ref.shape == (1 + len(wave) // hop, 64)
    assert feats.shape[0] == 101  # 2 s at a 20 ms hop, centred frames
    np.testing.assert_allclose(feats, ref, rtol=0, atol=1e-4)


def test_seed_frame_parameters_at_44k1():
    lm = LogMel()
    assert lm.frame_params(44100) == (1764, 882)  # 40 ms window, 20 ms hop
    assert lm.mel_filters(44100).shape == (64, 1025)
    assert lm.num_frames(88200, 44100) == 101


def test_silence_is_floored_and_finite():
    feats = logmel(np.zeros(4410, np.float32), 44100)
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
