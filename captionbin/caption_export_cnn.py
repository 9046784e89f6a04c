#!/usr/bin/env python3
"""Write a CNN backbone as a ``torch.export`` program (``.pt2``) for ``--cnn exported``.

Run it once where torchvision imports (it builds the torchvision model and loads the local
state dict); feature extraction with ``caption_extract_visual_feats --cnn exported
--cnn_weights <file>.pt2`` then needs only torch. The module maps (B, 3, H, W) ImageNet-
normalised images to the last conv map (B, C, H', W'), with dynamic batch and image sizes;
the backbone name is saved with it (so ``feats_type`` stays ``cnn_<name>_<output>``), and so is
``--image_size`` (default: the backbone's own, 224; 299 for inception_v3), which extraction
then uses unless given its own ``--image_size``.
``random_convnet`` (``--seed``) is the test/mini-recipe net.

Usage:
    python -m captionbin.caption_export_cnn --cnn resnet101 \\
        --cnn_weights /models/resnet101-63fe2227.pth --out /models/resnet101.pt2
    python -m captionbin.caption_export_cnn --cnn random_convnet --seed 0 --out exp/cnn/random.pt2
"""

import sys
from typing import Optional, Sequence

from captionlib.utils.cli import get_base_parser, parse_args, str_or_none

REQUIRED = ("out",)


def get_parser():
    """Build the argument parser."""
    from captionlib.visual import CNN_NAMES

    parser = get_base_parser("Export a CNN backbone as a torch.export .pt2 program")
    parser.add_argument(
        "--cnn", default="resnet101", choices=[n for n in CNN_NAMES if n != "exported"], help="backbone"
    )
    parser.add_argument(
        "--cnn_weights", type=str_or_none, default=None, help="local state-dict file (torchvision names)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random_convnet initialisation seed")
    parser.add_argument(
        "--image_size", type=int, default=None,
        help="image side used for tracing, saved as the extraction default (default: the backbone's, "
        "224; 299 for inception_v3)",
    )
    parser.add_argument("--out", default=None, help="(required) output .pt2 file")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Parse ``cmd``, build the backbone and write it with :func:`captionlib.visual.cnn.export_backbone`."""
    parser = get_parser()
    args = parse_args(parser, cmd, REQUIRED)
    import logging

    from captionlib.visual import default_image_size
    from captionlib.visual.cnn import build_backbone, export_backbone

    image_size = default_image_size(args.cnn) if args.image_size is None else args.image_size
    try:
        if image_size < 1:
            raise ValueError(f"image_size must be >= 1, got {image_size}")
        backbone = build_backbone(args.cnn, args.cnn_weights, seed=args.seed)
        meta = {"cnn": args.cnn, "seed": args.seed} if args.cnn == "random_convnet" else {"cnn": args.cnn}
        export_backbone(backbone, args.out, image_size, meta)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        logging.error("%s", e)
        sys.exit(1)
    num_params = sum(p.numel() for p in backbone.parameters())
    logging.info("wrote %s (%s at %d px, %d parameters)", args.out, args.cnn, image_size, num_params)


if __name__ == "__main__":
    main()
