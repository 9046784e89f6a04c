"""Tests of caption_extract_visual_feats (one job; random_convnet so that it runs without torchvision)."""

import numpy as np
import pytest
import yaml

from captionbin import caption_extract_visual_feats
from captionlib.io.datadir import read_scp
from captionlib.io.feats import FeatReader
from visual_media import write_image, write_media_scp, write_video

pytest.importorskip("av")


def test_parser_required_and_print_config(tmp_path, capsys):
    assert caption_extract_visual_feats.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_extract_visual_feats.main([])
    assert e.value.code != 0
    conf = tmp_path / "feats_cnn.yaml"
    conf.write_text("cnn: random_convnet\noutput: grid\nimage_size: 32\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        caption_extract_visual_feats.main(["--config", str(conf), "--print_config"])
    assert e.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["cnn"] == "random_convnet" and printed["output"] == "grid" and printed["num_frames"] == 20


@pytest.mark.parametrize("filetype, ext", [("ark", "ark"), ("hdf5", "h5")])
def test_one_image_job(tmp_path, filetype, ext):
    media = {f"coco-{i}": write_image(tmp_path / f"im {i}.png", 30 + i, 40, seed=i) for i in range(3)}
    scp = write_media_scp(tmp_path / "image.scp", media)
    out = tmp_path / "dump" / "feats.4"
    caption_extract_visual_feats.main(
        ["--media_scp", str(scp), "--out_prefix", str(out), "--filetype", filetype, "--cnn", "random_convnet",
         "--output", "grid", "--image_size", "32", "--batch_size", "2", "--log_interval", "1"]
    )
    d = tmp_path / "dump"
    assert sorted(p.name for p in d.iterdir()) == sorted(
        [f"feats.4.{ext}", "feats.4.scp", "utt2num_frames.4", "feats_dim.4", "feats_type.4"]
    )
    assert read_scp(d / "utt2num_frames.4") == {k: "16" for k in media}
    assert (d / "feats_type.4").read_text() == "cnn_random_convnet_grid\n"
    assert all(v.shape == (16, 64) for _, v in FeatReader(d / "feats.4.scp").items())


def test_one_video_job(tmp_path):
    media = {"msvd-x": write_video(tmp_path / "x.mp4", 10), "msvd-y": write_video(tmp_path / "y.mp4", 2)}
    scp = write_media_scp(tmp_path / "video.scp", media)
    out = tmp_path / "dump" / "feats.1"
    caption_extract_visual_feats.main(
        ["--media_scp", str(scp), "--out_prefix", str(out), "--media_type", "video", "--num_frames", "5",
         "--cnn", "random_convnet", "--image_size", "32", "--log_interval", "0"]
    )
    assert read_scp(tmp_path / "dump" / "utt2num_frames.1") == {"msvd-x": "5", "msvd-y": "2"}
    frames = FeatReader(f"{out}.scp")
    assert np.isfinite(frames["msvd-x"]).all()
    # temporal_pool mean (seed 001 on TGIF): one row per video, the mean of its frames' rows
    mean = tmp_path / "mean" / "feats.1"
    caption_extract_visual_feats.main(
        ["--media_scp", str(scp), "--out_prefix", str(mean), "--media_type", "video", "--num_frames", "5",
         "--cnn", "random_convnet", "--image_size", "32", "--log_interval", "0", "--temporal_pool", "mean"]
    )
    assert read_scp(tmp_path / "mean" / "utt2num_frames.1") == {"msvd-x": "1", "msvd-y": "1"}
    for clip in media:
        np.testing.assert_allclose(FeatReader(f"{mean}.scp")[clip], frames[clip].mean(0, keepdims=True), rtol=1e-5,
                                   atol=1e-6)
    with pytest.raises(SystemExit):  # images have nothing to pool over time
        caption_extract_visual_feats.main(
            ["--media_scp", str(scp), "--out_prefix", str(tmp_path / "img" / "feats.1"), "--media_type", "image",
             "--cnn", "random_convnet", "--temporal_pool", "mean"])


def test_bad_media_exits_1_naming_line_clip_and_path(tmp_path, capsys):
    good = write_image(tmp_path / "good.png")
    bad = tmp_path / "bad file.png"
    bad.write_bytes(b"\x89PNG broken")
    scp = write_media_scp(tmp_path / "image.scp", {"a": good, "b": bad})
    with pytest.raises(SystemExit) as e:
        caption_extract_visual_feats.main(
            ["--media_scp", str(scp), "--out_prefix", str(tmp_path / "feats.1"), "--cnn", "random_convnet"]
        )
    assert e.value.code == 1
    assert any("ERROR: " in line and "image.scp:2: clip b:" in line and "bad file.png" in line
               for line in capsys.readouterr().err.splitlines())
