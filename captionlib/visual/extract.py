"""CNN feature extraction over an image/video scp shard (the body of ``caption_extract_visual_feats``).

Writes the same shard files as the audio front end (:mod:`captionlib.audio.dump`) through
:class:`captionlib.io.feats.FeatShardWriter`, so ``egs/TEMPLATE/scripts/dump_feats.sh`` merges
them the same way. Per clip the matrix is:

* image, ``pooled``: (1, C), the mean of the last conv map (self-critical.pytorch "fc");
* image, ``grid``: (H'*W', C), every position of the map (self-critical.pytorch "att",
  Show-Attend-Tell annotation vectors);
* video, ``pooled``: (T, C), one pooled vector per sampled frame (T <= ``num_frames``).
"""

import functools
import logging
import os
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import nn

from captionlib.io.datadir import PathLike, read_scp
from captionlib.io.feats import FeatShardWriter
from captionlib.visual import MEDIA_TYPES, TEMPORAL_POOLS, default_image_size
from captionlib.visual.cnn import build_backbone, cnn_features, load_exported, video_features
from captionlib.visual.media import load_image_tensor, load_video_tensor


def extract_visual_feats(
    media_scp: PathLike,
    out_prefix: PathLike,
    media_type: str = "image",
    filetype: str = "ark",
    cnn: str = "resnet101",
    cnn_weights: Optional[PathLike] = None,
    output: str = "pooled",
    image_size: Optional[int] = None,
    num_frames: int = 20,
    temporal_pool: str = "none",
    batch_size: int = 16,
    num_threads: int = 1,
    log_interval: int = 100,
    seed: int = 0,
    write_num_frames: Optional[PathLike] = None,
) -> Dict[str, int]:
    """Extract CNN features of every clip of ``media_scp`` into one ark or h5 shard.

    Writes ``<out_prefix>.{ark|h5}``, ``<out_prefix>.scp`` and, for
    ``out_prefix=DIR/feats.JOB``, ``DIR/utt2num_frames.JOB``, ``DIR/feats_dim.JOB`` and
    ``DIR/feats_type.JOB`` (``cnn_<name>_<output>``; for ``exported`` the name saved in
    the ``.pt2``). Logs progress with rate and ETA every ``log_interval`` clips.

    Args:
        media_scp: ``<clip-id> <image or video path>`` lines (path may contain spaces).
        out_prefix: output path without extension, e.g. ``dump/cnn_resnet101_grid/train/feats.3``.
        media_type: ``image`` or ``video``.
        filetype: ``ark`` or ``hdf5``.
        cnn: a name of :data:`captionlib.visual.CNN_NAMES`.
        cnn_weights: state dict (torchvision names) or ``.pt2`` (``exported``).
        output: ``pooled`` or ``grid`` (images only).
        image_size: side in pixels of the square crop; None: the backbone's own size
            (:func:`captionlib.visual.default_image_size`: 224 for ResNet/VGG/random_convnet,
            299 for Inception-v3, for ``exported`` the ``image_size`` saved in the ``.pt2``).
            An explicit size different from an exported backbone's is used, with a warning.
        num_frames: frames sampled uniformly per video.
        temporal_pool: videos: ``none`` (one row per sampled frame) or ``mean`` (one row, their
            mean: seed 001's spatio-temporal mean pooling; :func:`~captionlib.visual.cnn.video_features`).
        batch_size: images (or frames of one video) per CNN forward.
        num_threads: torch intra-op threads (1: one core per job; 0: leave torch's setting).
            Set process-wide and left set.
        log_interval: clips between progress lines (0: none).
        seed: ``random_convnet`` initialisation seed.
        write_num_frames: ``utt2num_frames`` output (default derived from ``out_prefix``).

    Returns:
        ``{clip_id: rows}``.

    Raises:
        ValueError: bad option (unknown media type/output, ``grid`` for video, sizes < 1),
            a ``.pt2`` that is not a ``torch.export`` program,
            malformed ``media_scp``, or an unreadable/empty medium (the message names
            ``<media_scp>:<line>``, the clip id and the path).
        FileNotFoundError: a missing medium (same naming) or weights file.
        RuntimeError: a torchvision backbone without an importable torchvision.
    """
    _check_options(media_type, output, image_size, num_frames, batch_size)
    if temporal_pool not in TEMPORAL_POOLS or (temporal_pool != "none" and media_type != "video"):
        raise ValueError(f"temporal_pool must be one of {TEMPORAL_POOLS}, and none for images: got {temporal_pool!r} "
                         f"for {media_type}s")
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    backbone, name, image_size = _load_backbone(cnn, cnn_weights, image_size, seed)
    feats_type = f"cnn_{name}_{output}"
    media = read_scp(media_scp)
    prefix = os.path.abspath(os.fspath(out_prefix))
    logging.info("extracting %s features (%d px) of %d %ss from %s to %s.*", feats_type, image_size, len(media),
                 media_type, media_scp, prefix)
    load = functools.partial(_load_medium, media_scp, media_type, image_size, num_frames)
    with FeatShardWriter(prefix, filetype, feats_type, write_num_frames, len(media), log_interval) as writer:
        if media_type == "image":
            _write_image_feats(writer, media, load, backbone, output, batch_size)
        else:
            _write_video_feats(writer, media, load, backbone, temporal_pool, batch_size)
    return dict(writer.num_frames)


