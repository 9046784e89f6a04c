#!/usr/bin/env python3
"""Cross-entropy (teacher forcing) training of a captioner (stage 5).

Usage:
    python -m captionbin.caption_train --config conf/train_xe.yaml \
        --train_data_dir dump/logmel/development --valid_data_dir dump/logmel/validation \
        --token_list data/token_list/word/tokens.txt --feats_stats exp/stats_logmel/feats_stats.npz \
        --output_dir exp/xe_train_xe_logmel_word --ngpu 0
    python -m captionbin.caption_train --print_config   # a complete config to start from

Re-running the same command resumes from ``<output_dir>/latest.pth`` (or returns at once
when all epochs are done). Data-parallel over N processes (gloo on CPU, NCCL with --ngpu):
    torchrun --nproc_per_node N -m captionbin.caption_train ... (see captionlib.utils.distributed)

The options are the fields of :class:`captionlib.train.options.XEOptions`; a bad one, or an
unknown key of ``encoder_conf``/``decoder_conf``/``specaug_conf``, exits 2 with one line naming
it, before anything is loaded (``--check_only true``: check and exit;
:func:`captionlib.train.xe.check_xe_options`).
"""

from typing import Optional, Sequence

from captionlib.train.options import XEOptions
from captionlib.utils.cli import add_options, get_base_parser, parse_options, run_refusing_unsafe_files


def get_parser():
    """Return the argument parser of caption_train."""
    parser = get_base_parser("Train a captioner with cross-entropy (teacher forcing)")
    add_options(parser, XEOptions)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_train."""
    opts = parse_options(get_parser(), XEOptions, cmd, check="captionlib.train.xe.check_xe_options")
    from captionlib.train.xe import train_xe
    from captionlib.utils.distributed import finish

    run_refusing_unsafe_files(train_xe, opts)
    finish()


if __name__ == "__main__":
    main()
