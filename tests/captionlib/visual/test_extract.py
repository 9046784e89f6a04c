"""Tests of captionlib.visual.extract (random_convnet and its exported .pt2) and of the shared
shard writer it uses (captionlib.io.feats.FeatShardWriter)."""

import logging
import os

import numpy as np
import pytest
import torch

from captionlib.io.datadir import read_scp
from captionlib.io.feats import FeatReader, shard_sibling
from captionlib.visual.cnn import build_backbone, cnn_features, export_backbone
from captionlib.visual.extract import extract_visual_feats
from captionlib.visual.media import load_image_tensor, load_video_tensor
from visual_media import write_image, write_media_scp, write_video

pytest.importorskip("av")
SIZE = 32  # random_convnet: 32 px -> 4 x 4 map of 64 channels


@pytest.fixture
def images(tmp_path):
    d = tmp_path / "img dir"
    d.mkdir()
    media = {
        "coco-000001": write_image(d / "a.jpg", 40, 30, seed=1),
        "coco-000002": write_image(d / "b c.png", 30, 50, seed=2),
        "coco-000003": write_image(d / "d.png", 64, 64, seed=3, mode="L"),
    }
    return write_media_scp(tmp_path / "image.scp", media), media


def _extract(scp, out, **kw):
    kw = dict(dict(cnn="random_convnet", image_size=SIZE, log_interval=0, num_threads=0), **kw)
    return extract_visual_feats(scp, out, **kw)


def test_shard_sibling():
    assert shard_sibling("dump/x/feats.3", "feats_dim") == os.path.join("dump/x", "feats_dim.3")
    assert shard_sibling("/tmp/out", "utt2num_frames") == "/tmp/out.utt2num_frames"


@pytest.mark.parametrize("output, rows", [("pooled", 1), ("grid", 16)])
def test_images_ark_and_hdf5(tmp_path, images, output, rows):
    scp, media = images
    feats = {}
    for filetype, ext in (("ark", "ark"), ("hdf5", "h5")):
        d = tmp_path / filetype
        n = _extract(scp, d / "feats.2", filetype=filetype, output=output, batch_size=2)
        assert n == {k: rows for k in media}
        assert sorted(os.listdir(d)) == sorted(
            [f"feats.2.{ext}", "feats.2.scp", "utt2num_frames.2", "feats_dim.2", "feats_type.2"]
        )
        assert (d / "feats_dim.2").read_text() == "64\n"
        assert (d / "feats_type.2").read_text() == f"cnn_random_convnet_{output}\n"
        assert read_scp(d / "utt2num_frames.2") == {k: str(rows) for k in media}
        feats[filetype] = dict(FeatReader(d / "feats.2.scp").items())
    net = build_backbone("random_convnet", seed=0)
    for key, path in media.items():
        assert np.array_equal(feats["ark"][key], feats["hdf5"][key])
        expected = cnn_features(net, load_image_tensor(path, SIZE)[None], output)[0].reshape(-1, 64)
        np.testing.assert_allclose(feats["ark"][key], expected.numpy(), atol=1e-5)


def test_pooled_equals_mean_of_grid_and_batch_size_does_not_matter(tmp_path, images):
    scp, media = images
    _extract(scp, tmp_path / "p" / "feats.1", batch_size=1)
    _extract(scp, tmp_path / "g" / "feats.1", output="grid", batch_size=3, filetype="hdf5")
    pooled = FeatReader(tmp_path / "p" / "feats.1.scp")
    grid = FeatReader(tmp_path / "g" / "feats.1.scp")
    for key in media:
        np.testing.assert_allclose(pooled[key], grid[key].mean(axis=0, keepdims=True), atol=1e-5)


def test_videos(tmp_path):
    media = {
        "msvd-a": write_video(tmp_path / "long clip.mp4", num_frames=10),
        "msvd-b": write_video(tmp_path / "short.mp4", num_frames=3),
    }
    scp = write_media_scp(tmp_path / "video.scp", media)
    n = _extract(scp, tmp_path / "dump" / "feats.1", media_type="video", num_frames=4, batch_size=3)
    assert n == {"msvd-a": 4, "msvd-b": 3}
    reader = FeatReader(tmp_path / "dump" / "feats.1.scp")
    net = build_backbone("random_convnet", seed=0)
    expected = cnn_features(net, load_video_tensor(media["msvd-a"], 4, SIZE))
    np.testing.assert_allclose(reader["msvd-a"], expected.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="--output pooled"):
        _extract(scp, tmp_path / "x" / "feats.1", media_type="video", output="grid")


