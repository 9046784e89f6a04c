#!/usr/bin/env python3
"""Import precomputed features (visual CNN features, audio-model embeddings) into ark or HDF5.

Reads the clips and their source ids from ``--clip2id`` (``<clip-id> <corpus id>``: COCO
image id, MSVD clip name, MSR-VTT video id) or, for audio data dirs, from ``--wav_scp`` (the
audio file name without its extension, or with ``--audio_root`` its path below that
directory without the extension), and writes the same shard files as ``caption_dump_feats``:
``<out_prefix>.{ark|h5}``, ``<out_prefix>.scp`` and, for ``--out_prefix DIR/feats.JOB``,
``DIR/utt2num_frames.JOB``, ``DIR/feats_dim.JOB`` and ``DIR/feats_type.JOB``.

Layouts: ``sc_fc`` (``<source>/<id>.npy``, (D,) -> (1, D)), ``sc_att`` (``<source>/<id>.npz``
key ``feat``, (H, W, D) or (N, D) -> (N, D); also ``cocobu_att``), ``hdf5`` (``<source>`` with
one (T, D) dataset per id), ``frames_npy`` (``<source>/<id>.npy``, (T, D), e.g. BEATs frame
embeddings of one audio file). See :mod:`captionlib.io.importers`.

Usage:
    python -m captionbin.caption_import_feats --clip2id data/train/clip2id --layout sc_att \\
        --source /data/coco/cocobu_att --filetype hdf5 --out_prefix dump/cocobu_att/train/feats.1
    python -m captionbin.caption_import_feats --wav_scp data/evaluation/wav.scp --layout frames_npy \\
        --source /data/beats_clotho --audio_root /data/clotho --feats_dim 768 \\
        --out_prefix dump/import_beats/evaluation/feats.1
"""

from typing import Optional, Sequence

from captionlib.io.feats import add_shard_arguments, run_shard_job
from captionlib.utils.cli import get_base_parser, int_or_none, parse_args, str_or_none

REQUIRED = ("layout", "source", "out_prefix")


def get_parser():
    """Build the argument parser."""
    from captionlib.io.importers import LAYOUTS

    parser = get_base_parser("Import precomputed features (visual or audio) into ark/HDF5")
    parser.add_argument("--clip2id", type=str_or_none, default=None,
                        help="<clip-id> <corpus id> list (this or --wav_scp is required)")
    parser.add_argument("--wav_scp", type=str_or_none, default=None,
                        help="audio clips: the source id of a clip is its file name without the extension")
    parser.add_argument("--audio_root", type=str_or_none, default=None,
                        help="with --wav_scp: the id is the audio path below this directory, without the extension")
    parser.add_argument("--layout", default=None, choices=LAYOUTS, help="(required) layout of --source")
    parser.add_argument("--source", default=None,
                        help="(required) feature directory (sc_fc, sc_att, frames_npy) or .h5 file (hdf5)")
    parser.add_argument("--feats_dim", type=int_or_none, default=None,
                        help="the dimension every clip must have (default: that of the first clip)")
    add_shard_arguments(parser, log_interval=1000)
    parser.add_argument(
        "--feats_type", type=str_or_none, default=None,
        help="name written to feats_type (default: basename of --source without .h5)",
    )
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.io.importers.import_feats` (usage errors: exit 2;
    errors in the inputs: exit 1)."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    if (args.clip2id is None) == (args.wav_scp is None):
        parser.error("give one of --clip2id and --wav_scp")
    if args.audio_root is not None and args.wav_scp is None:
        parser.error("--audio_root is for --wav_scp")
    from captionlib.io.importers import import_feats

    run_shard_job(import_feats, args, (ValueError, OSError, KeyError))


if __name__ == "__main__":
    main()
