#!/usr/bin/env python3
"""Extract CNN features of the images or videos of one media scp shard into ark or HDF5.

Writes ``<out_prefix>.{ark|h5}``, ``<out_prefix>.scp`` (absolute paths) and, for
``--out_prefix DIR/feats.JOB``, ``DIR/utt2num_frames.JOB``, ``DIR/feats_dim.JOB`` and
``DIR/feats_type.JOB`` (``cnn_<name>_<output>``): the same files as ``caption_dump_feats``,
merged the same way. Image: (1, C) ``pooled`` or (H'W', C) ``grid``; video: (frames, C).

Usage:
    python -m captionbin.caption_extract_visual_feats --media_scp data/train/image.scp \\
        --media_type image --cnn resnet101 --cnn_weights /models/resnet101-63fe2227.pth \\
        --output grid --filetype hdf5 --out_prefix dump/cnn_resnet101_grid/train/feats.1
    # without torchvision: export once elsewhere (caption_export_cnn), then
    python -m captionbin.caption_extract_visual_feats --media_scp data/train/video.scp \\
        --media_type video --num_frames 20 --cnn exported --cnn_weights resnet152.pt2 \\
        --out_prefix dump/cnn_resnet152_pooled/train/feats.1
"""

from typing import Optional, Sequence

from captionlib.io.feats import add_shard_arguments, run_shard_job
from captionlib.utils.cli import get_base_parser, parse_args, str_or_none
from captionlib.visual import CNN_NAMES, MEDIA_TYPES, OUTPUTS, TEMPORAL_POOLS

REQUIRED = ("media_scp", "out_prefix")


def get_parser():
    """Build the argument parser (keys match ``conf/feats_cnn*.yaml``)."""
    parser = get_base_parser("Extract CNN features of images/videos into ark/HDF5")
    parser.add_argument("--media_scp", default=None, help="(required) <clip-id> <image or video path> list")
    add_shard_arguments(parser)
    parser.add_argument("--media_type", default="image", choices=MEDIA_TYPES, help="what the paths hold")
    parser.add_argument(
        "--cnn", default="resnet101", choices=CNN_NAMES,
        help="backbone; random_convnet is a random net for tests/mini recipes only",
    )
    parser.add_argument(
        "--cnn_weights", type=str_or_none, default=None,
        help="local state dict (torchvision names) or .pt2 file (exported); nothing is downloaded",
    )
    parser.add_argument(
        "--output", default="pooled", choices=OUTPUTS,
        help="pooled: mean of the last conv map; grid: its H'W' vectors (images only)",
    )
    parser.add_argument(
        "--image_size", type=int, default=None,
        help="square crop side in pixels (default: the backbone's, 224; 299 for inception_v3; "
        "the .pt2's for exported)",
    )
    parser.add_argument("--num_frames", type=int, default=20, help="frames sampled uniformly per video")
    parser.add_argument(
        "--temporal_pool", default="none", choices=TEMPORAL_POOLS,
        help="videos: none (one row per sampled frame) or mean (one row per video, the frames' mean: seed 001's "
        "spatio-temporal mean pooling)",
    )
    parser.add_argument("--batch_size", type=int, default=16, help="images (or frames of a video) per forward")
    parser.add_argument("--num_threads", type=int, default=1, help="torch threads per job (0: torch default)")
    parser.add_argument("--seed", type=int, default=0, help="random_convnet initialisation seed")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.visual.extract.extract_visual_feats` (errors: exit 1)."""
    args = parse_args(get_parser(), cmd, REQUIRED)
    from captionlib.visual.extract import extract_visual_feats

    run_shard_job(extract_visual_feats, args, (ValueError, OSError, RuntimeError))


if __name__ == "__main__":
    main()
