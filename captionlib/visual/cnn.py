"""CNN backbones mapping images (B, 3, H, W) to their last conv feature map (B, C, H', W').

Three kinds (``--cnn``):

* torchvision ImageNet classifiers ``resnet101``, ``resnet152``, ``vgg16``, ``inception_v3``,
  built with random initialisation and loaded from a local state-dict file (``--cnn_weights``,
  e.g. torchvision's ``resnet101-63fe2227.pth``; nothing is downloaded), then truncated to
  the last conv feature map: ResNet without ``avgpool``/``fc`` (2048 x 7 x 7 at 224 px, the
  self-critical.pytorch "att" map), VGG16 ``features`` without the last max-pool (conv5_3,
  512 x 14 x 14 at 224 px, as Show-Attend-Tell's conv5_4 of VGG19), Inception-v3 up to
  ``Mixed_7c`` (2048 x 8 x 8 at 299 px). torchvision is imported only here.
* ``exported``: a ``torch.export`` program (``.pt2``, written by ``caption_export_cnn``) of
  any of the above, so that a machine without torchvision needs only torch. It is checked by
  :mod:`captionlib.visual.exported` before ``torch.export.load`` reads it, since that call
  would run code from a crafted file.
* ``random_convnet``: a small randomly initialised, seeded conv net (3 x conv3x3+ReLU+maxpool,
  64 x H/8 x W/8). **For tests and the mini recipes only**: its features carry no meaning.

:func:`cnn_features` turns the map into ``pooled`` vectors (mean over H'W', one per
image/frame; the "fc" features) or a ``grid`` of H'W' vectors (the "att" layout of
self-critical.pytorch / Show-Attend-Tell, row-major over H', W').
"""

import io
import json
import os
from collections import OrderedDict
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from captionlib.io.datadir import PathLike
from captionlib.utils.archive import DEFAULT_MAX_MODEL_BYTES
from captionlib.visual import CNN_NAMES, OUTPUTS, TEMPORAL_POOLS, TORCHVISION_NAMES  # noqa: F401 (re-exported)
from captionlib.visual.exported import check_exported_program
from captionlib.visual.media import IMAGENET_MEAN, IMAGENET_STD

_META_FILE = "captionlib_cnn.json"


