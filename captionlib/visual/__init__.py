"""The image/video front end: media loading (Pillow, PyAV), CNN backbones, visual feature
extraction into ark/HDF5 dump shards. The importers of precomputed features (any modality)
are :mod:`captionlib.io.importers`.

Modules::

    captionlib.visual.media      # load_image, preprocess_image, load_video_frames
    captionlib.visual.cnn        # build_backbone, cnn_features, export_backbone, load_exported
    captionlib.visual.exported   # check_exported_program: a .pt2 runs no code when loaded
    captionlib.visual.extract    # extract_visual_feats (body of caption_extract_visual_feats)

This package module holds the option choices shared by those modules and the command-line
binaries (their one definition). It must not import torch (nor the submodules), so that
``--help`` / ``--print_config`` of the binaries stay fast.
"""

from typing import Optional

#: torchvision ImageNet classifiers usable as backbones (``--cnn``).
TORCHVISION_NAMES = ("resnet101", "resnet152", "vgg16", "inception_v3")
#: every ``--cnn`` choice: the torchvision names, a ``torch.export`` ``.pt2`` file, the test net.
CNN_NAMES = TORCHVISION_NAMES + ("exported", "random_convnet")
#: ``--output``: ``pooled`` (mean of the conv map) or ``grid`` (its H'W' vectors).
OUTPUTS = ("pooled", "grid")
#: ``--media_type`` of ``caption_extract_visual_feats``.
MEDIA_TYPES = ("image", "video")
#: ``--temporal_pool`` of ``caption_extract_visual_feats`` (videos; see :func:`captionlib.visual.cnn.video_features`).
TEMPORAL_POOLS = ("none", "mean")
#: input side in pixels each backbone was trained at (the default ``--image_size``);
#: for ``exported`` the size saved in the ``.pt2`` metadata is used instead.
DEFAULT_IMAGE_SIZES = {"inception_v3": 299}
DEFAULT_IMAGE_SIZE = 224


def default_image_size(cnn: str, exported_size: Optional[int] = None) -> int:
    """The square input side in pixels that backbone ``cnn`` expects.

    Args:
        cnn: a name of :data:`CNN_NAMES`.
        exported_size: for ``cnn == "exported"``, the ``image_size`` saved in the ``.pt2``
            metadata (None when absent).

    Returns:
        299 for ``inception_v3``; ``exported_size`` (or 224 without one) for ``exported``;
        224 otherwise (ResNet, VGG, ``random_convnet``).

    Example:
        >>> default_image_size("inception_v3"), default_image_size("exported", 299)
        (299, 299)
    """
    if cnn == "exported" and exported_size:
        return int(exported_size)
    return DEFAULT_IMAGE_SIZES.get(cnn, DEFAULT_IMAGE_SIZE)
