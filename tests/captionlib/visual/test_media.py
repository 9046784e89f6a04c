"""Tests of captionlib.visual.media: image preprocessing (Pillow) and video frame sampling (PyAV),
and the error messages of every visual file reader."""

import numpy as np
import pytest
import torch
from PIL import Image

from captionlib.visual.cnn import load_exported
from captionlib.visual.media import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    load_image,
    load_image_tensor,
    load_video_frames,
    load_video_tensor,
    preprocess_image,
    sample_frame_indices,
)
from visual_media import write_avi_with_nvops, write_image, write_video

pytest.importorskip("av")


@pytest.mark.parametrize("size", [(40, 30), (30, 40), (16, 16), (8, 100)])
def test_preprocess_shape_and_dtype(size):
    img = Image.new("RGB", size, (10, 200, 30))
    x = preprocess_image(img, 24)
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32
    expected = [(v / 255 - m) / s for v, m, s in zip((10, 200, 30), IMAGENET_MEAN, IMAGENET_STD)]
    assert torch.allclose(x.mean(dim=(1, 2)), torch.tensor(expected), atol=1e-5)


def test_preprocess_center_crops_the_longer_side():
    # 30 x 90 portrait: red top third, green middle, blue bottom third -> the crop is all green
    arr = np.zeros((90, 30, 3), np.uint8)
    arr[:30, :, 0], arr[30:60, :, 1], arr[60:, :, 2] = 255, 255, 255
    x = preprocess_image(Image.fromarray(arr), 30)
    green = torch.tensor([(0 - IMAGENET_MEAN[0]) / IMAGENET_STD[0], (1 - IMAGENET_MEAN[1]) / IMAGENET_STD[1],
                          (0 - IMAGENET_MEAN[2]) / IMAGENET_STD[2]])
    assert torch.allclose(x[:, 2:-2, :].mean(dim=(1, 2)), green, atol=1e-4)


@pytest.mark.parametrize("mode", ["L", "RGBA", "P"])
def test_load_image_converts_to_rgb(tmp_path, mode):
    path = write_image(tmp_path / "a b.png", mode=mode)
    assert load_image(path).mode == "RGB"
    assert load_image_tensor(path, 16).shape == (3, 16, 16)


@pytest.mark.parametrize("loader, suffix, junk", [
    (load_image, ".jpg", b"not an image"),
    (load_video_frames, ".mp4", b""),
    (load_video_frames, ".avi", b"\x00\x01garbage" * 100),
    (load_exported, ".pt2", b"junk"),
])
def test_missing_and_unreadable_files_are_named(tmp_path, loader, suffix, junk):
    """Every visual file reader: FileNotFoundError / ValueError naming the path."""
    with pytest.raises(FileNotFoundError, match=f"missing{suffix}"):
        loader(tmp_path / f"missing{suffix}")
    bad = tmp_path / f"bad file{suffix}"
    bad.write_bytes(junk)
    with pytest.raises(ValueError, match=f"bad file{suffix}"):
        loader(bad)


def test_preprocess_rejects_bad_size():
    with pytest.raises(ValueError, match="image_size"):
        preprocess_image(Image.new("RGB", (4, 4)), 0)


def test_sample_frame_indices():
    assert sample_frame_indices(10, 4) == [1, 3, 6, 8]
    assert sample_frame_indices(10, 10) == list(range(10))
    assert sample_frame_indices(3, 5) == [0, 1, 2]
    assert sample_frame_indices(100, 1) == [50]
    assert sample_frame_indices(0, 3) == []
    with pytest.raises(ValueError):
        sample_frame_indices(5, 0)


def test_video_frames_are_sampled_uniformly(tmp_path):
    path = write_video(tmp_path / "v 1.mp4", num_frames=10)
    frames = load_video_frames(path, 4)
    levels = [np.asarray(f, np.float32).mean() for f in frames]
    assert np.allclose(levels, [25 * i for i in (1, 3, 6, 8)], atol=4)
    assert len(load_video_frames(path, 20)) == 10  # fewer frames than asked: all of them
    x = load_video_tensor(path, 5, 16)
    assert x.shape == (5, 3, 16, 16) and x.dtype == torch.float32


def _levels(frames):
    return [float(np.asarray(f, np.float32).mean()) for f in frames]


def test_more_packets_than_frames_are_sampled_by_time(tmp_path):
    """N-VOP placeholder packets (MSVD's DivX .avi): counting packets overstates the frames."""
    import av

    path = write_avi_with_nvops(tmp_path / "nvop clip.avi", num_frames=10, every=2)
    with av.open(str(path)) as c:
        packets = sum(1 for p in c.demux(c.streams.video[0]) if p.size)
    with av.open(str(path)) as c:
        pts = [f.pts for f in c.decode(video=0)]
    assert packets == 15 and len(pts) < packets  # the test video really has the defect
    assert pts[:10] == [0, 1, 3, 4, 6, 7, 9, 10, 12, 13]  # ticks of 1/10 s with gaps
    # segment centres 1.875, 5.625, 9.375, 13.125 ticks -> frames on screen: pts 1, 4, 9, 13
    assert np.allclose(_levels(load_video_frames(path, 4)), [25, 75, 150, 225], atol=4)
    # more frames wanted than the time targets can tell apart: still distinct frames
    frames = load_video_frames(path, 10)
    assert len(frames) == 10 and len(set(np.round(_levels(frames)))) == 10
    assert len(load_video_frames(path, 11)) == 11 and len(load_video_frames(path, 40)) == len(pts)


def test_b_frames_are_sampled_uniformly_in_time(tmp_path):
    path = write_video(tmp_path / "b.mp4", num_frames=12, max_b_frames=2)
    import av

    with av.open(str(path)) as c:
        pts = [p.pts for p in c.demux(c.streams.video[0]) if p.size]
    assert pts != sorted(pts)  # B-frames: stored out of presentation order
    assert np.allclose(_levels(load_video_frames(path, 4)), [25 * i for i in (1, 4, 7, 10)], atol=4)
    assert len(load_video_frames(path, 12)) == 12


def test_video_num_frames_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="num_frames"):
        load_video_frames(write_video(tmp_path / "v.mp4", 2), 0)


def test_audio_only_file_has_no_video_stream(tmp_path):
    import soundfile as sf

    wav = tmp_path / "audio.wav"
    sf.write(str(wav), np.zeros(1600, np.float32), 16000)
    with pytest.raises(ValueError, match="no video stream in .*audio.wav"):
        load_video_frames(wav)


def test_an_image_over_pillows_pixel_limit_is_a_named_error(tmp_path, monkeypatch):
    """A decompression bomb ended caption_infer (and stage 2) in a traceback, every other file's
    caption lost; it is now the ValueError naming the file that the callers skip or report."""
    path = tmp_path / "big.png"
    Image.new("L", (64, 64)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 64 * 64 // 4)  # > 2x the limit: Pillow's error
    with pytest.raises(ValueError, match="cannot read image .*big.png: .*decompression bomb"):
        load_image(path)
