#!/usr/bin/env python3
"""Rebuild the media of the three visual mini fixtures from scikit-image's sample photos.

Writes the 12 JPEG images of ``egs/mini_mscoco/coco_fixture/images/`` and the 16 videos of
``egs/mini_msvd/msvd_fixture/YouTubeClips/`` and ``egs/mini_msrvtt/msrvtt_fixture/``
(``TrainValVideo/``, ``TestVideo/``). The annotation files (captions written by hand) are
not generated. Needs Pillow, NumPy and PyAV (which bundles FFmpeg's libraries)::

    pip download scikit-image==0.26.0 --no-deps -d /tmp/sk && unzip -q /tmp/sk/*.whl -d /tmp/sk/ex
    pip install av pillow numpy          # used: av 18.1.0, pillow 13.0.0, numpy 2.4.6
    python egs/mini_mscoco/coco_fixture/make_media.py --skimage_data /tmp/sk/ex/skimage/data

Images: the photo scaled to at most 160 px on the long side (Lanczos), RGB, JPEG quality 85.
Videos: 2 s at 10 fps (20 frames) of 96x96 px, MPEG-4 Part 2 (``mpeg4``, yuv420p, 150 kb/s)
in AVI (MSVD) or MP4 (MSR-VTT); each frame is a square crop of the photo that moves
linearly from a start box to an end box (a slow zoom or pan), scaled to 96x96.
"""

import argparse
import os
from fractions import Fraction

import av
import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
EGS = os.path.dirname(os.path.dirname(HERE))

# (skimage file, COCO file path relative to images/)
COCO_IMAGES = [
    ("astronaut.png", "train2014/COCO_train2014_000000000011.jpg"),
    ("camera.png", "train2014/COCO_train2014_000000000023.jpg"),
    ("chelsea.png", "train2014/COCO_train2014_000000000037.jpg"),
    ("coffee.png", "train2014/COCO_train2014_000000000042.jpg"),
    ("coins.png", "train2014/COCO_train2014_000000000058.jpg"),
    ("hubble_deep_field.jpg", "train2014/COCO_train2014_000000000064.jpg"),
    ("rocket.jpg", "train2014/COCO_train2014_000000000079.jpg"),
    ("clock_motion.png", "val2014/COCO_val2014_000000000085.jpg"),
    ("text.png", "val2014/COCO_val2014_000000000091.jpg"),
    ("retina.jpg", "val2014/COCO_val2014_000000000103.jpg"),
    ("horse.png", "val2014/COCO_val2014_000000000117.jpg"),
    ("brick.png", "val2014/COCO_val2014_000000000124.jpg"),
]

MSVD = "mini_msvd/msvd_fixture/YouTubeClips/"
MSRVTT = "mini_msrvtt/msrvtt_fixture/"
# (skimage file, output path relative to egs/, start box, end box); a box is
# (centre x, centre y, side) as fractions of the photo's width, height and shorter side.
VIDEOS = [
    ("chelsea.png", MSVD + "Kq3vT9xWbLc_12_14.avi", (0.5, 0.5, 1.0), (0.45, 0.4, 0.55)),
    ("coffee.png", MSVD + "-8rFzYp2Gd0_5_7.avi", (0.3, 0.5, 0.8), (0.7, 0.5, 0.8)),
    ("rocket.jpg", MSVD + "Rt0_LaunQ4z_30_32.avi", (0.5, 0.45, 0.5), (0.5, 0.5, 1.0)),
    ("astronaut.png", MSVD + "aZ7mNw2Kp1s_101_103.avi", (0.5, 0.6, 1.0), (0.43, 0.27, 0.5)),
    ("camera.png", MSVD + "h_Tg5YqLr8E_0_2.avi", (0.35, 0.5, 0.7), (0.65, 0.5, 0.7)),
    ("coins.png", MSVD + "Vn9cXe2oUw-_44_46.avi", (0.3, 0.5, 0.7), (0.7, 0.5, 0.7)),
    ("hubble_deep_field.jpg", MSVD + "pQ1sDr5jF0o_8_10.avi", (0.5, 0.5, 1.0), (0.5, 0.5, 0.4)),
    ("horse.png", MSVD + "yB4kE_Hu2Zc_63_65.avi", (0.25, 0.5, 0.85), (0.75, 0.5, 0.85)),
    ("coffee.png", MSRVTT + "TrainValVideo/video0.mp4", (0.5, 0.5, 1.0), (0.47, 0.33, 0.45)),
    ("chelsea.png", MSRVTT + "TrainValVideo/video1.mp4", (0.3, 0.5, 0.9), (0.7, 0.5, 0.9)),
    ("rocket.jpg", MSRVTT + "TrainValVideo/video2.mp4", (0.5, 0.5, 1.0), (0.5, 0.45, 0.5)),
    ("camera.png", MSRVTT + "TrainValVideo/video3.mp4", (0.5, 0.5, 1.0), (0.45, 0.3, 0.45)),
    ("astronaut.png", MSRVTT + "TrainValVideo/video4.mp4", (0.5, 0.3, 0.6), (0.5, 0.7, 0.6)),
    ("coins.png", MSRVTT + "TrainValVideo/video5.mp4", (0.5, 0.5, 0.5), (0.5, 0.5, 1.0)),
    ("hubble_deep_field.jpg", MSRVTT + "TestVideo/video6.mp4", (0.5, 0.3, 0.6), (0.5, 0.7, 0.6)),
    ("retina.jpg", MSRVTT + "TestVideo/video7.mp4", (0.5, 0.5, 1.0), (0.3, 0.5, 0.45)),
]
FPS, NUM_FRAMES, SIZE, BIT_RATE = 10, 20, 96, 150_000


def load_rgb(path: str) -> Image.Image:
    """The photo as RGB; transparent pixels (the horse's background) become white."""
    im = Image.open(path)
    if im.mode in ("RGBA", "LA", "P"):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
        im = Image.alpha_composite(bg, im)
    return im.convert("RGB")


def make_image(src: str, dst: str) -> None:
    im = load_rgb(src)
    im.thumbnail((160, 160), Image.LANCZOS)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    im.save(dst, "JPEG", quality=85, optimize=True)


def _crop(im: Image.Image, box) -> Image.Image:
    w, h = im.size
    cx, cy, side = box
    s = side * min(w, h)
    x0 = min(max(cx * w - s / 2, 0), w - s)
    y0 = min(max(cy * h - s / 2, 0), h - s)
    return im.resize((SIZE, SIZE), Image.LANCZOS, box=(x0, y0, x0 + s, y0 + s))


def make_video(src: str, dst: str, start, end) -> None:
    im = load_rgb(src)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with av.open(dst, "w", format="avi" if dst.endswith(".avi") else "mp4") as out:
        stream = out.add_stream("mpeg4", rate=FPS)
        stream.width = stream.height = SIZE
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = BIT_RATE
        stream.time_base = Fraction(1, FPS)
        for i in range(NUM_FRAMES):
            t = i / (NUM_FRAMES - 1)
            box = tuple(a + (b - a) * t for a, b in zip(start, end))
            frame = av.VideoFrame.from_ndarray(np.asarray(_crop(im, box)), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skimage_data", required=True, help="skimage/data/ of the unpacked scikit-image wheel")
    args = parser.parse_args()
    for name, rel in COCO_IMAGES:
        make_image(os.path.join(args.skimage_data, name), os.path.join(HERE, "images", rel))
    for name, rel, start, end in VIDEOS:
        make_video(os.path.join(args.skimage_data, name), os.path.join(EGS, rel), start, end)


if __name__ == "__main__":
    main()
