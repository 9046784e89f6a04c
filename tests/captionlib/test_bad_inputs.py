"""Hardening (issue 11): bad audio, features and model files are refused where they first
enter, with a message naming the file, line, clip or key."""

import numpy as np
import pytest
import torch

from captionlib.audio.dump import dump_feats
from captionlib.io.feats import FeatReader, FeatWriter
from captionlib.io.stats import compute_feats_stats
from captionlib.models.captioner import Captioner, model_file_dict
from bad_inputs import truncate, write_nonfinite_wav, write_raw_ark, write_wav


def test_nonfinite_audio_fails_the_dump_naming_line_clip_and_sample(tmp_path):
    good = write_wav(tmp_path / "good.wav")
    bad = write_nonfinite_wav(tmp_path / "bad.wav", at=1600)
    scp = tmp_path / "wav.scp"
    scp.write_text(f"clip-a {good}\nclip-b {bad}\n")
    with pytest.raises(ValueError, match=r"wav.scp:2: clip clip-b: .*bad.wav: 2 non-finite samples "
                                         r".* sample 1600 \(0.100 s\)"):
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
    with pytest.raises(ValueError, match=r"wrong.scp: clip clip-40 has features of shape \(30, 40\), "
                                         r"expected \(frames, 64\)"):
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


@pytest.mark.parametrize("cut", ["mid_page", "page_boundary"])
def test_truncated_ogg_is_a_warning_naming_it_or_an_error_when_strict(tmp_path, caplog, cut):
    import soundfile as sf

    from captionlib.audio.io import audio_info, load_audio

    wave = np.random.default_rng(0).uniform(-0.5, 0.5, 5 * 16000).astype(np.float32)
    whole, ogg = tmp_path / "whole.ogg", tmp_path / "cut.ogg"
    sf.write(str(whole), wave, 16000, format="OGG", subtype="VORBIS")
    data = whole.read_bytes()
    # libsndfile gives the samples of the pages present, without complaint
    ogg.write_bytes(data[:len(data) // 2] if cut == "mid_page" else data[:data.rfind(b"OggS")])
    with caplog.at_level("WARNING"):
        assert len(load_audio(whole)[0]) == audio_info(whole).frames == 5 * 16000
        assert not caplog.records
        assert len(load_audio(ogg)[0]) == audio_info(ogg).frames < 5 * 16000
    problem = "is cut short" if cut == "mid_page" else "lacks the end-of-stream flag"
    assert sum(f"cut.ogg: truncated? its last Ogg page {problem}" in r.getMessage() for r in caplog.records) == 2
    with pytest.raises(ValueError, match=rf"cut.ogg: truncated\? its last Ogg page {problem}"):
        load_audio(ogg, strict=True)


def _ogg_crc(page: bytes) -> int:
    """The CRC-32 of an Ogg page (polynomial 0x04C11DB7, not reflected; RFC 3533 section 6)."""
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc


def test_oggs_inside_the_last_page_is_not_a_page(tmp_path, caplog):
    """The capture pattern can occur by chance in a page's data; the last page is the one that
    ends at the end of the file."""
    import soundfile as sf

    from captionlib.audio.io import load_audio

    wave = np.random.default_rng(0).uniform(-0.5, 0.5, 5 * 16000).astype(np.float32)
    ogg = tmp_path / "whole.ogg"
    sf.write(str(ogg), wave, 16000, format="OGG", subtype="VORBIS")
    data = bytearray(ogg.read_bytes())
    last = data.rfind(b"OggS")
    data[-10:-6] = b"OggS"
    data[last + 22:last + 26] = bytes(4)
    data[last + 22:last + 26] = _ogg_crc(bytes(data[last:])).to_bytes(4, "little")
    ogg.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        assert len(load_audio(ogg, strict=True)[0]) == 5 * 16000
    assert not caplog.records


def test_truncated_mp3_is_a_warning_naming_it_or_an_error_when_strict(tmp_path, caplog):
    import soundfile as sf

    from captionlib.audio.io import load_audio

    wave = np.random.default_rng(0).uniform(-0.5, 0.5, 5 * 16000).astype(np.float32)
    mp3 = tmp_path / "cut.mp3"
    sf.write(str(mp3), wave, 16000, format="MP3", subtype="MPEG_LAYER_III")  # with a Xing header
    with caplog.at_level("WARNING"):
        assert len(load_audio(mp3)[0]) == 5 * 16000 and not caplog.records
        truncate(mp3, 0.5)
        assert len(load_audio(mp3)[0]) < 3 * 16000
    assert any(r.getMessage().startswith(f"{mp3}: truncated? its header declares 80000 samples,")
               for r in caplog.records)
    with pytest.raises(ValueError, match=r"cut.mp3: truncated\? its header declares 80000 samples, \d+ decode"):
        load_audio(mp3, strict=True)


def test_a_vbr_mp3_without_a_xing_tag_is_not_truncated(tmp_path, caplog):
    """Without the tag libsndfile guesses the length from the first frame's bitrate: a whole
    VBR file then decodes fewer samples than that guess."""
    import soundfile as sf

    from captionlib.audio.io import load_audio

    rng = np.random.default_rng(0)
    wave = np.concatenate([np.zeros(3 * 16000), rng.uniform(-0.5, 0.5, 3 * 16000)]).astype(np.float32)
    mp3 = tmp_path / "vbr.mp3"
    sf.write(str(mp3), wave, 16000, format="MP3", subtype="MPEG_LAYER_III")
    data = mp3.read_bytes()
    start = 10 + (data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9]) if data[:3] == b"ID3" else 0
    # the first frame's length from its header (MPEG-2 layer III at 16 kHz: 72 * bitrate / rate + padding)
    header = data[start:start + 4]
    assert (header[1] >> 3) & 3 == 2 and (header[2] >> 2) & 3 == 2  # MPEG-2, 16 kHz
    kbps = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160][header[2] >> 4]
    length = 72 * kbps * 1000 // 16000 + ((header[2] >> 1) & 1)
    assert b"Xing" in data[start:start + length] or b"Info" in data[start:start + length]
    mp3.write_bytes(data[:start] + data[start + length:])  # the tag frame removed
    with sf.SoundFile(str(mp3)) as f:
        guessed = f.frames
    with caplog.at_level("WARNING"):
        decoded = len(load_audio(mp3, strict=True)[0])
    assert decoded < guessed - 2304 and not caplog.records


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


