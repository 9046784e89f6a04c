#!/usr/bin/env python3
"""Pretrain an audio encoder on clip labels (audio tagging, as PANNs are trained) and write it
as a checkpoint in its authors' layout, for XE's ``encoder_conf: {pretrained: ...}``.

Usage:
    python -m captionbin.caption_pretrain_tagging --encoder cnn10 \
        --train_data_dir dump/logmel/development --valid_data_dir dump/logmel/validation \
        --train_labels clotho_metadata_development.csv --valid_labels clotho_metadata_validation.csv \
        --output_dir exp/tagging_cnn10 --max_epoch 20 --lr 0.001
    # corpora without tags: caption keywords as labels
    python -m captionbin.caption_pretrain_tagging ... --keywords_from_captions 100

Writes ``<output_dir>/pretrained.pth`` (best validation mAP) and ``<output_dir>/classes.txt``;
then train the captioner with ``encoder_conf: {pretrained: <output_dir>/pretrained.pth,
classes_num: <lines of classes.txt>}``. Re-running resumes; a ``latest.pth`` that would run code
when loaded (an unsafe pickle) is refused in one line, exit 1. The options are the fields of
:class:`captionlib.train.options.TaggingOptions`.
"""

from typing import Optional, Sequence

from captionlib.train.options import TaggingOptions
from captionlib.utils.cli import add_options, get_base_parser, parse_options, run_refusing_unsafe_files


def get_parser():
    """Return the argument parser of caption_pretrain_tagging."""
    parser = get_base_parser("Pretrain an audio encoder on clip labels (multi-label BCE, mAP)")
    add_options(parser, TaggingOptions)
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_pretrain_tagging."""
    opts = parse_options(get_parser(), TaggingOptions, cmd, check="captionlib.train.tagging.check_tagging_options")
    from captionlib.train.tagging import train_tagging
    from captionlib.utils.distributed import finish

    run_refusing_unsafe_files(train_tagging, opts)
    finish()


if __name__ == "__main__":
    main()
