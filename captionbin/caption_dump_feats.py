#!/usr/bin/env python3
"""Extract features for the clips of one wav.scp shard into ark or HDF5: the log-mel
(``--feats_type logmel``), or the frame outputs of a frozen pretrained audio encoder on that
log-mel (``--feats_type pretrained --encoder convnext --pretrained <checkpoint>``; see
:mod:`captionlib.models.pretrained_feats`).

Writes ``<out_prefix>.{ark|h5}``, ``<out_prefix>.scp`` (absolute paths) and, for
``--out_prefix DIR/feats.JOB``, ``DIR/utt2num_frames.JOB``, ``DIR/feats_dim.JOB`` and
``DIR/feats_type.JOB``. One job of ``egs/TEMPLATE/scripts/dump_feats.sh``.

Usage:
    python -m captionbin.caption_dump_feats --config conf/feats_logmel.yaml \\
        --wav_scp dump/logmel/development/log/wav.3.scp --filetype ark \\
        --out_prefix dump/logmel/development/feats.3
    python -m captionbin.caption_dump_feats --wav_scp data/validation/wav.scp \\
        --filetype hdf5 --out_prefix /tmp/feats.1 --n_mels 64 --fs 16000
    python -m captionbin.caption_dump_feats --config conf/feats_pretrained_convnext.yaml \\
        --wav_scp data/validation/wav.scp --filetype hdf5 --out_prefix /tmp/convnext.1
"""

import argparse
from typing import Any, Mapping, Optional, Sequence

from captionlib.io.feats import add_shard_arguments, run_shard_job
from captionlib.utils.cli import float_or_none, get_base_parser, int_or_none, parse_args, str2bool

REQUIRED = ('wav_scp', 'out_prefix')


def get_parser():
    """Build the argument parser (feature keys match ``conf/feats_*.yaml``)."""
    parser = get_base_parser("Extract log-mel features (or a frozen pretrained encoder's outputs) of a wav.scp "
                             "into ark/HDF5")
    parser.add_argument("--wav_scp", default=None, help="(required) <clip-id> <audio path> list")
    add_shard_arguments(parser)
    parser.add_argument("--feats_type", default="logmel", choices=("logmel", "pretrained"),
                        help="logmel, or pretrained: the frame outputs of --encoder on that log-mel")
    # the options of feats_type pretrained are absent unless given (argparse.SUPPRESS), so that a logmel config
    # resolves (--print_config, the dump's .done key and feats_config.yaml) as before they existed
    parser.add_argument("--encoder", default=argparse.SUPPRESS, choices=("cnn14", "cnn10", "convnext", "beats"),
                        help="feats_type pretrained: the encoder (its published checkpoint's front end is the log-mel)")
    parser.add_argument("--pretrained", default=argparse.SUPPRESS,
                        help="feats_type pretrained: the encoder's checkpoint, e.g. "
                             "downloads/convnext_tiny_465mAP_BL_AC_70kit.pth (loaded strictly)")
    parser.add_argument("--classes_num", type=int, default=argparse.SUPPRESS,
                        help="feats_type pretrained: classes of the checkpoint's tagging head (default 527: AudioSet)")
    # absent unless given, as the options above: an older config resolves as before
    parser.add_argument("--frontend", default=argparse.SUPPRESS, choices=("stft", "kaldi"),
                        help="stft (default): torch.stft and librosa's mel filters, with the options below; kaldi: "
                             "Kaldi's fbank computation (compute-fbank-feats, no dither; BEATs' input: set every "
                             "option as conf/feats_beats.yaml does, the defaults below are not Kaldi's), which takes "
                             "n_mels, win_length_s, hop_length_s, fmin, fmax, fs and refuses other n_fft, dtype, "
                             "log or pad_mode values than the defaults")
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


def check_feats_type(options: Mapping[str, Any]) -> None:
    """Check that resolved options (``vars(args)``, or a resolved feature config) fit their
    ``feats_type``; caption_pack checks the feature config it packs with this too.

    Raises:
        ValueError: ``encoder``/``pretrained``/``classes_num`` with ``feats_type`` logmel, or
            ``feats_type`` pretrained without ``encoder``, ``pretrained`` and ``fs``.
    """
    given = [f"--{k}" for k in ("encoder", "pretrained", "classes_num") if k in options]
    if options["feats_type"] == "logmel" and given:
        raise ValueError(f"{', '.join(given)}: only for --feats_type pretrained, not logmel")
    if options["feats_type"] == "pretrained" and (
            "encoder" not in options or "pretrained" not in options or options.get("fs") is None):
        raise ValueError("--feats_type pretrained needs --encoder, --pretrained and --fs (the encoder's front end)")


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd`` and run :func:`captionlib.audio.dump.dump_feats`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    try:
        check_feats_type(vars(args))
    except ValueError as e:
        parser.error(str(e))
    if args.feats_type == "logmel":
        from captionlib.audio.dump import dump_feats

        run_shard_job(dump_feats, args)
    else:
        from captionlib.models.pretrained_feats import dump_encoder_feats

        run_shard_job(dump_encoder_feats, args)


if __name__ == "__main__":
    main()
