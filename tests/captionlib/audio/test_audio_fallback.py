"""load_audio / audio_info: the PyAV fallback for formats libsndfile cannot open, and files
libsndfile reads are read by libsndfile alone (the same samples as before the fallback)."""

import numpy as np
import pytest
import soundfile as sf

from captionlib.audio.io import audio_info, load_audio
from packed_models import FIXTURE, write_with_pyav

pytest.importorskip("av")
CLIP = FIXTURE / "validation" / "Whistling.wav"


def test_m4a_is_decoded_by_pyav(tmp_path):
    wave, sr = sf.read(CLIP, dtype="float32")
    path = write_with_pyav(tmp_path / "whistling clip.m4a", wave, sr, "aac", 22050)
    with pytest.raises(Exception):  # noqa: B017 -- soundfile's error type varies (LibsndfileError, RuntimeError)
        sf.info(path)  # libsndfile cannot open AAC in MP4
    info = audio_info(path)
    assert (info.sample_rate, info.channels) == (22050, 2)
    assert abs(info.duration - 2.0) < 0.1  # AAC adds encoder padding
    got, rate = load_audio(path)
    assert rate == 22050 and got.dtype == np.float32 and got.shape == (info.frames,)
    # the same audio: correlate with the original resampled to 22.05 kHz
    ref, _ = load_audio(CLIP, fs=22050)
    n = min(len(ref), len(got))
    lag = int(np.argmax(np.correlate(got[:n], ref[:4096], mode="valid")))
    seg = got[lag: lag + n - 4096]
    assert np.corrcoef(seg, ref[: len(seg)])[0, 1] > 0.95
    resampled, rate = load_audio(path, fs=16000)
    assert rate == 16000 and abs(len(resampled) - len(got) * 16000 / 22050) < 2


def test_mp3_reads_at_its_rate(tmp_path):
    wave, sr = sf.read(CLIP, dtype="float32")
    path = write_with_pyav(tmp_path / "w.mp3", wave, sr, "mp3", 48000)
    got, rate = load_audio(path)
    assert rate == 48000 and abs(len(got) / rate - 2.0) < 0.1 and np.isfinite(got).all()


def test_files_libsndfile_reads_give_its_samples(tmp_path, monkeypatch):
    """A WAV/FLAC/OGG is read by soundfile alone: the fallback is never called for it."""
    import captionlib.audio.io as aio

    def fail(*a, **k):
        raise AssertionError("PyAV fallback used for a file libsndfile reads")

    monkeypatch.setattr(aio, "_decode_with_pyav", fail)
    wave, sr = sf.read(CLIP, dtype="float32")
    for name in ["a.wav", "a.flac", "a.ogg"]:
        sf.write(tmp_path / name, np.stack([wave, 0.5 * wave], 1), sr)
        got, rate = load_audio(tmp_path / name)
        ref = sf.read(tmp_path / name, dtype="float32", always_2d=True)[0].mean(axis=1)
        assert rate == sr
        np.testing.assert_array_equal(got, ref.astype(np.float32))


def test_unreadable_by_both_names_the_file_and_both_errors(tmp_path):
    bad = tmp_path / "noise.mp3"
    bad.write_bytes(b"\x00\x01garbage" * 50)
    with pytest.raises(ValueError, match=r"noise\.mp3: cannot read audio: .*PyAV"):
        load_audio(bad)
    empty = tmp_path / "empty.ogg"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.ogg: cannot read audio"):
        audio_info(empty)
