"""Hardening (issue 11): bad audio, features and model files are refused where they first
enter, with a message naming the file, line, clip or key."""

import numpy as np
import pytest
import torch

from bad_inputs import truncate, write_nonfinite_wav, write_raw_ark, write_wav
from captionlib.audio.dump import dump_feats
from captionlib.io.feats import FeatReader, FeatWriter
from captionlib.io.stats import compute_feats_stats
from captionlib.models.captioner import Captioner, model_file_dict


def test_nonfinite_audio_fails_the_dump_naming_line_clip_and_sample(tmp_path):
    good = write_wav(tmp_path / "good.wav")
    bad = write_nonfinite_wav(tmp_path / "bad.wav", at=1600)
    scp = tmp_path / "wav.scp"
    scp.write_text(f"clip-a {good}\nclip-b {bad}\n")
    with pytest.raises(ValueError, match=r"wav.scp:2: clip clip-b: .*bad.wav: 2 non-finite samples .* sample 1600 \(0.100 s\)"):
        dump_feats(scp, tmp_path / "feats", n_mels=16, n_fft=1024)


def test_feature_writer_refuses_nonfinite_features(tmp_path):
    with FeatWriter(tmp_path / "feats", "ark") as w:
        with pytest.raises(ValueError, match="features of 'clip-x' contain 8 non-finite values.*frame 3"):
            w["clip-x"] = np.where(np.arange(40)[:, None] == 3, np.nan, 0.0) * np.ones((40, 8))


def test_stats_and_decoder_refuse_nonfinite_features_naming_the_clip(tmp_path):
    nan = np.zeros((30, 64), dtype=np.float32)
    nan[7, 2] = np.nan
    scp = write_raw_ark(tmp_path / "feats", {"clip-ok": np.zeros((30, 64)), "clip-nan": nan})
    with pytest.raises(ValueError, match=r"feats.scp: features of 'clip-nan' contain 1 non-finite.*frame 7"):
        compute_feats_stats(scp, tmp_path / "stats.npz")
    from captionlib.decode.inference import decode_feats_scp

    model = tmp_path / "model.pth"
    conf = {"vocab_size": 6, "encoder_conf": {"rnn_units": 8}, "decoder_conf": {"hidden_size": 8}}
    torch.save(model_file_dict(Captioner(**conf), conf, ["<blank>", "<unk>", "a", "b", "c", "<sos/eos>"]), model)
    with pytest.raises(ValueError, match="clip-nan"):
        decode_feats_scp(str(model), str(scp), str(tmp_path / "decode"))
    wrong = write_raw_ark(tmp_path / "wrong", {"clip-40": np.zeros((30, 40))})
    with pytest.raises(ValueError, match=r"wrong.scp: clip clip-40 has features of shape \(30, 40\), expected \(frames, 64\)"):
        decode_feats_scp(str(model), str(wrong), str(tmp_path / "decode"))


def test_truncated_ark_names_the_scp_clip_and_location(tmp_path):
    scp = write_raw_ark(tmp_path / "feats", {"clip-a": np.ones((50, 16)), "clip-b": np.ones((50, 16))})
    truncate(tmp_path / "feats.ark", 0.75)
    reader = FeatReader(scp)
    assert reader["clip-a"].shape == (50, 16)
    with pytest.raises(ValueError, match=r"feats.scp: clip clip-b: cannot read features at .*feats.ark:\d+"):
        reader["clip-b"]


def _ref_dir(root, name, text, utt2spk):
    d = root / name
    d.mkdir()
    (d / "text").write_text(text)
    (d / "utt2spk").write_text(utt2spk)
    return str(d)


def test_scorer_refuses_a_reference_dir_out_of_step(tmp_path):
    from captionlib.metrics.scorer import read_references

    utt2spk = "c1-1 c1\nc1-2 c1\nc2-1 c2\n"
    d = _ref_dir(tmp_path, "missing", "c1-1 a dog barks\nc2-1 rain falls\n", utt2spk)
    with pytest.raises(ValueError, match=r"utt2spk: 1 caption ids have no line in .*text, e.g. 'c1-2'"):
        read_references(d)
    d = _ref_dir(tmp_path, "punctuation", "c1-1 a dog barks\nc1-2 ...\nc2-1 rain falls\n", utt2spk)
    with pytest.raises(ValueError, match=r"text: caption 'c1-2' has no words after cleaning: '...'"):
        read_references(d)


@pytest.mark.parametrize("frames", [1, 2, 3])
def test_clips_shorter_than_the_encoder_pooling_are_padded(frames):
    torch.manual_seed(0)
    model = Captioner(6, encoder_conf={"rnn_units": 8}, decoder_conf={"hidden_size": 8}).eval()
    x = torch.randn(1, frames, 64)
    with torch.no_grad():
        alone = model.encode(x, torch.tensor([frames]))
        batched = model.encode(torch.cat([x, torch.zeros(1, 40 - frames, 64)], 1).repeat(2, 1, 1),
                               torch.tensor([frames, 40]))
    assert torch.isfinite(alone).all() and torch.allclose(alone[0], batched[0], atol=1e-6)


def test_ids_with_spaces_are_explained(tmp_path):
    from captionlib.io.datadir import read_scp

    scp = tmp_path / "wav.scp"
    scp.write_text("clotho one /a.wav\nclotho two /b.wav\n")
    with pytest.raises(ValueError, match=r"wav.scp:2: duplicate key 'clotho'.*may not contain any"):
        read_scp(scp)


def test_truncated_wav_is_a_warning_naming_it_or_an_error_when_strict(tmp_path, caplog):
    from captionlib.audio.io import audio_info, load_audio

    wav = truncate(write_wav(tmp_path / "cut.wav", seconds=1.0), 0.5)
    with caplog.at_level("WARNING"):
        wave, fs = load_audio(wav)
        info = audio_info(wav)
    assert len(wave) == info.frames < fs * 0.6
    assert sum("cut.wav: truncated? its header promises" in r.getMessage() for r in caplog.records) == 2
    with pytest.raises(ValueError, match=r"cut.wav: truncated\? its header promises 64000 bytes"):
        load_audio(wav, strict=True)
    scp = tmp_path / "wav.scp"
    scp.write_text(f"clip-cut {wav}\n")
    with pytest.raises(ValueError, match=r"wav.scp:1: clip clip-cut: .*truncated"):
        dump_feats(scp, tmp_path / "feats", n_mels=16, n_fft=1024, strict=True)
    caplog.clear()
    load_audio(write_wav(tmp_path / "whole.wav"))
    assert not caplog.records


def test_training_data_of_the_wrong_dimension_names_the_clip(tmp_path):
    from captionlib.data.datasets import AudioRefsDataset

    d = tmp_path / "dump"
    d.mkdir()
    write_raw_ark(d / "feats", {"c1": np.zeros((30, 64)), "c2": np.zeros((30, 40))})
    (d / "feats_dim").write_text("64\n")
    (d / "text").write_text("c1-1 a dog\nc2-1 rain\n")
    (d / "spk2utt").write_text("c1 c1-1\nc2 c2-1\n")
    data = AudioRefsDataset(d)
    assert data[0][1].shape == (30, 64)
    with pytest.raises(ValueError, match=r"clip c2 has features of shape \(30, 40\), expected \(frames, 64\)"):
        data[1]