def test_16_bit_gray_image_is_scaled_to_8_bits_and_float_images_are_refused(tmp_path):
    from PIL import Image

    from captionlib.visual.media import load_image
    from bad_inputs import write_gray16_png

    path = write_gray16_png(tmp_path / "gray16.png", width=64)
    assert Image.open(path).mode == "I;16"
    rgb = np.asarray(load_image(path))
    expected = np.round(np.linspace(0, 255, 64)).astype(np.uint8)  # the gradient, not all 255
    assert rgb.shape == (4, 64, 3) and (rgb == expected[None, :, None]).all()
    Image.fromarray(np.ones((4, 4), np.float32)).save(tmp_path / "float.tif")
    with pytest.raises(ValueError, match=r"float.tif: 32-bit float pixels \(mode F\)"):
        load_image(tmp_path / "float.tif")


def test_truncated_video_is_a_warning_naming_it_or_an_error_when_strict(tmp_path, caplog):
    import re

    pytest.importorskip("av")
    from captionlib.visual.media import load_video_frames
    from bad_inputs import write_truncated_video
    from visual_media import write_avi_with_nvops

    path = write_truncated_video(tmp_path / "cut.avi", num_frames=20)
    with caplog.at_level("WARNING"):
        frames = load_video_frames(path, 4)
    assert 1 <= len(frames) < 4
    assert any(re.search(r"cut.avi: truncated\? its header declares 20 frames, the file holds \d+ \(\d+ missing\)",
                         r.getMessage()) for r in caplog.records)
    with pytest.raises(ValueError, match=r"cut.avi: truncated\? its header declares 20 frames"):
        load_video_frames(path, 4, strict=True)
    caplog.clear()  # N-VOP placeholders: more packets than frames, but nothing is missing
    load_video_frames(write_avi_with_nvops(tmp_path / "nvop.avi", num_frames=10), 4, strict=True)
    dropped = write_avi_with_nvops(tmp_path / "dropped.avi", num_frames=10, every=3, placeholder=b"")
    load_video_frames(dropped, 4, strict=True)  # empty chunks of dropped frames: skipped, not missing
    assert not caplog.records


