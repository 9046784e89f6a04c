#!/usr/bin/env python3
"""Import precomputed visual features (self-critical.pytorch npy/npz, one HDF5 file) into ark or HDF5.

Reads ``--clip2id`` (``<clip-id> <corpus id>``: COCO image id, MSVD clip name, MSR-VTT video
id) and writes the same shard files as ``caption_dump_feats``: ``<out_prefix>.{ark|h5}``,
``<out_prefix>.scp`` and, for ``--out_prefix DIR/feats.JOB``, ``DIR/utt2num_frames.JOB``,
``DIR/feats_dim.JOB`` and ``DIR/feats_type.JOB``.

Layouts: ``sc_fc`` (``<source>/<id>.npy``, (D,) -> (1, D)), ``sc_att`` (``<source>/<id>.npz``
key ``feat``, (H, W, D) or (N, D) -> (N, D); also ``cocobu_att``), ``hdf5`` (``<source>`` with
one (T, D) dataset per id).

Usage:
    python -m captionbin.caption_import_feats --clip2id data/train/clip2id --layout sc_att \\
        --source /data/coco/cocobu_att --filetype hdf5 --out_prefix dump/cocobu_att/train/feats.1
    python -m captionbin.caption_import_feats --clip2id data/test/clip2id --layout hdf5 \\
        --source /data/msrvtt/resnet152.h5 --out_prefix dump/resnet152/test/feats.1
"""

from typing import Optional, Sequence

from captionlib.io.feats import add_shard_arguments, run_shard_job
from captionlib.utils.cli import get_base_parser, parse_args, str_or_none

REQUIRED = ("clip2id", "layout", "source", "out_prefix")


def get_parser():
    """Build the argument parser."""
    from captionlib.visual import LAYOUTS

    parser = get_base_parser("Import precomputed visual features into ark/HDF5")
    parser.add_argument("--clip2id", default=None, help="(required) <clip-id> <corpus id> list")
    parser.add_argument("--layout", default=None, choices=LAYOUTS, help="(required) layout of --source")
    parser.add_argument("--source", default=None, help="(required) feature directory (sc_fc, sc_att) or .h5 file")
    add_shard_arguments(parser, log_interval=1000)
    parser.add_argument(
        "--feats_type", type=str_or_none, default=None,
        help="name written to feats_type (default: basename of --source without .h5)",
    )
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.visual.importers.import_feats` (errors: exit 1)."""
    args = parse_args(get_parser(), cmd, REQUIRED)
    from captionlib.visual.importers import import_feats

    run_shard_job(import_feats, args, (ValueError, FileNotFoundError, KeyError))


if __name__ == "__main__":
    main()
