#!/usr/bin/env python3
"""Extract features (log-mel) for the clips of one wav.scp shard into ark or HDF5.

Writes ``<out_prefix>.{ark|h5}``, ``<out_prefix>.scp`` (absolute paths) and, for
``--out_prefix DIR/feats.JOB``, ``DIR/utt2num_frames.JOB``, ``DIR/feats_dim.JOB`` and
``DIR/feats_type.JOB``. One job of ``egs/TEMPLATE/scripts/dump_feats.sh``.

Usage:
    python -m captionbin.caption_dump_feats --config conf/feats_logmel.yaml \\
        --wav_scp dump/logmel/development/log/wav.3.scp --filetype ark \\
        --out_prefix dump/logmel/development/feats.3
    python -m captionbin.caption_dump_feats --wav_scp data/validation/wav.scp \\
        --filetype hdf5 --out_prefix /tmp/feats.1 --n_mels 64 --fs 16000
"""

from typing import Optional, Sequence

from captionlib.io.feats import add_shard_arguments, run_shard_job
from captionlib.utils.cli import float_or_none, get_base_parser, int_or_none, parse_args, str2bool

REQUIRED = ('wav_scp', 'out_prefix')


def get_parser():
    """Build the argument parser (feature keys match ``conf/feats_*.yaml``)."""
    parser = get_base_parser("Extract log-mel features of a wav.scp into ark/HDF5")
    parser.add_argument("--wav_scp", default=None, help="(required) <clip-id> <audio path> list")
    add_shard_arguments(parser)
    parser.add_argument("--feats_type", default="logmel", choices=("logmel",), help="feature type")
    parser.add_argument("--n_mels", type=int, default=64, help="mel bands (feature dim)")
    parser.add_argument("--n_fft", type=int, default=2048, help="FFT size in samples")
    parser.add_argument("--win_length_s", type=float, default=0.04, help="Hann window length in seconds")
    parser.add_argument("--hop_length_s", type=float, default=0.02, help="frame shift in seconds")
    parser.add_argument("--fmin", type=float, default=0.0, help="lowest mel filter edge in Hz")
    parser.add_argument("--fmax", type=float_or_none, default=None,
                        help="highest mel filter edge in Hz (null: Nyquist)")
    parser.add_argument("--log", default="ln", choices=("ln", "db"),
                        help="ln: natural log of the mel energies; db: 10 * log10 (PANNs)")
    parser.add_argument("--pad_mode", default="constant", choices=("constant", "reflect"),
                        help="padding of the centred STFT frames: zeros, or reflection (librosa, PANNs)")
    parser.add_argument(
        "--fs", type=int_or_none, default=None,
        help="resample to this rate (Hz); null: keep each file's rate (mixed rates are warned about)",
    )
    parser.add_argument("--num_threads", type=int, default=1, help="torch threads per job (0: torch default)")
    parser.add_argument(
        "--dtype", default="float32", choices=("float32", "float64"),
        help="computation dtype (features are stored as float32 either way); float64 is ~2x slower",
    )
    parser.add_argument(
        "--strict", type=str2bool, default=False,
        help="an audio file shorter than its header says is an error (default: a warning naming it)",
    )
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.audio.dump.dump_feats`."""
    args = parse_args(get_parser(), cmd, REQUIRED)
    from captionlib.audio.dump import dump_feats

    run_shard_job(dump_feats, args)


if __name__ == "__main__":
    main()
