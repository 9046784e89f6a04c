"""The PANNs front end as a features config (egs/clotho/conf/feats_panns.yaml): the features
dumped at stage 2 equal the authors' front end computed independently, on real Clotho clips.

How the front end was checked: the authors' facts were read from their code, not copied:
``pytorch/models.py`` of github.com/qiuqiangkong/audioset_tagging_cnn (Cnn14/Cnn10 build
torchlibrosa's ``Spectrogram(n_fft=window_size, hop_length=hop_size, win_length=window_size,
window='hann', center=True, pad_mode='reflect')`` and ``LogmelFilterBank(sr, n_fft, n_mels,
fmin, fmax, ref=1.0, amin=1e-10, top_db=None)``; README / inference.py: 32000 Hz, window 1024,
hop 320, 64 mel bins, 50-14000 Hz, audio read with ``librosa.core.load(sr=32000)``) and
torchlibrosa's ``stft.py`` (periodic Hann window from ``librosa.filters.get_window(...,
fftbins=True)``, reflection padding of n_fft // 2, power ``real**2 + imag**2``, mel matrix
``librosa.filters.mel(...).T``, ``10 * log10(clamp(x, amin)) - 10 * log10(max(amin, ref))``).
:func:`_authors_front_end` computes that with librosa in float64 from ``librosa.load(path,
sr=32000)`` (the authors' loading), none of captionlib's code involved; stage 2 is run for
real (``caption_dump_feats --config feats_panns.yaml``, the job of ``dump_feats.sh``) and its
stored features are compared within 1e-4 dB. The audio both sides see is the same: stage 2's
soxr resampling gives exactly librosa.load's signal (librosa >= 0.10 resamples with soxr
"HQ" too), which the test asserts. The only differences left are float round-off: the
mel matrix in float64 here vs the authors' float32 (< 1e-6 dB) and the float32 storage of the
features (< 1e-5 dB at |value| < 100 dB).
"""

from pathlib import Path

import librosa
import numpy as np
import pytest
import yaml

from captionbin import caption_dump_feats
from captionlib.audio.features import LogMel
from captionlib.audio.io import load_audio
from captionlib.io.datadir import write_scp
from captionlib.io.feats import FeatReader
from captionlib.packed import LOGMEL_KEYS

REPO = Path(__file__).resolve().parents[3]
CONF = REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml"
FIXTURE = Path("/work/shared/data/clotho_fixture")
SUBSET = Path("/work/shared/data/clotho_subset")
# the 2 s fixture clips (44.1 kHz), and a full-length clip (30 s) where the subset is present
CLIPS = sorted(FIXTURE.glob("*/*.wav")) + [c for c in [SUBSET / "validation" / "Wind Tunnel.wav"] if c.is_file()]


def _authors_front_end(path):
    """PANNs' log-mel of an audio file (frames, 64), float64, from librosa only."""
    wave, sr = librosa.load(path, sr=32000, mono=True)
    spec = librosa.stft(wave.astype(np.float64), n_fft=1024, hop_length=320, win_length=1024, window="hann",
                        center=True, pad_mode="reflect")
    mel = librosa.filters.mel(sr=32000, n_fft=1024, n_mels=64, fmin=50, fmax=14000, dtype=np.float64)
    return 10.0 * np.log10(np.maximum((np.abs(spec) ** 2).T @ mel.T, 1e-10)), wave


def test_config_is_the_authors_front_end():
    conf = yaml.safe_load(CONF.read_text())
    assert conf["fs"] == 32000 and conf["n_fft"] == 1024 and conf["n_mels"] == 64
    assert (conf["fmin"], conf["fmax"], conf["log"], conf["pad_mode"]) == (50, 14000, "db", "reflect")
    extractor = LogMel(**{k: conf[k] for k in LOGMEL_KEYS if k in conf})
    assert extractor.frame_params(32000) == (1024, 320)  # 0.032 s and 0.01 s at 32 kHz, exactly
    # every key reaches the dump job and the packed-model front end
    dests = {a.dest for a in caption_dump_feats.get_parser()._actions}
    assert set(conf) - {"feats_type", "fs"} <= set(LOGMEL_KEYS) <= dests


# librosa.load imports audioread, which imports modules deprecated in Python 3.11
@pytest.mark.filterwarnings("ignore:'(audioop|sunau|aifc)' is deprecated:DeprecationWarning")
def test_stage2_features_equal_the_authors_front_end(tmp_path):
    assert len(CLIPS) >= 4
    write_scp(tmp_path / "wav.scp", {f"clip{i}": str(c) for i, c in enumerate(CLIPS)})
    caption_dump_feats.main(["--config", str(CONF), "--wav_scp", str(tmp_path / "wav.scp"), "--filetype", "ark",
                             "--out_prefix", str(tmp_path / "dump" / "feats.1")])
    assert (tmp_path / "dump" / "feats_dim.1").read_text() == "64\n"
    dumped = FeatReader(tmp_path / "dump" / "feats.1.scp")
    for i, clip in enumerate(CLIPS):
        ref, wave = _authors_front_end(clip)
        ours, sr = load_audio(clip, fs=32000)
        assert sr == 32000 and np.array_equal(ours, wave)  # the same resampled audio as librosa.load
        feats = dumped[f"clip{i}"]
        assert feats.dtype == np.float32 and feats.shape == ref.shape == (1 + len(wave) // 320, 64)
        np.testing.assert_allclose(feats, ref, rtol=0, atol=1e-4, err_msg=str(clip))
        assert ref.min() < -30  # quiet bands are compared too, not only loud ones


def test_log_and_padding_options():
    wave, sr = load_audio(CLIPS[0], fs=32000)
    ln = LogMel(n_fft=1024, win_length_s=0.032, hop_length_s=0.01, dtype="float64")
    db = LogMel(n_fft=1024, win_length_s=0.032, hop_length_s=0.01, dtype="float64", log="db")
    np.testing.assert_allclose(db(wave, sr), ln(wave, sr) * 10 / np.log(10), rtol=1e-6, atol=1e-4)
    reflect = LogMel(n_fft=1024, win_length_s=0.032, hop_length_s=0.01, pad_mode="reflect")
    const = LogMel(n_fft=1024, win_length_s=0.032, hop_length_s=0.01)
    a, b = reflect(wave, sr), const(wave, sr)
    assert np.array_equal(a[2:-2], b[2:-2]) and not np.allclose(a[0], b[0])  # only the edge frames differ
    with pytest.raises(ValueError, match="too short for pad_mode reflect"):
        reflect(wave[:512], sr)
    with pytest.raises(ValueError, match="log must be one of"):
        LogMel(log="log10")
    with pytest.raises(ValueError, match="pad_mode one of"):
        LogMel(pad_mode="edge")
