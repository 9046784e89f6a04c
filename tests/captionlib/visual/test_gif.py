"""Tests of the animated GIF reader of captionlib.visual.media (TGIF): frames sampled uniformly in
time with each frame's own delay, the browsers' short-delay rule, and bad GIFs (truncated, one
frame, empty, not a GIF) treated as bad videos are."""

import logging

import pytest
import torch

from captionlib.io.datadir import read_scp
from captionlib.visual.extract import extract_visual_feats
from captionlib.visual.media import (
    is_gif,
    load_gif_frames,
    load_video_frames,
    load_video_tensor,
    played_delay_ms,
    sample_by_duration,
    sample_frame_indices,
)
from gif_media import levels, write_gif
from visual_media import write_media_scp


def test_frames_follow_each_frames_delay(tmp_path):
    # 1200 ms; segment centres 200, 600, 1000 ms -> frames 0, 3, 5 (by index it would be 1, 3, 5)
    path = write_gif(tmp_path / "long ends.gif", [400, 100, 100, 100, 100, 400])
    assert levels(load_video_frames(path, 3)) == [0, 75, 125]
    assert sample_frame_indices(6, 3) == [1, 3, 5]
    # equal delays: the same frames as uniform index sampling (as for a constant frame rate video)
    even = write_gif(tmp_path / "even.gif", [80] * 10)
    assert levels(load_video_frames(even, 4)) == [25 * i for i in sample_frame_indices(10, 4)]


def test_delays_of_10_ms_or_less_play_as_100_ms(tmp_path):
    assert [played_delay_ms(d) for d in (None, 0, 10, 20, 250)] == [100, 100, 100, 20, 250]
    # played 100, 100, 100, 100, 300 ms: centres 175 and 525 ms -> frames 1 and 4 (by index: 1 and 3)
    path = write_gif(tmp_path / "zero.gif", [0, 0, 0, 0, 300])
    assert levels(load_gif_frames(path, 2)) == [25, 100]


def test_a_long_frame_falls_back_to_distinct_frames_by_index(tmp_path):
    # the time centres all fall in the first frame (1000 of 1150 ms): sampled by index instead
    path = write_gif(tmp_path / "held.gif", [1000, 50, 50, 50])
    assert sample_by_duration([1000, 50, 50, 50], 3) == [0, 0, 0]
    assert levels(load_gif_frames(path, 3)) == [25 * i for i in sample_frame_indices(4, 3)] == [0, 50, 75]


def test_fewer_frames_than_asked_and_one_frame(tmp_path):
    path = write_gif(tmp_path / "five.gif", [60, 120, 60, 120, 60])
    assert levels(load_video_frames(path, 20)) == [0, 25, 50, 75, 100]
    still = write_gif(tmp_path / "still.gif", [100])
    assert levels(load_video_frames(still, 4)) == [0]  # a one-frame GIF: its frame, as a 1-frame video
    x = load_video_tensor(still, 4, 24)
    assert x.shape == (1, 3, 24, 24) and x.dtype == torch.float32


def test_gifs_are_told_by_content_not_name(tmp_path):
    path = write_gif(tmp_path / "clip.mp4", [100] * 3)
    assert is_gif(path) and levels(load_video_frames(path, 3)) == [0, 25, 50]
    html = tmp_path / "gone.gif"  # what a dead link often saves: an HTML page named .gif
    html.write_bytes(b"<!DOCTYPE html><html><body>Not found</body></html>\n")
    assert not is_gif(html)
    with pytest.raises(ValueError, match="gone.gif"):
        load_video_frames(html, 4)
    with pytest.raises(ValueError, match="cannot read GIF .*gone.gif"):
        load_gif_frames(html, 4)


def test_empty_and_missing_gifs_are_named(tmp_path):
    empty = tmp_path / "empty clip.gif"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty video file \(0 bytes\): .*empty clip.gif"):
        load_video_frames(empty, 4)
    with pytest.raises(ValueError, match=r"empty GIF file \(0 bytes\): .*empty clip.gif"):
        load_gif_frames(empty, 4)
    with pytest.raises(FileNotFoundError, match="missing.gif"):
        load_gif_frames(tmp_path / "missing.gif", 4)
    with pytest.raises(ValueError, match="num_frames"):
        load_gif_frames(write_gif(tmp_path / "ok.gif"), 0)


@pytest.mark.parametrize("keep", [0.6, 0.8, 0.95, -1])
def test_truncated_gif_is_a_warning_naming_it_or_an_error_when_strict(tmp_path, caplog, keep):
    """A GIF cut short (an interrupted download): the whole frames before the cut are sampled, with
    a warning, as for a truncated video; ``keep=-1`` drops only the trailer byte."""
    path = write_gif(tmp_path / "cut.gif", [100] * 7, size=24)
    data = path.read_bytes()
    path.write_bytes(data[:-1] if keep == -1 else data[: int(len(data) * keep)])
    with caplog.at_level(logging.WARNING):
        frames = load_video_frames(path, 7)
    assert 1 <= len(frames) <= 7 and levels(frames) == [25 * i for i in range(len(frames))]
    if keep != -1:
        assert len(frames) < 7
    assert any("cut.gif: truncated? " in r.getMessage() and "decoded before it" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    with pytest.raises(ValueError, match=r"cut.gif: truncated\? "):
        load_video_frames(path, 7, strict=True)


def test_gif_cut_inside_its_first_frame_has_no_frame(tmp_path):
    path = write_gif(tmp_path / "head.gif", [100] * 4, size=24)
    path.write_bytes(path.read_bytes()[:40])  # the header and part of the colour table
    with pytest.raises(ValueError, match="head.gif"):
        load_gif_frames(path, 4)


def test_whole_gif_is_not_truncated(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        assert len(load_gif_frames(write_gif(tmp_path / "whole.gif", [50, 150, 250]), 3, strict=True)) == 3
    assert not caplog.records


def test_sample_by_duration_checks_its_input():
    assert sample_by_duration([400, 100, 100, 100, 100, 400], 3) == [0, 3, 5]
    assert sample_by_duration([1.5], 2) == [0, 0]
    for durations, n in (([], 2), ([100, 0], 2), ([100], 0)):
        with pytest.raises(ValueError):
            sample_by_duration(durations, n)


def test_gifs_through_the_cnn_extractor(tmp_path):
    media = {"tgif-a": write_gif(tmp_path / "a.gif", [400, 100, 100, 400]),
             "tgif-b": write_gif(tmp_path / "b.gif", [100])}
    scp = write_media_scp(tmp_path / "video.scp", media)
    n = extract_visual_feats(scp, tmp_path / "out" / "feats.1", media_type="video", cnn="random_convnet",
                             image_size=32, num_frames=3, log_interval=0, num_threads=0)
    assert n == {"tgif-a": 3, "tgif-b": 1}
    assert read_scp(tmp_path / "out" / "utt2num_frames.1") == {"tgif-a": "3", "tgif-b": "1"}
