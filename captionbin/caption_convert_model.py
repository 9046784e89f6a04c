#!/usr/bin/env python3
"""Convert a model file, checkpoint, packed model or CIDEr-D document-frequency file written by
an older captionlib into the formats that load without running code.

captionlib loads model files, checkpoints (``latest.pth``) and packed models with
``torch.load(weights_only=True)`` and document frequencies from ``.npz`` with
``allow_pickle=False``: a file someone else wrote cannot run code on your machine. Older
versions wrote numpy's RNG state into ``latest.pth`` and the document frequencies as a pickle
(``cider_df.pkl``, also inside packed models); those files are refused with a message naming
this command. It reads the old pickle with a restricted unpickler (numpy arrays and numbers
only: nothing in the file is run) and still requires ``--trust_pickle true``, an explicit
step for files you made yourself (see :func:`captionlib.packed.legacy.convert_legacy_file`).

Usage:
    python -m captionbin.caption_convert_model --trust_pickle true \\
        --input exp/xe_x/latest.pth --output exp/xe_x/latest.pth
    python -m captionbin.caption_convert_model --trust_pickle true \\
        --input exp/stats_logmel/cider_df.pkl --output exp/stats_logmel/cider_df.npz
    python -m captionbin.caption_convert_model --trust_pickle true \\
        --input old/valid.cider_d.best.zip --output new/valid.cider_d.best.zip
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str2bool

REQUIRED = ("input", "output")


def get_parser():
    """Return the argument parser of caption_convert_model."""
    parser = get_base_parser("Convert a file of an older captionlib (pickles) into the safe formats")
    parser.add_argument("--input", default=None,
                        help="(required) the old file: model file, latest.pth, packed model (.zip) or cider_df.pkl")
    parser.add_argument("--output", default=None,
                        help="(required) the converted file, written atomically (may be --input; "
                             "a document-frequency file becomes .npz: name it so)")
    parser.add_argument("--trust_pickle", type=str2bool, default=False,
                        help="(required: true) read the old pickle (only numpy arrays and numbers allowed, "
                             "nothing in it run): for files you made yourself")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_convert_model."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    if not args.trust_pickle:
        parser.error("--trust_pickle true is required: the old file is a pickle (read with only numpy arrays "
                     "and numbers allowed); convert only files you made yourself")
    from captionlib.packed import convert_legacy_file

    try:
        kind = convert_legacy_file(args.input, args.output, trust_pickle=args.trust_pickle)
    except (ValueError, FileNotFoundError) as e:
        logging.error("%s", e)
        sys.exit(1)
    logging.info("converted %s (%s) into %s", args.input, kind, args.output)


if __name__ == "__main__":
    main()