class RandomConvNet(nn.Module):
    """Randomly initialised conv net, for tests and the mini recipes only.

    ``len(channels)`` blocks of conv3x3 (padding 1) + ReLU + 2x2 max-pool.

    Args:
        channels: output channels of each block (the last is the feature dim).
        seed: initialisation seed (the global torch RNG is left untouched).

    Shapes:
        (B, 3, H, W) -> (B, channels[-1], H // 2**n, W // 2**n).
    """

    def __init__(self, channels: Sequence[int] = (16, 32, 64), seed: int = 0) -> None:
        super().__init__()
        layers = []
        c_in = 3
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for c in channels:
                layers += [nn.Conv2d(c_in, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
                c_in = c
            self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class _InceptionInput(nn.Module):
    """torchvision's ``Inception3._transform_input``: ImageNet-normalised input to the
    ``(x - 0.5) / 0.5`` scaling the Google Inception-v3 weights expect."""

    def __init__(self) -> None:
        super().__init__()
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        self.register_buffer("scale", std / 0.5)
        self.register_buffer("shift", (mean - 0.5) / 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


def _import_torchvision_models():
    try:
        from torchvision import models
    except Exception as e:  # ModuleNotFoundError, or RuntimeError from a torch/torchvision mismatch
        raise RuntimeError(
            f"torchvision cannot be imported ({type(e).__name__}: {e}). Export the backbone on a machine "
            "with a matching torchvision: python -m captionbin.caption_export_cnn --cnn <name> "
            "--cnn_weights <state_dict.pth> --out <name>.pt2, then extract here with --cnn exported "
            "--cnn_weights <name>.pt2 (needs only torch)"
        ) from e
    return models


def build_torchvision_backbone(name: str, weights: PathLike) -> nn.Module:
    """Build a torchvision classifier, load ``weights``, truncate it to its last conv map.

    Args:
        name: one of :data:`TORCHVISION_NAMES`.
        weights: local state-dict file of the full classifier (torchvision's checkpoint).

    Returns:
        an ``nn.Module`` in eval mode, (B, 3, H, W) ImageNet-normalised -> (B, C, H', W').

    Raises:
        RuntimeError: torchvision cannot be imported (the message gives the exported route);
            the state dict does not fit the architecture.
        FileNotFoundError: ``weights`` is missing.
        ValueError: unknown ``name`` or no ``weights`` given.
    """
    if name not in TORCHVISION_NAMES:
        raise ValueError(f"unknown torchvision backbone {name!r}; expected one of {TORCHVISION_NAMES}")
    if not weights:
        raise ValueError(f"--cnn {name} needs --cnn_weights (a local state-dict file; nothing is downloaded)")
    weights = os.fspath(weights)
    if not os.path.isfile(weights):
        raise FileNotFoundError(f"no such CNN weights file: {weights}")
    models = _import_torchvision_models()
    if name == "inception_v3":
        model = models.inception_v3(weights=None, aux_logits=True, init_weights=False)
    else:
        model = getattr(models, name)(weights=None)
    state = torch.load(weights, map_location="cpu", weights_only=True)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise RuntimeError(f"{weights} does not hold {name} weights: {e}") from None
    if name.startswith("resnet"):
        trunk = nn.Sequential(OrderedDict((k, m) for k, m in model.named_children() if k not in ("avgpool", "fc")))
    elif name == "vgg16":
        trunk = nn.Sequential(*list(model.features.children())[:-1])
    else:
        children = []
        for k, m in model.named_children():
            if k != "AuxLogits":
                children.append((k, m))
            if k == "Mixed_7c":
                break
        trunk = nn.Sequential(OrderedDict([("transform_input", _InceptionInput())] + children))
    return trunk.eval()


def load_exported(path: PathLike, max_bytes: int = DEFAULT_MAX_MODEL_BYTES) -> Tuple[nn.Module, Dict]:
    """Load a ``.pt2`` written by :func:`export_backbone`, running no code from the file.

    The file is read once, checked by :func:`captionlib.visual.exported.check_exported_program`
    (which refuses every route by which ``torch.export.load`` would unpickle unsafely, load a
    compiled library or evaluate a string), and the same bytes are then loaded.

    Args:
        path: the ``.pt2`` file.
        max_bytes: cap on the file's size and on the summed size of its members, in bytes.

    Returns:
        ``(module, meta)``: the module (B, 3, H, W) -> (B, C, H', W') (a ``GraphModule``;
        do not call ``.eval()`` on it, its mode was fixed at export) and the metadata
        saved with it (``cnn``, ``image_size``, ``feat_dim``; ``{}`` for a foreign file).

    Raises:
        FileNotFoundError: ``path`` is missing.
        ValueError: naming ``path``: over the cap, not a ``torch.export`` program file, or
            refused by the check (the message names the member).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such exported CNN file: {path}")
    if os.path.getsize(path) > max_bytes:
        raise ValueError(f"{path}: {os.path.getsize(path):,} bytes, over the cap of {max_bytes:,} bytes")
    with open(path, "rb") as f:
        return load_exported_bytes(f.read(), path, max_bytes)


def load_exported_bytes(data: bytes, name: str, max_bytes: int = DEFAULT_MAX_MODEL_BYTES) -> Tuple[nn.Module, Dict]:
    """:func:`load_exported` of a ``.pt2`` held in memory (``name``: how messages call it)."""
    check_exported_program(data, name, max_bytes)
    extra = {_META_FILE: ""}
    try:
        program = torch.export.load(io.BytesIO(data), extra_files=extra)
    except Exception as e:
        raise ValueError(f"{name} is not a torch.export program (.pt2): {type(e).__name__}: {e}") from None
    try:
        meta = json.loads(extra[_META_FILE]) if extra.get(_META_FILE) else {}
    except ValueError:
        raise ValueError(f"{name}: member extra/{_META_FILE} is not JSON") from None
    return program.module(), meta


def build_backbone(name: str, weights: Optional[PathLike] = None, seed: int = 0) -> nn.Module:
    """Build the backbone ``name`` (one of :data:`CNN_NAMES`).

    Args:
        name: torchvision name, ``exported`` or ``random_convnet``.
        weights: state-dict file (torchvision names) or ``.pt2`` file (``exported``);
            ignored by ``random_convnet``.
        seed: ``random_convnet`` initialisation seed.

    Returns:
        a module (B, 3, H, W) -> (B, C, H', W'), ready for inference.

    Raises:
        ValueError, FileNotFoundError, RuntimeError: see :func:`build_torchvision_backbone`
            and :func:`load_exported`.
    """
    if name == "random_convnet":
        return RandomConvNet(seed=seed).eval()
    if name == "exported":
        if not weights:
            raise ValueError("--cnn exported needs --cnn_weights <file.pt2> (see caption_export_cnn)")
        return load_exported(weights)[0]
    if name in TORCHVISION_NAMES:
        return build_torchvision_backbone(name, weights)
    raise ValueError(f"unknown cnn {name!r}; expected one of {CNN_NAMES}")


def cnn_features(backbone: nn.Module, images: torch.Tensor, output: str = "pooled") -> torch.Tensor:
    """Run ``backbone`` without gradients and reduce its feature map.

    Args:
        backbone: module (B, 3, H, W) -> (B, C, H', W').
        images: float tensor (B, 3, H, W), ImageNet-normalised.
        output: ``pooled`` (mean over H'W') or ``grid`` (all H'W' positions, row-major).

    Returns:
        (B, C) for ``pooled``, (B, H'*W', C) for ``grid``; float32.

    Raises:
        ValueError: unknown ``output`` or a backbone output that is not 4-D.
    """
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
    with torch.no_grad():
        fmap = backbone(images)
    if fmap.ndim != 4:
        raise ValueError(f"the backbone must return (B, C, H', W'), got shape {tuple(fmap.shape)}")
    fmap = fmap.float()
    if output == "pooled":
        return fmap.mean(dim=(2, 3))
    return fmap.flatten(2).transpose(1, 2)


def video_features(backbone: nn.Module, frames: torch.Tensor, batch_size: int,
                   temporal_pool: str = "none") -> torch.Tensor:
    """Pooled CNN features of a video's sampled frames, ``batch_size`` frames per forward.

    Args:
        frames: (T, 3, H, W) float, ImageNet-normalised.
        temporal_pool: ``none``: one vector per frame; ``mean``: their mean, one vector per
            video (the spatio-temporal mean pooling of seed 001 on TGIF and of S2VT's mean-pool
            baseline: ResNet-152's last conv map averaged over space, then over the frames).

    Returns:
        (T, C) (``none``) or (1, C) (``mean``) float32.

    Raises:
        ValueError: an unknown ``temporal_pool`` (:data:`captionlib.visual.TEMPORAL_POOLS`).
    """
    if temporal_pool not in TEMPORAL_POOLS:
        raise ValueError(f"temporal_pool must be one of {TEMPORAL_POOLS}, got {temporal_pool!r}")
    feats = torch.cat([cnn_features(backbone, chunk, "pooled") for chunk in frames.split(batch_size)])
    return feats.mean(dim=0, keepdim=True) if temporal_pool == "mean" else feats


def export_backbone(backbone: nn.Module, path: PathLike, image_size: int = 224, meta: Optional[Dict] = None):
    """Write ``backbone`` as a ``torch.export`` program file (``.pt2``).

    The batch and spatial sizes are exported as dynamic (``Dim.AUTO``; a size the model
    needs fixed is specialised to the ``image_size`` example). ``meta`` (JSON-serialisable)
    is stored next to the program and returned by :func:`load_exported`. The file is
    written to ``<path>.tmp.pt2`` (torch expects the ``.pt2`` suffix) and then renamed into
    place atomically (``os.replace``); the temporary file is removed on failure.

    Args:
        backbone: module (B, 3, H, W) -> (B, C, H', W'); put in eval mode first.
        path: output file, conventionally ``<name>.pt2``.
        image_size: height/width of the example input used for tracing.
        meta: extra metadata (``cnn``, ``image_size`` ... ); ``feat_dim`` is added.

    Returns:
        the ``torch.export.ExportedProgram``.

    Raises:
        whatever ``torch.export.export`` raises for a module it cannot trace; ``OSError``
        when ``path`` cannot be written.

    Reference: PyTorch ``torch.export.export`` / ``torch.export.save`` (``Dim.AUTO``).
    """
    path = os.fspath(path)
    backbone = backbone.eval()
    example = torch.randn(2, 3, image_size, image_size)
    auto = torch.export.Dim.AUTO
    with torch.no_grad():
        feat_dim = int(backbone(example).shape[1])
        program = torch.export.export(backbone, (example,), dynamic_shapes=({0: auto, 2: auto, 3: auto},))
    meta = dict(meta or {}, image_size=image_size, feat_dim=feat_dim)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.pt2"
    try:
        torch.export.save(program, tmp, extra_files={_META_FILE: json.dumps(meta)})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return program
