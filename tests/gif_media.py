"""Builders of small animated GIFs for the GIF tests (Pillow): frames told apart by their grey
level, each with its own delay."""

from pathlib import Path
from typing import Optional, Sequence

import numpy as np


def write_gif(path: Path, delays: Sequence[Optional[int]] = (100,) * 5, size: int = 16) -> Path:
    """An animated GIF whose frame ``i`` is uniformly grey at level ``25 * i`` and lasts
    ``delays[i]`` ms (Pillow's ``duration``); one frame per delay (one delay: a still GIF), at most 11 frames."""
    from PIL import Image

    frames = [Image.fromarray(np.full((size, size, 3), 25 * i, np.uint8)) for i in range(len(delays))]
    frames[0].save(path, format="GIF", save_all=True, append_images=frames[1:], duration=list(delays), loop=0)
    return path


def levels(frames) -> list:
    """The mean grey level of each image, rounded (which frame of :func:`write_gif` it is: level / 25)."""
    return [int(round(float(np.asarray(f, np.float32).mean()))) for f in frames]
