"""Image loading (Pillow) and video frame sampling (PyAV), with ImageNet preprocessing.

The preprocessing is torchvision's standard ImageNet evaluation transform
(``Resize(image_size)`` of the shorter side, ``CenterCrop(image_size)``, ``ToTensor``,
``Normalize(IMAGENET_MEAN, IMAGENET_STD)``; see the torchvision ImageNet reference scripts):
convert to RGB, resize the shorter side to ``image_size`` (bilinear), center-crop a square of
``image_size``, scale to [0, 1] and normalise with the ImageNet mean/std. (self-critical.pytorch's
``prepro_feats.py`` differs: it normalises the whole image without cropping and adaptive-pools
the conv map to a fixed grid.) EXIF orientation is not applied (as torchvision's
``default_loader``).

Video frames are sampled uniformly in time (:func:`load_video_frames`). ``av`` (PyAV, FFmpeg
bindings) is imported only when a video is read, so that image corpora do not need FFmpeg's
libraries to load. Animated GIFs (TGIF) are decoded with Pillow instead, each frame shown for
its own delay (:func:`load_gif_frames`).
"""

import bisect
import logging
import os
import struct
from fractions import Fraction
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image, ImageSequence, UnidentifiedImageError

from captionlib.io.datadir import PathLike

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


#: The signatures that open a GIF file (GIF89a specification, section 17).
GIF_SIGNATURES = (b"GIF87a", b"GIF89a")
#: A GIF frame delay (ms) at or below this is played as :data:`GIF_DEFAULT_DELAY_MS`, as web
#: browsers play it (WebKit's ``BitmapImage``: "we follow Firefox's behavior and use a duration of
#: 100 ms for any frames that specify a duration of <= 10 ms"; Chromium does the same).
GIF_MIN_DELAY_MS = 10
GIF_DEFAULT_DELAY_MS = 100
#: What Pillow raises on a cut GIF, depending on where the cut falls (found by cutting test GIFs),
#: and on one over its pixel limit (a decompression bomb).
_GIF_DECODE_ERRORS = (OSError, EOFError, IndexError, ValueError, SyntaxError, struct.error,
                      Image.DecompressionBombError)

