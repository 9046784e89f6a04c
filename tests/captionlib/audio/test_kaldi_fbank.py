"""Kaldi fbank front end (captionlib.audio.features.KaldiFbank, ``frontend: kaldi``): stage 2's
features equal kaldi-native-fbank's (Kaldi's ``compute-fbank-feats`` reimplemented by the
k2-fsa project) on real Clotho clips, and ``egs/clotho/conf/feats_beats.yaml`` is BEATs' front
end (``torchaudio.compliance.kaldi.fbank(num_mel_bins=128, sample_frequency=16000,
frame_length=25, frame_shift=10)``, the rest torchaudio's defaults), which kaldi-native-fbank
refuses ("num_mel_bins too large": one of the 128 bands gets no FFT bin) and torchaudio
computes, with that band at the floor."""

from pathlib import Path

import kaldi_native_fbank as knf
import numpy as np
import pytest
import yaml

from captionbin import caption_dump_feats
from captionlib.audio.features import KaldiFbank, make_extractor
from captionlib.audio.io import load_audio
from captionlib.io.datadir import write_scp
from captionlib.io.feats import FeatReader
from captionlib.packed import LOGMEL_KEYS

REPO = Path(__file__).resolve().parents[3]
CONF = REPO / "egs" / "clotho" / "conf" / "feats_beats.yaml"
CLIPS = sorted(Path("/work/shared/data/clotho_fixture").glob("*/*.wav"))
EPS_LOG = float(np.log(np.finfo(np.float32).eps))  # Kaldi's floor: ln(1.19e-7) = -15.94


def _knf(wave, fs, n_mels, **opts):
    """kaldi-native-fbank's features of ``wave`` (in [-1, 1]) with dither 0, as Kaldi reads a
    16-bit wav (samples times 32768)."""
    o = knf.FbankOptions()
    o.frame_opts.dither, o.frame_opts.samp_freq, o.mel_opts.num_bins = 0.0, fs, n_mels
    for k, v in opts.items():
        setattr(o.mel_opts, k, v)
    f = knf.OnlineFbank(o)
    f.accept_waveform(fs, (np.asarray(wave, dtype=np.float32) * 32768).tolist())
    f.input_finished()
    return np.stack([f.get_frame(i) for i in range(f.num_frames_ready)])


# 11,025 Hz: 25 ms is 275.625 samples, which Kaldi truncates to 275
@pytest.mark.parametrize("n_mels,fs,opts", [(80, 16000, {}), (23, 16000, {}), (64, 44100, {"low_freq": 50.0}),
                                            (40, 11025, {})])
def test_equals_kaldi_native_fbank(n_mels, fs, opts):
    assert len(CLIPS) >= 4
    extractor = KaldiFbank(n_mels=n_mels, fmin=opts.get("low_freq", 20.0))
    for clip in CLIPS:
        wave, rate = load_audio(clip, fs=fs)
        ours, ref = extractor(wave, rate), _knf(wave, rate, n_mels, **opts)
        assert ours.dtype == np.float32 and ours.shape == ref.shape == (extractor.num_frames(len(wave), rate), n_mels)
        assert extractor.frame_params(rate)[0] == int(rate * 25 * 0.001)
        # float32 FFT and log round-off: < 2e-3 absolute in values up to 26 (natural log)
        np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-3, err_msg=str(clip))
        assert np.abs(ours - ref).mean() < 1e-4


def _kaldi_mel_banks(n_mels, fs, n_fft, low, high):
    """Kaldi's ``MelBanks`` (feat/mel-computations.cc), written as its loops: for each band,
    the FFT bins strictly between its left and right edges on the mel scale get the up or down
    slope; (n_mels, n_fft // 2 + 1) with the Nyquist bin 0, as torchaudio's ``get_mel_banks``
    padded by ``fbank``."""
    mel = lambda f: 1127.0 * np.log(1.0 + f / 700.0)  # noqa: E731
    delta = (mel(high) - mel(low)) / (n_mels + 1)
    banks = np.zeros((n_mels, n_fft // 2 + 1))
    for b in range(n_mels):
        left = mel(low) + b * delta
        center, right = left + delta, left + 2 * delta
        for i in range(n_fft // 2):
            m = mel(fs * i / n_fft)
            if left < m < right:
                banks[b, i] = (m - left) / (center - left) if m <= center else (right - m) / (right - center)
    return banks


def test_feats_beats_is_the_authors_front_end(tmp_path):
    conf = yaml.safe_load(CONF.read_text())
    assert conf["frontend"] == "kaldi" and conf["fs"] == 16000 and conf["n_mels"] == 128
    extractor = make_extractor(**{k: conf[k] for k in LOGMEL_KEYS if k in conf})
    assert isinstance(extractor, KaldiFbank) and extractor.frame_params(16000) == (400, 160, 512)
    # one of the 128 bands has no FFT bin: kaldi-native-fbank refuses, torchaudio (and we) give the floor
    filters = extractor.mel_filters(16000).numpy()
    assert filters.shape == (128, 257) and not filters[:, 256].any()
    np.testing.assert_allclose(filters, _kaldi_mel_banks(128, 16000, 512, 20.0, 8000.0), rtol=0, atol=1e-6)
    empty = np.flatnonzero(filters.max(axis=1) == 0)
    assert len(empty) == 1
    with pytest.raises(Exception, match="num_mel_bins too large"):
        _knf(np.zeros(16000), 16000, 128)
    # stage 2 with the config stores exactly these features: the empty band at the floor, every other one varying
    write_scp(tmp_path / "wav.scp", {f"clip{i}": str(c) for i, c in enumerate(CLIPS)})
    caption_dump_feats.main(["--config", str(CONF), "--wav_scp", str(tmp_path / "wav.scp"), "--filetype", "ark",
                             "--out_prefix", str(tmp_path / "dump" / "feats.1")])
    assert (tmp_path / "dump" / "feats_dim.1").read_text() == "128\n"
    dumped = FeatReader(tmp_path / "dump" / "feats.1.scp")
    for i, clip in enumerate(CLIPS):
        wave, _ = load_audio(clip, fs=16000)
        feats = dumped[f"clip{i}"]
        assert np.array_equal(feats, extractor(wave, 16000))
        assert feats.shape == (1 + (len(wave) - 400) // 160, 128)
        assert np.all(feats[:, empty] == np.float32(EPS_LOG))
        assert np.all(np.delete(feats, empty, axis=1).std(axis=0) > 0)


def test_integer_input_and_errors():
    wave, _ = load_audio(CLIPS[0], fs=16000)
    pcm = np.round(wave * 32768).clip(-32768, 32767).astype(np.int16)
    extractor = KaldiFbank(n_mels=40)
    np.testing.assert_allclose(extractor(pcm, 16000), extractor(pcm / 32768.0, 16000), atol=1e-4)
    with pytest.raises(ValueError, match="integer samples must be int16"):
        extractor(pcm.astype(np.int32), 16000)
    with pytest.raises(ValueError, match="shorter than one frame"):
        extractor(np.zeros(399), 16000)
    with pytest.raises(ValueError, match="Nyquist"):
        KaldiFbank(fmax=9000)(wave, 16000)
    # options of the STFT front end are refused with frontend kaldi, not ignored
    with pytest.raises(ValueError, match="n_fft: 1024, pad_mode: reflect: not options of frontend kaldi"):
        make_extractor("kaldi", n_mels=128, n_fft=1024, pad_mode="reflect")
    with pytest.raises(ValueError, match="frontend must be one of"):
        make_extractor("htk", n_mels=128)