def test_exported_gives_the_same_features(tmp_path, images):
    scp, media = images
    pt2 = tmp_path / "random.pt2"
    export_backbone(build_backbone("random_convnet", seed=7), pt2, SIZE, {"cnn": "random_convnet"})
    _extract(scp, tmp_path / "mem" / "feats.1", output="grid", seed=7)
    _extract(scp, tmp_path / "exp" / "feats.1", output="grid", cnn="exported", cnn_weights=pt2)
    assert (tmp_path / "exp" / "feats_type.1").read_text() == "cnn_random_convnet_grid\n"
    mem, exp = FeatReader(tmp_path / "mem" / "feats.1.scp"), FeatReader(tmp_path / "exp" / "feats.1.scp")
    for key in media:
        np.testing.assert_allclose(mem[key], exp[key], atol=1e-6)


def test_image_size_defaults_to_the_backbones(tmp_path, images, caplog):
    """--image_size None: 224 for random_convnet (28 x 28 map), the .pt2's size for exported;
    an explicit size differing from the exported one is used with a warning."""
    from captionlib.visual import default_image_size

    assert [default_image_size(n) for n in ("resnet101", "vgg16", "random_convnet", "inception_v3")] == [
        224, 224, 224, 299]
    assert default_image_size("exported", 299) == 299 and default_image_size("exported") == 224
    scp, media = images
    assert _extract(scp, tmp_path / "d" / "feats.1", output="grid", image_size=None) == {k: 28 * 28 for k in media}
    pt2 = tmp_path / "random.pt2"
    export_backbone(build_backbone("random_convnet", seed=0), pt2, 48, {"cnn": "random_convnet"})
    with caplog.at_level(logging.WARNING):
        n = _extract(scp, tmp_path / "e" / "feats.1", output="grid", cnn="exported", cnn_weights=pt2, image_size=None)
    assert n == {k: 6 * 6 for k in media}  # 48 px from the metadata, not 224
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "image_size" in r.getMessage()]
    mem = _extract(scp, tmp_path / "m" / "feats.1", output="grid", image_size=48)
    exp, ref = FeatReader(tmp_path / "e" / "feats.1.scp"), FeatReader(tmp_path / "m" / "feats.1.scp")
    assert mem == n and all(np.allclose(exp[k], ref[k], atol=1e-6) for k in media)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        n = _extract(scp, tmp_path / "f" / "feats.1", output="grid", cnn="exported", cnn_weights=pt2, image_size=SIZE)
    assert n == {k: 4 * 4 for k in media}  # the explicit size wins
    assert any("--image_size 32 differs from the image_size 48" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)


def test_bad_media_name_line_clip_and_path(tmp_path, images):
    scp, media = images
    bad = tmp_path / "broken image.jpg"
    bad.write_bytes(b"not a jpeg")
    lines = scp.read_text().splitlines()
    lines.insert(1, f"coco-000009 {bad}")
    scp.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"image.scp:2: clip coco-000009: .*broken image.jpg"):
        _extract(scp, tmp_path / "dump" / "feats.1")
    assert not (tmp_path / "dump" / "feats.1.scp").exists()  # nothing committed
    vscp = write_media_scp(tmp_path / "video.scp", {"v1": tmp_path / "missing video.mp4"})
    with pytest.raises(FileNotFoundError, match=r"video.scp:1: clip v1: .*missing video.mp4"):
        _extract(vscp, tmp_path / "dump" / "feats.2", media_type="video")
    with pytest.raises(ValueError, match="media_type"):
        _extract(scp, tmp_path / "dump" / "feats.3", media_type="audio")
    with pytest.raises(ValueError, match="image_size"):
        _extract(scp, tmp_path / "dump" / "feats.3", image_size=0)


def test_progress_lines_with_eta(tmp_path, images, caplog):
    scp, _ = images
    with caplog.at_level(logging.INFO):
        _extract(scp, tmp_path / "feats.1", log_interval=2, num_threads=1)
    progress = [r.getMessage() for r in caplog.records if "clips/s" in r.getMessage()]
    assert [p.split(" (")[0] for p in progress] == ["processed 2/3 clips", "processed 3/3 clips"]
    assert all("ETA" in p for p in progress)
    assert torch.get_num_threads() == 1
