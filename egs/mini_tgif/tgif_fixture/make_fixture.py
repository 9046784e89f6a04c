#!/usr/bin/env python3
"""Write tgif_fixture/: a tiny TGIF in the TGIF-Release layout, for egs/mini_tgif and the tests.

Thirteen GIF URLs split 8 / 2 / 3 (train / val / test) in ``release/splits/*.txt`` and their
sentences in ``release/tgif-v1.0.tsv`` (``release/`` stands for TGIF-Release's ``data/``; one
sentence per GIF in train and val, three in test, as in TGIF), and the GIFs
in ``gifs/`` under the file names of their URLs: 48x48 animated GIFs of one shape (square or
ball) moving across a grey background, drawn with Pillow, whose frames last different times
(a long first and last frame, or delays of 0 that play as 100 ms). One train GIF is listed but
has no file (a GIF gone from Tumblr), one test GIF has a single frame, and one TSV row belongs to
no split. Deterministic: running it again writes the same GIFs (with the same Pillow).

Usage (from the repository root):
    python egs/mini_tgif/tgif_fixture/make_fixture.py [--output_dir egs/mini_tgif/tgif_fixture]
"""

import argparse
from pathlib import Path

from PIL import Image, ImageDraw

SIZE, SHAPE = 48, 12
COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 170, 40), "yellow": (230, 210, 20)}
# where each motion starts and ends: the shape's top-left corner, as fractions of the free room
MOTIONS = {"left_right": ((0, 0.5), (1, 0.5)), "right_left": ((1, 0.5), (0, 0.5)),
           "top_bottom": ((0.5, 0), (0.5, 1)), "bottom_top": ((0.5, 1), (0.5, 0)),
           "diagonal": ((0, 0), (1, 1)), "still": ((0.5, 0.5), (0.5, 0.5))}
# (split, tumblr id, colour, shape, motion, frames, delays (ms, one per frame or a pattern), sentences)
GIFS = [
    ("train", "nb1sq0red1", "red", "square", "left_right", 10, "ends", ["a red square slides from the left to the right"]),
    ("train", "nb2ba0blu2", "blue", "ball", "top_bottom", 10, "even", ["a blue ball falls from the top to the bottom"]),
    ("train", "nb3sq0grn3", "green", "square", "bottom_top", 10, "zero", ["a green square rises from the bottom to the top"]),
    ("train", "nb4ba0yel4", "yellow", "ball", "right_left", 10, "ends", ["a yellow ball rolls from the right to the left"]),
    ("train", "nb5ba0red5", "red", "ball", "diagonal", 10, "even", ["a red ball moves from the top left to the bottom right"]),
    ("train", "nb6sq0blu6", "blue", "square", "left_right", 10, "ramp", ["a blue square slides from the left to the right"]),
    ("train", "nb7ba0grn7", "green", "ball", "top_bottom", 10, "ends", ["a green ball falls from the top to the bottom"]),
    ("train", "nb8sq0yel8", "yellow", "square", "bottom_top", 10, None, ["a yellow square rises from the bottom to the top"]),
    ("val", "nc1sq0red1", "red", "square", "top_bottom", 10, "ramp", ["a red square falls from the top to the bottom"]),
    ("val", "nc2ba0blu2", "blue", "ball", "left_right", 10, "ends", ["a blue ball rolls from the left to the right"]),
    ("test", "nd1sq0grn1", "green", "square", "left_right", 10, "even",
     ["a green square slides from the left to the right", "a green square moves to the right",
      "a small green square goes from left to right"]),
    ("test", "nd2ba0red2", "red", "ball", "bottom_top", 10, "ends",
     ["a red ball rises from the bottom to the top", "a red ball moves up", "a red ball goes from the bottom to the top"]),
    ("test", "nd3sq0blu3", "blue", "square", "still", 1, "even",
     ["a blue square stays in the middle", "a blue square does not move", "a blue square sits in the middle"]),
]
EXTRA_ROW = ("ne1ba0yel1", "a yellow ball bounces")  # a TSV row of a GIF in no split
DELAYS = {"even": lambda n: [80] * n, "zero": lambda n: [0] * n,
          "ends": lambda n: [400] + [60] * (n - 2) + [400] if n > 2 else [200] * n,
          "ramp": lambda n: [40 + 30 * i for i in range(n)]}


def url(tumblr_id: str) -> str:
    """The Tumblr-like URL of a GIF (its file name: ``tumblr_<id>_250.gif``)."""
    return f"https://38.media.tumblr.com/{tumblr_id[::-1]}0f/tumblr_{tumblr_id}_250.gif"


def frames(colour: str, shape: str, motion: str, count: int) -> list:
    """``count`` RGB frames of the shape moving along ``motion`` over a grey background."""
    (x0, y0), (x1, y1) = MOTIONS[motion]
    room = SIZE - SHAPE
    out = []
    for i in range(count):
        t = i / (count - 1) if count > 1 else 0.0
        x, y = round(room * (x0 + (x1 - x0) * t)), round(room * (y0 + (y1 - y0) * t))
        img = Image.new("RGB", (SIZE, SIZE), (128, 128, 128))
        draw = ImageDraw.Draw(img)
        box = (x, y, x + SHAPE - 1, y + SHAPE - 1)
        (draw.rectangle if shape == "square" else draw.ellipse)(box, fill=COLOURS[colour])
        out.append(img)
    return out


def main() -> None:
    """Write release/tgif-v1.0.tsv, release/splits/{train,val,test}.txt and gifs/*.gif."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args().output_dir
    (out / "release" / "splits").mkdir(parents=True, exist_ok=True)
    (out / "gifs").mkdir(exist_ok=True)
    rows, splits = [], {"train": [], "val": [], "test": []}
    for split, tumblr_id, colour, shape, motion, count, delays, sentences in GIFS:
        splits[split].append(url(tumblr_id))
        rows += [f"{url(tumblr_id)}\t{s}" for s in sentences]
        if delays is None:  # listed, but gone from Tumblr: no file
            continue
        images = frames(colour, shape, motion, count)
        images[0].save(out / "gifs" / f"tumblr_{tumblr_id}_250.gif", save_all=True, append_images=images[1:],
                       duration=DELAYS[delays](count), loop=0)
    rows.append(f"{url(EXTRA_ROW[0])}\t{EXTRA_ROW[1]}")
    (out / "release" / "tgif-v1.0.tsv").write_text("".join(r + "\n" for r in rows))
    for split, urls in splits.items():
        (out / "release" / "splits" / f"{split}.txt").write_text("".join(u + "\n" for u in urls))


if __name__ == "__main__":
    main()