def _check_options(media_type: str, output: str, image_size: Optional[int], num_frames: int, batch_size: int) -> None:
    """Raise ValueError for an unknown media type, ``grid`` for video, or a size below 1."""
    if media_type not in MEDIA_TYPES:
        raise ValueError(f"media_type must be one of {MEDIA_TYPES}, got {media_type!r}")
    if media_type == "video" and output != "pooled":
        raise ValueError("video features are pooled per frame: use --output pooled")
    for name, value in (("image_size", image_size), ("num_frames", num_frames), ("batch_size", batch_size)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _load_backbone(cnn: str, cnn_weights: Optional[PathLike], image_size: Optional[int],
                   seed: int) -> Tuple[nn.Module, str, int]:
    """The CNN, its name for ``feats_type`` and the image side to extract at.

    Args:
        cnn, cnn_weights, seed: see :func:`extract_visual_feats`; ``exported`` with weights loads
            the ``.pt2`` (:func:`captionlib.visual.cnn.load_exported`), anything else goes to
            :func:`captionlib.visual.cnn.build_backbone`.
        image_size: the requested side, or ``None`` for the backbone's own
            (:func:`captionlib.visual.default_image_size`). A missing or different size saved in a
            ``.pt2`` is logged as a warning.

    Returns:
        ``(module (B, 3, H, W) -> (B, C, H', W'), name, image_size)``.
    """
    if cnn == "exported" and cnn_weights:
        backbone, meta = load_exported(cnn_weights)
        name = meta.get("cnn", "exported")
        exported_size = meta.get("image_size")
        if image_size is None:
            image_size = default_image_size(cnn, exported_size)
            if not exported_size:
                logging.warning("%s saves no image_size: extracting at %d px (set --image_size)",
                                cnn_weights, image_size)
        elif exported_size and image_size != exported_size:
            logging.warning("--image_size %d differs from the image_size %s of the exported %s (%s)",
                            image_size, exported_size, name, cnn_weights)
        return backbone, name, image_size
    backbone = build_backbone(cnn, cnn_weights, seed=seed)
    return backbone, cnn, default_image_size(cnn) if image_size is None else image_size


def _load_medium(media_scp: PathLike, media_type: str, image_size: int, num_frames: int, i: int, key: str,
                 path: str) -> torch.Tensor:
    """The image (3, S, S) or sampled video frames (T, 3, S, S) of clip ``key``, line ``i`` of ``media_scp``.

    Raises:
        ValueError, FileNotFoundError: of the loaders (:mod:`captionlib.visual.media`), the message
            prefixed with ``<media_scp>:<i>: clip <key>:``.
    """
    try:
        if media_type == "image":
            return load_image_tensor(path, image_size)
        return load_video_tensor(path, num_frames, image_size)
    except (ValueError, FileNotFoundError) as e:
        raise type(e)(f"{media_scp}:{i}: clip {key}: {e}") from None


def _write_image_feats(writer: FeatShardWriter, media: Dict[str, str], load: Callable[[int, str, str], torch.Tensor],
                       backbone: nn.Module, output: str, batch_size: int) -> None:
    """Write one (1, C) (``pooled``) or (H'*W', C) (``grid``) matrix per image, ``batch_size`` images per forward."""
    batch_keys, batch = [], []
    items = list(media.items())
    for i, (key, path) in enumerate(items, start=1):
        batch_keys.append(key)
        batch.append(load(i, key, path))
        if len(batch) == batch_size or i == len(items):
            feats = cnn_features(backbone, torch.stack(batch), output)
            for k, f in zip(batch_keys, feats):
                writer[k] = f.reshape(-1, f.shape[-1]).numpy()
            batch_keys, batch = [], []


def _write_video_feats(writer: FeatShardWriter, media: Dict[str, str], load: Callable[[int, str, str], torch.Tensor],
                       backbone: nn.Module, temporal_pool: str, batch_size: int) -> None:
    """Write one (T, C) matrix per video, a pooled vector per sampled frame (or their mean,
    (1, C), with ``temporal_pool`` mean), ``batch_size`` frames per forward."""
    for i, (key, path) in enumerate(media.items(), start=1):
        writer[key] = video_features(backbone, load(i, key, path), batch_size, temporal_pool).numpy()