def test_empty_imported_features_are_refused_naming_the_clip_and_id(tmp_path, capsys):
    import re

    from captionbin import caption_import_feats
    from captionlib.io.importers import import_feats
    from bad_inputs import write_h5_features

    src = write_h5_features(tmp_path / "feats.h5", {"v1": np.ones((3, 8)), "v2": np.zeros((0, 8))})
    (tmp_path / "clip2id").write_text("clip-1 v1\nclip-2 v2\n")
    with pytest.raises(SystemExit) as e:
        caption_import_feats.main(["--clip2id", str(tmp_path / "clip2id"), "--layout", "hdf5", "--source", str(src),
                                   "--out_prefix", str(tmp_path / "out" / "feats.1")])
    assert e.value.code == 1
    assert re.search(r"clip2id:2: clip clip-2 \(id v2\): .*feats.h5: empty features of shape \(0, 8\)",
                     capsys.readouterr().err)
    (tmp_path / "att").mkdir()
    np.savez(tmp_path / "att" / "v3.npz", feat=np.zeros((0, 2048), np.float32))
    (tmp_path / "clip2id").write_text("clip-3 v3\n")
    with pytest.raises(ValueError, match=r"clip clip-3 \(id v3\): .*v3.npz: empty features of shape \(0, 2048\)"):
        import_feats(tmp_path / "clip2id", "sc_att", tmp_path / "att", tmp_path / "out2" / "feats.1")


def test_clotho_prep_refuses_a_one_sample_wav_naming_it_or_skips_and_counts_it(tmp_path, caplog):
    from captionlib.corpora.clotho import ClothoPrepError, prepare_clotho
    from bad_inputs import write_samples_wav

    (tmp_path / "evaluation").mkdir()
    write_wav(tmp_path / "evaluation" / "long.wav", seconds=0.5, fs=44100)
    write_samples_wav(tmp_path / "evaluation" / "one sample.wav", samples=1, fs=44100)
    cells = ",".join(f"a dog barks {k}" for k in range(1, 6))
    (tmp_path / "clotho_captions_evaluation.csv").write_text(
        "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\n"
        f"long.wav,{cells}\none sample.wav,{cells}\n")
    with pytest.raises(ClothoPrepError, match=r"clotho_captions_evaluation.csv:3: audio too short: "
                                              r".*one sample.wav: 1 samples \(0.0000 s at 44100 Hz\)"):
        prepare_clotho(tmp_path, "evaluation", tmp_path / "data")
    with caplog.at_level("WARNING"):
        stats = prepare_clotho(tmp_path, "evaluation", tmp_path / "data", skip_bad=True)
    assert (stats["clips"], stats["skipped"]) == (1, 1)
    assert any("one sample.wav" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "data" / "reco2dur").read_text() == "clotho-evaluation-00001 0.500\n"


def test_mixed_sample_rates_with_fs_null_are_warned_once_with_the_count_per_rate(tmp_path, caplog):
    scp = tmp_path / "wav.scp"
    rates = {"clip-a": 16000, "clip-b": 44100, "clip-c": 16000}
    scp.write_text("".join(f"{k} {write_wav(tmp_path / f'{k}.wav', seconds=0.2, fs=fs)}\n" for k, fs in rates.items()))
    with caplog.at_level("WARNING"):
        dump_feats(scp, tmp_path / "feats", n_mels=16, fs=None)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "wav.scp: the clips have 2 sample rates (clips per rate: 16000 Hz: 2, 44100 Hz: 1)" in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING"):
        dump_feats(scp, tmp_path / "feats16k", n_mels=16, fs=16000)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
