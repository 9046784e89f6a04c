"""Tests of captionlib.audio.io: loading, mono mixdown, resampling and error messages."""

import numpy as np
import pytest
import soundfile as sf

from captionlib.audio.io import audio_info, load_audio

FIXTURE = "/work/shared/data/clotho_fixture"
WHISTLING = f"{FIXTURE}/validation/Whistling.wav"


def test_load_fixture_clip():
    wave, sr = load_audio(WHISTLING)
    assert sr == 44100 and wave.dtype == np.float32 and wave.shape == (88200,)
    ref, _ = sf.read(WHISTLING, dtype="int16")
    np.testing.assert_array_equal(wave, ref.astype(np.float32) / 32768.0)


def test_audio_info():
    info = audio_info(f"{FIXTURE}/evaluation/bird-twitter-car.wav")
    assert (info.sample_rate, info.frames, info.channels) == (44100, 88200, 1)
    assert info.duration == pytest.approx(2.0)


def test_resample_with_soxr():
    wave, sr = load_audio(WHISTLING, fs=16000)
    assert sr == 16000 and wave.dtype == np.float32 and wave.shape == (32000,)
    # same rate: untouched
    same, sr2 = load_audio(WHISTLING, fs=44100)
    assert sr2 == 44100 and same.shape == (88200,)


def test_resampled_tone_keeps_its_frequency(tmp_path):
    sr, f0 = 44100, 1000.0
    t = np.arange(sr) / sr
    sf.write(tmp_path / "tone.wav", 0.5 * np.sin(2 * np.pi * f0 * t), sr, subtype="FLOAT")
    wave, rate = load_audio(tmp_path / "tone.wav", fs=16000)
    spec = np.abs(np.fft.rfft(wave))
    assert np.argmax(spec) * rate / len(wave) == pytest.approx(f0, abs=2)


def test_multichannel_is_averaged(tmp_path):
    rng = np.random.default_rng(0)
    left = rng.uniform(-0.5, 0.5, 1000).astype(np.float32)
    right = rng.uniform(-0.5, 0.5, 1000).astype(np.float32)
    sf.write(tmp_path / "st.wav", np.stack([left, right], axis=1), 8000, subtype="FLOAT")
    wave, sr = load_audio(tmp_path / "st.wav")
    assert sr == 8000 and wave.shape == (1000,)
    np.testing.assert_allclose(wave, (left + right) / 2, atol=1e-7)


def test_empty_unreadable_missing(tmp_path):
    empty = tmp_path / "empty clip.wav"
    sf.write(empty, np.zeros(0, np.float32), 16000)
    with pytest.raises(ValueError, match=r"empty clip\.wav: empty audio \(0 samples\)"):
        load_audio(empty)
    assert audio_info(empty).frames == 0
    bad = tmp_path / "garbage.wav"
    bad.write_bytes(b"this is not audio at all" * 10)
    with pytest.raises(ValueError, match=r"garbage\.wav: cannot read audio"):
        load_audio(bad)
    with pytest.raises(ValueError, match=r"garbage\.wav: cannot read audio"):
        audio_info(bad)
    with pytest.raises(FileNotFoundError, match="nope.wav"):
        load_audio(tmp_path / "nope.wav")
    with pytest.raises(ValueError, match="positive"):
        load_audio(WHISTLING, fs=0)
