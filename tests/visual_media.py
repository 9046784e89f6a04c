"""Builders of small images and videos for the visual front-end tests (Pillow, PyAV)."""

from pathlib import Path

import numpy as np


def write_image(path: Path, width: int = 40, height: int = 30, seed: int = 0, mode: str = "RGB") -> Path:
    """A random-noise image (format from the suffix: .png, .jpg ...)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")
    img.convert(mode).save(path)
    return path


def write_video(path: Path, num_frames: int = 10, size: int = 32, fps: int = 10, max_b_frames: int = 0) -> Path:
    """An mpeg4 video whose frame ``i`` is uniformly grey at level ``25 * i`` (so the sampled
    frames can be told apart after decoding); ``max_b_frames > 0`` encodes B-frames."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
        if max_b_frames:
            stream.codec_context.max_b_frames = max_b_frames
        for i in range(num_frames):
            img = np.full((size, size, 3), (25 * i) % 256, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


# an MPEG-4 part 2 "not coded" VOP (N-VOP): start code 0x1B6, P type, modulo_time_base 0,
# marker, 4-bit vop_time_increment (the encoder's width for 10 fps), marker, vop_coded=0,
# stuffing. FFmpeg's decoder consumes it without outputting a frame.
N_VOP = b"\x00\x00\x01\xb6\x50\x9f"


def write_avi_with_nvops(path: Path, num_frames: int = 10, size: int = 32, every: int = 2,
                         placeholder: bytes = N_VOP) -> Path:
    """An mpeg4 ``.avi`` at 10 fps as :func:`write_video` (frame ``i`` grey at ``25 * i``) with an
    N-VOP placeholder packet after every ``every``-th frame (as DivX/XviD write for dropped frames
    or packed B-frames, common in MSVD): each occupies one time tick and decodes to no frame, so
    the stream has more packets than decodable frames and the frames' pts have gaps. With
    ``placeholder=b""`` the placeholders are empty chunks (dropped frames, which FFmpeg's AVI
    demuxer skips: the header's frame count exceeds the packets read)."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
        packets = []
        for i in range(num_frames):
            img = np.full((size, size, 3), (25 * i) % 256, np.uint8)
            packets += stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24"))
        packets += stream.encode()
        tick = 0
        for i, packet in enumerate(packets, start=1):
            packet.pts = packet.dts = tick
            container.mux(packet)
            tick += 1
            if i % every == 0:
                nvop = av.Packet(placeholder)
                nvop.stream, nvop.time_base, nvop.pts, nvop.dts = stream, packet.time_base, tick, tick
                container.mux(nvop)
                tick += 1
    return path


def write_media_scp(path: Path, media: dict) -> Path:
    """``<clip-id> <path>`` lines in the given order (paths may contain spaces)."""
    path.write_text("".join(f"{k} {v}\n" for k, v in media.items()))
    return path