#: Pillow modes of 16-bit grayscale pixels. Pillow opens 16-bit PNG/TIFF as ``I;16*`` and
#: PGM with a maxval above 255 as ``I`` scaled to 0..65535.
_GRAY16_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def to_rgb(img, name: str = "image"):
    """Convert a ``PIL.Image.Image`` of any 8- or 16-bit mode to RGB.

    Pillow's ``convert("RGB")`` clips 16-bit gray to 255 (a 16-bit PNG turns all white), so
    16-bit gray (:data:`_GRAY16_MODES`) is first rescaled to 8 bits as the PNG specification's
    sample depth rescaling does (``round(v * 255 / 65535)``, PNG 2nd ed. section 13.12).

    Args:
        img: the image.
        name: the file it came from, for the error message.

    Raises:
        ValueError: naming ``name``: a float image (mode ``F``: no declared range) or an
            ``I`` image with values outside 0..65535.
    """
    if img.mode in _GRAY16_MODES:
        arr = np.asarray(img, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() > 65535):
            raise ValueError(f"{name}: 32-bit integer pixels outside 0..65535 (mode {img.mode}): "
                             "convert the image to 8 or 16 bits")
        img = Image.fromarray(((arr * 255 + 32767) // 65535).astype(np.uint8), "L")
    elif img.mode == "F":
        raise ValueError(f"{name}: 32-bit float pixels (mode F) have no declared range: convert the image "
                         "to 8 or 16 bits")
    return img.convert("RGB")  # a loaded copy, also of an RGB image


def load_image(path: PathLike):
    """Read an image file as an RGB ``PIL.Image.Image`` (fully decoded; 16-bit gray rescaled
    to 8 bits, see :func:`to_rgb`).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: Pillow cannot identify or decode the file, or :func:`to_rgb` refuses its
            pixels (the path is named).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such image file: {path}")
    try:
        with Image.open(path) as img:
            return to_rgb(img, f"image {path}")
    # DecompressionBombError: an image over Pillow's pixel limit
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"cannot read image {path}: {e}") from None


def preprocess_image(img, image_size: int = 224) -> torch.Tensor:
    """Resize the shorter side to ``image_size``, center-crop a square, normalise (ImageNet).

    Args:
        img: a ``PIL.Image.Image`` (converted to RGB if it is not, see :func:`to_rgb`).
        image_size: output height and width in pixels.

    Returns:
        float32 tensor (3, image_size, image_size), channels RGB, ImageNet-normalised.

    Raises:
        ValueError: ``image_size < 1``, an empty image, or a mode :func:`to_rgb` refuses.
    """
    if image_size < 1:
        raise ValueError(f"image_size must be >= 1, got {image_size}")
    if img.mode != "RGB":
        img = to_rgb(img)
    w, h = img.size
    if w < 1 or h < 1:
        raise ValueError(f"empty image of size {w}x{h}")
    scale = image_size / min(w, h)
    new_w = image_size if w <= h else max(image_size, int(round(w * scale)))
    new_h = image_size if h <= w else max(image_size, int(round(h * scale)))
    img = img.resize((new_w, new_h), Image.BILINEAR)
    left = int(round((new_w - image_size) / 2.0))
    top = int(round((new_h - image_size) / 2.0))
    img = img.crop((left, top, left + image_size, top + image_size))
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = (arr - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD, np.float32)
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def load_image_tensor(path: PathLike, image_size: int = 224) -> torch.Tensor:
    """:func:`load_image` then :func:`preprocess_image`: a tensor (3, image_size, image_size)."""
    return preprocess_image(load_image(path), image_size)


def sample_frame_indices(total: int, num_frames: int) -> List[int]:
    """Indices of ``num_frames`` frames spread uniformly over ``total`` frames.

    The video is cut into ``num_frames`` equal segments and the frame at the centre of
    each is taken (TSN-style); for a constant frame rate this is uniform in time over the
    video's duration. With ``total <= num_frames`` every frame is returned.

    Example:
        >>> sample_frame_indices(10, 4)
        [1, 3, 6, 8]
    """
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    if total <= num_frames:
        return list(range(total))
    return [int((i + 0.5) * total / num_frames) for i in range(num_frames)]


def _stream_span(container, stream) -> Optional[Tuple[Fraction, Fraction]]:
    """``(start, duration)`` of ``stream`` in seconds (exact fractions), or None when unknown."""
    import av

    tb = stream.time_base
    if tb and stream.duration and stream.duration > 0:
        start = stream.start_time * tb if stream.start_time is not None else Fraction(0)
        return Fraction(start), Fraction(stream.duration * tb)
    if container.duration and container.duration > 0:
        start = Fraction(container.start_time or 0, av.time_base)
        if tb and stream.start_time is not None:
            start = Fraction(stream.start_time * tb)
        return start, Fraction(container.duration, av.time_base)
    return None


def _sample_by_time(path: str, num_frames: int):
    """One decoding pass choosing frames by presentation time.

    Returns ``(images, decoded, timed, short)``: the chosen distinct frames as RGB images, the
    number of frames decoded (all of them unless every target got its own frame), whether the
    stream had usable timing (duration and a pts on every frame), and, when every packet was
    read and there are fewer than the header declares (``stream.frames``: AVI ``dwLength``, MP4
    sample count; 0 when unknown, e.g. Matroska), ``(declared, read)`` (else None). Packets are
    counted, not frames, so placeholder packets that decode to no frame (N-VOPs) count as read,
    and so do the slots of packets the demuxer drops (AVI's empty chunks of dropped frames:
    ``read`` is at least the span of the packets' dts in packet durations).
    """
    import av

    with av.open(path) as container:
        if not container.streams.video:
            raise ValueError(f"no video stream in {path}")
        stream = container.streams.video[0]
        span = _stream_span(container, stream)
        tb = stream.time_base
        timed = span is not None and bool(tb)
        targets = []
        if timed:
            start, duration = span
            targets = [start + duration * (2 * k + 1) / (2 * num_frames) for k in range(num_frames)]
        chosen = []  # (decode index, image); distinct indices, in order
        k, prev, decoded, packets, dts = 0, None, 0, 0, []  # dts: (first, last, last's duration)

        def take(index, frame):
            if not chosen or chosen[-1][0] != index:
                chosen.append((index, frame.to_image()))

        def decode():  # container.decode(stream), counting packets (not the final empty flush packet)
            nonlocal packets, dts
            for packet in container.demux(stream):
                packets += packet.size > 0 or packet.dts is not None
                if packet.dts is not None:
                    dts = [dts[0] if dts else packet.dts, packet.dts, packet.duration]
                yield from packet.decode()

        for i, frame in enumerate(decode()):
            decoded = i + 1
            if not timed:
                continue  # only count
            if frame.pts is None:
                timed, chosen = False, []
                continue
            t = frame.pts * tb
            # the frame on screen at target time tau is the last one with pts <= tau
            while k < num_frames and targets[k] < t:
                take(*(prev if prev is not None else (i, frame)))
                k += 1
            if len(chosen) == num_frames:
                return [img for _, img in chosen], decoded, True, None
            prev = (i, frame)
        if timed and prev is not None:
            while k < num_frames:  # targets past the last frame (an overstated duration)
                take(*prev)
                k += 1
        if dts and dts[2]:
            packets = max(packets, (dts[1] - dts[0]) // dts[2] + 1)
        short = (stream.frames, packets) if stream.frames > packets else None
        return [img for _, img in chosen], decoded, timed, short


def _sample_by_index(path: str, wanted: List[int]) -> list:
    """Decode the first video stream and keep the frames of decode indices ``wanted``."""
    import av

    wanted = set(wanted)
    frames = []
    with av.open(path) as container:
        for i, frame in enumerate(container.decode(container.streams.video[0])):
            if i in wanted:
                frames.append(frame.to_image())
                if len(frames) == len(wanted):
                    break
    return frames


def is_gif(path: PathLike) -> bool:
    """Whether the file starts with a GIF signature (:data:`GIF_SIGNATURES`), whatever its name."""
    with open(path, "rb") as f:
        return f.read(6) in GIF_SIGNATURES


def played_delay_ms(delay: Optional[float]) -> float:
    """The time in ms a GIF frame with delay ``delay`` (ms; None when the frame has none) stays on
    screen: :data:`GIF_DEFAULT_DELAY_MS` for a delay of at most :data:`GIF_MIN_DELAY_MS` or none
    (as web browsers play GIFs), else ``delay``."""
    return GIF_DEFAULT_DELAY_MS if delay is None or delay <= GIF_MIN_DELAY_MS else float(delay)


def sample_by_duration(durations: Sequence[float], num_frames: int) -> List[int]:
    """Indices of the frames on screen at the centres of ``num_frames`` equal segments of a clip
    whose frame ``i`` lasts ``durations[i]`` (any unit; the clip lasts their sum).

    The frame on screen at time ``tau`` is the last one starting at or before ``tau``; the
    result may repeat a long frame (:func:`load_gif_frames` then samples by index).

    Example:
        >>> sample_by_duration([400, 100, 100, 100, 100, 400], 3)  # centres 200, 600, 1000 ms
        [0, 3, 5]

    Raises:
        ValueError: ``num_frames < 1``, no frame, or a duration that is not > 0.
    """
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    if not durations or min(durations) <= 0:
        raise ValueError(f"frame durations must be > 0 and not empty, got {list(durations)[:10]}")
    starts, total = [], Fraction(0)
    for d in durations:
        starts.append(total)
        total += Fraction(d)
    return [bisect.bisect_right(starts, total * (2 * k + 1) / (2 * num_frames)) - 1 for k in range(num_frames)]


def _scan_gif(path: str) -> Tuple[List[float], Optional[str]]:
    """Decode every frame of a GIF once: ``(played delays in ms, why the file ends early or None)``.

    A file is cut short (an interrupted download) when Pillow cannot decode a frame or when the
    file does not end with the GIF trailer byte 0x3B (Pillow then stops at the last whole frame).
    """
    delays: List[float] = []
    problem = None
    with Image.open(path) as img:
        if img.format != "GIF":
            raise ValueError(f"it starts like a GIF but Pillow reads it as {img.format}")
        try:
            for frame in ImageSequence.Iterator(img):
                frame.load()
                delays.append(played_delay_ms(frame.info.get("duration")))
        except _GIF_DECODE_ERRORS as e:
            problem = f"frame {len(delays) + 1} cannot be decoded ({type(e).__name__}: {e})"
    if problem is None:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b";":
                problem = "the file does not end with the GIF trailer (0x3B)"
    return delays, problem


def load_gif_frames(path: PathLike, num_frames: int = 20, strict: bool = False) -> list:
    """Decode ``num_frames`` frames of an animated GIF sampled uniformly in time (Pillow).

    Each frame lasts its own delay (``duration`` of Pillow's ``ImageSequence``, ms; a delay of at
    most 10 ms or none plays for 100 ms, as in web browsers: :func:`played_delay_ms`). As for
    videos (:func:`load_video_frames`), the frame on screen at the centre of each of
    ``num_frames`` equal segments of the GIF's duration is taken (:func:`sample_by_duration`);
    when that gives fewer than ``min(num_frames, frames)`` distinct frames (a frame held long),
    :func:`sample_frame_indices` is applied to the frame count instead. Frames are composited as
    displayed (Pillow applies each frame's disposal), converted to RGB. A one-frame GIF gives its
    one frame.

    A GIF cut short (a frame that cannot be decoded, or no trailer byte at the end) is logged as a
    warning naming it, and the frames are sampled from the whole frames before the cut, as a
    truncated video is; with ``strict`` it is an error.

    Args:
        path: a GIF file (GIF87a or GIF89a).
        num_frames: frames to sample (>= 1).
        strict: a truncated GIF is an error (default: a logged warning).

    Returns:
        list of RGB ``PIL.Image.Image`` in temporal order, ``len == min(num_frames, frames)`` (>= 1).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``num_frames < 1``; an empty file, not a GIF, no decodable frame; with
            ``strict``, a truncated GIF (the path is named).
    """
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such GIF file: {path}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"empty GIF file (0 bytes): {path}")
    try:
        delays, problem = _scan_gif(path)
    except _GIF_DECODE_ERRORS as e:  # Pillow cannot open it
        raise ValueError(f"cannot read GIF {path}: {e}") from None
    if not delays:
        raise ValueError(f"no decodable frame in GIF {path}: {problem}")
    if problem:
        msg = f"{path}: truncated? {problem}; the frames are sampled from the {len(delays)} decoded before it"
        if strict:
            raise ValueError(msg)
        logging.warning("%s (strict: make this an error)", msg)
    wanted = sorted(set(sample_by_duration(delays, num_frames)))
    if len(wanted) < min(num_frames, len(delays)):
        wanted = sample_frame_indices(len(delays), num_frames)
    try:
        with Image.open(path) as img:
            frames = []
            for i in wanted:
                img.seek(i)
                frames.append(to_rgb(img, f"GIF {path} frame {i + 1}"))
    except _GIF_DECODE_ERRORS as e:
        raise ValueError(f"cannot read GIF {path}: {e}") from None
    return frames


def load_video_frames(path: PathLike, num_frames: int = 20, strict: bool = False) -> list:
    """Decode ``num_frames`` frames sampled uniformly in time over a video (PyAV/FFmpeg).

    The stream duration is cut into ``num_frames`` equal segments and, for the centre
    ``tau`` of each, the frame on screen at ``tau`` is taken (the last decoded frame whose
    presentation time is ``<= tau``; the first frame for a ``tau`` before it). For a constant
    frame rate this equals :func:`sample_frame_indices` over the decoded frames; it stays
    uniform in time for variable frame rates, B-frames and containers with more packets than
    frames (e.g. N-VOP / packed B-frame placeholders of MSVD's DivX ``.avi``), whose packet
    count would overstate the frame count.

    Fallback: when the duration or a frame's pts is unknown, or when the time targets do not
    give ``min(num_frames, decoded frames)`` distinct frames (frames bunched in time, an
    overstated duration, a clip shorter than ``num_frames``), all frames are decoded and
    :func:`sample_frame_indices` is applied to the real decoded count (a second decoding
    pass). So a video with at least ``num_frames`` decodable frames always gives exactly
    ``num_frames`` distinct frames, and a shorter one gives all of its frames.

    A file holding fewer frames than its header declares (a video cut short by an interrupted
    copy: the frames are then sampled from its beginning only) is logged as a warning naming
    it and the frames missing, as truncated audio is (:func:`captionlib.audio.io.check_truncation`);
    with ``strict`` it is an error. Only headers that declare a frame count (AVI, MP4) allow
    this check.

    A file that starts with a GIF signature (whatever its name) is an animated GIF, decoded by
    :func:`load_gif_frames` (Pillow; each frame lasts its own delay).

    Args:
        path: any container/codec FFmpeg reads (mp4, avi, webm, ...), or an animated GIF.
        num_frames: frames to sample (>= 1).
        strict: a truncated file is an error (default: a logged warning).

    Returns:
        list of RGB ``PIL.Image.Image`` in temporal order, ``len == min(num_frames, decoded
        frames)`` (>= 1).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: ``num_frames < 1``; the file is empty (0 bytes), cannot be opened/decoded,
            has no video stream or no frame; with ``strict``, it is truncated (the path is named).
    """
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such video file: {path}")
    if os.path.getsize(path) == 0:
        raise ValueError(f"empty video file (0 bytes): {path}")
    if is_gif(path):
        return load_gif_frames(path, num_frames, strict)
    import av  # only for real videos: GIFs and images do not need FFmpeg's libraries

    try:
        frames, decoded, timed, short = _sample_by_time(path, num_frames)
        if short and decoded:
            msg = (f"{path}: truncated? its header declares {short[0]} frames, the file holds {short[1]} "
                   f"({short[0] - short[1]} missing); the frames are sampled from the {decoded} decoded")
            if strict:
                raise ValueError(msg)
            logging.warning("%s (strict: make this an error)", msg)
        if len(frames) < min(num_frames, decoded):
            logging.debug("%s: %s; sampling %d of the %d decoded frames by index", path,
                          "time targets gave %d distinct frames" % len(frames) if timed else "no timing",
                          min(num_frames, decoded), decoded)
            frames = _sample_by_index(path, sample_frame_indices(decoded, num_frames))
    except av.FFmpegError as e:
        raise ValueError(f"cannot decode video {path}: {e}") from None
    if not frames:
        raise ValueError(f"no decodable video frame in {path}")
    return frames


def load_video_tensor(path: PathLike, num_frames: int = 20, image_size: int = 224,
                      strict: bool = False) -> torch.Tensor:
    """:func:`load_video_frames` then :func:`preprocess_image` per frame.

    Returns:
        float32 tensor (T, 3, image_size, image_size), ``T = min(num_frames, decoded frames)``.

    Raises:
        FileNotFoundError, ValueError: see :func:`load_video_frames` and :func:`preprocess_image`.
    """
    return torch.stack([preprocess_image(f, image_size) for f in load_video_frames(path, num_frames, strict)])
