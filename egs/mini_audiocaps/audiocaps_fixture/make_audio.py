#!/usr/bin/env python3
"""Make the audio of audiocaps_fixture from ../shared/data/event_library (see README.md).

Each clip is the start of one event-library recording (FLAC, 16 kHz, mono), cut to at most
DURATION seconds, resampled with soxr (quality HQ) and, for stereo files, copied to both
channels, then written in the named format. The missing clip of train.csv gets no file.

Usage (from the repository root):
    python egs/mini_audiocaps/audiocaps_fixture/make_audio.py --event_library ../shared/data/event_library
"""

import argparse
import os

import numpy as np
import soundfile as sf
import soxr

HERE = os.path.dirname(os.path.abspath(__file__))
# (output path under audio/, event-library file, seconds, sample rate, channels, soundfile subtype)
CLIPS = [
    ("Xq3bR7tK2mA_30.flac", "bear/bear.flac", 3.0, 16000, 1, "PCM_16"),
    ("YbE9-wz4Hn0c.wav", "bee/bee.flac", 3.0, 22050, 2, "PCM_16"),
    ("d_7KpL2vQx1_120.wav", "duck/duck.flac", 3.0, 16000, 1, "PCM_16"),
    ("Yh0RsE-5nTy_.wav", "horse/horse.flac", 2.2, 16000, 1, "PCM_16"),
    ("Vn2c_LoP8fW_45.ogg", "violin/violin.flac", 3.0, 32000, 1, "VORBIS"),
    ("tH5-dRm9Zk3_0.flac", "thunder/lightningbolt.flac", 3.5, 22050, 1, "PCM_16"),
    ("Cw4mO0-uTq8_60.wav", "cow/cow_white.flac", 2.1, 16000, 1, "PCM_16"),
    ("YDk7_x2RbJ9e.wav", "drum_kit/drumkit.flac", 3.0, 24000, 2, "PCM_16"),
    ("test/sG1lW8-yQp4_10.flac", "seagull/seagull.flac", 3.5, 16000, 1, "PCM_16"),
    ("test/YTf6_oN3hU2i.wav", "toilet/toilet.flac", 2.2, 16000, 1, "PCM_16"),
]


def main() -> None:
    """Write every clip of :data:`CLIPS` under ``audio/``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--event_library", required=True, help="the event_library directory")
    args = parser.parse_args()
    for name, src, seconds, fs, channels, subtype in CLIPS:
        x, sr = sf.read(os.path.join(args.event_library, src), dtype="float32")
        x = x[: int(round(seconds * sr))]
        if fs != sr:
            x = soxr.resample(x, sr, fs, quality="HQ")
        x = np.clip(x, -1.0, 1.0)
        if channels == 2:
            x = np.stack([x, x], axis=1)
        out = os.path.join(HERE, "audio", name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        sf.write(out, x, fs, subtype=subtype)
        print(f"{name}: {src}, {len(x) / fs:.3f} s, {fs} Hz, {channels} ch")


if __name__ == "__main__":
    main()
