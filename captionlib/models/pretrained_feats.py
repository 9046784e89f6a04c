"""Features made by a frozen pretrained audio encoder (``feats_type: pretrained``, stage 2).

The field's current audio captioners keep their pretrained encoder frozen and compute its
frame embeddings once, before training: the DCASE 2024 task 6 baseline and CoNeTTE store the
audio ConvNeXt's ``frame_embs`` (768-d, one per 0.32 s) in HDF files and train only a
projection and a Transformer decoder on them (Labbé et al., arXiv:2309.00454). This module
is that step: for each clip of a ``wav.scp``, the log-mel of the features config (the
encoder's front end: ``conf/feats_convnext.yaml``, ``conf/feats_panns.yaml``), then the
encoder in eval mode, loaded strictly from its published checkpoint
(:data:`PRETRAINED_LOADERS`, front end checked against the config), and its frame outputs
(frames', C) are stored (float32) in place of the log-mel. They are exactly the memory that
``encoder: <name>`` with ``encoder_conf: {pretrained: ...}`` and ``freeze_encoder: true`` hands the decoder
(:meth:`~captionlib.models.convnext.ConvNeXtEncoder.forward`,
:meth:`~captionlib.models.panns.PANNsEncoder.forward`), computed once instead of at every
training step; an XE config then reads them with ``encoder: linear`` (the baseline's frame
projection) or any frame encoder.
"""

from typing import Any, Callable, Dict, Optional

import numpy as np
import torch

from captionlib.io.datadir import PathLike
from captionlib.models import beats, convnext, panns
from captionlib.models.captioner import ENCODERS
from captionlib.models.panns import AUDIOSET_CLASSES

#: Loaders of published encoder checkpoints, by encoder name: ``loader(encoder, path,
#: feats_config)`` loads ``path`` strictly into the encoder, checking the checkpoint's front
#: end against the features config of the encoder's log-mel input.
PRETRAINED_LOADERS: Dict[str, Callable[[torch.nn.Module, str, Dict[str, Any]], None]] = {
    "cnn14": panns.load_pretrained, "cnn10": panns.load_pretrained, "convnext": convnext.load_pretrained,
    "beats": beats.load_pretrained}


def check_pretrained_loader(encoder: str, option: str) -> None:
    """Raise ValueError unless ``encoder`` has a loader in :data:`PRETRAINED_LOADERS`, naming
    ``option`` (the config key that asked for it) and listing the encoders that have one."""
    if encoder not in PRETRAINED_LOADERS:
        raise ValueError(f"{option}: encoder {encoder!r} has no checkpoint loader; encoders with one: "
                         f"{', '.join(sorted(PRETRAINED_LOADERS))}")


def frozen_encoder(encoder: str, pretrained: str, feats_config: Dict[str, Any],
                   classes_num: int = AUDIOSET_CLASSES) -> torch.nn.Module:
    """The encoder ``encoder`` (a key of :data:`PRETRAINED_LOADERS`) for ``feats_config``'s
    ``n_mels`` with a tagging head of ``classes_num`` classes (527 in the published
    checkpoints; ``caption_pretrain_tagging`` writes others), loaded from ``pretrained`` and
    in eval mode, without gradients.

    Raises:
        ValueError: an encoder without a checkpoint loader (listing those with one), or the
            loader's errors (mismatched keys or front end, an unsafe file).
        FileNotFoundError: no checkpoint file (saying where the published ones are).
    """
    check_pretrained_loader(encoder, "encoder")
    module = ENCODERS[encoder](n_mels=feats_config["n_mels"], classes_num=classes_num)
    PRETRAINED_LOADERS[encoder](module, pretrained, feats_config)
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def frame_outputs(module: torch.nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    """``logmel (frames, n_mels) -> frame outputs (frames', C)`` of a frozen encoder, float32:
    the log-mel is cast to float32 first, as training reads it from a dump."""

    @torch.no_grad()
    def apply(feats: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))[None]
        lens = torch.tensor([x.size(1)])
        _, frames = module(x, lens)
        n = int(module.output_lengths(lens, x.size(1))[0])
        return frames[0, :n].numpy()

    return apply


def dump_encoder_feats(
    wav_scp: PathLike,
    out_prefix: PathLike,
    encoder: Optional[str] = None,
    pretrained: Optional[str] = None,
    classes_num: int = AUDIOSET_CLASSES,
    n_mels: int = 64,
    fs: Optional[int] = None,
    **options: Any,
) -> Dict[str, int]:
    """Store the frame outputs of a frozen pretrained encoder for every clip of ``wav_scp``.

    The files and progress lines are those of :func:`captionlib.audio.dump.dump_feats`
    (``feats_type`` file ``pretrained``), whose log-mel options (``n_fft``,
    ``win_length_s``, ``hop_length_s``, ``fmin``, ``fmax``, ``log``, ``pad_mode``, ``dtype``,
    ...) make the encoder's input; the checkpoint's front end must be that log-mel.

    Args:
        wav_scp: ``<clip-id> <audio path>`` lines.
        out_prefix: output path without extension, e.g. ``dump/pretrained_convnext/dev/feats.3``.
        encoder: ``cnn14``, ``cnn10``, ``convnext`` or ``beats``.
        pretrained: its checkpoint in the authors' layout (e.g.
            ``convnext_tiny_465mAP_BL_AC_70kit.pth``).
        classes_num: classes of its (unused) tagging head, as :func:`frozen_encoder`.
        n_mels: mel bands of the encoder's input (64 for PANNs, 224 for the ConvNeXt, 128 for BEATs).
        fs: sample rate in Hz of the encoder's input (required: a front end works at one rate).
        options: the other options of :func:`~captionlib.audio.dump.dump_feats`.

    Returns:
        ``{clip_id: frames'}`` (frame outputs per clip: one per ``time_subsampling`` log-mel
        frames, e.g. 31 for a 10 s clip with the ConvNeXt or CNN14, 62 with CNN10, 62 with BEATs).

    Raises:
        ValueError: no ``encoder``, ``pretrained`` or ``fs``, an encoder without a loader, a
            checkpoint that does not match (keys, shapes, front end), or :func:`dump_feats`'s
            errors (naming the wav.scp line, clip and file).
        FileNotFoundError: a missing checkpoint or audio file.
    """
    options.pop("feats_type", None)
    if not encoder or not pretrained or fs is None:
        raise ValueError("feats_type pretrained needs encoder (cnn14, cnn10, convnext or beats), "
                         "pretrained (its checkpoint) "
                         f"and fs (the rate of its front end), got encoder={encoder!r}, pretrained={pretrained!r}, "
                         f"fs={fs!r}")
    from captionlib.audio.dump import dump_feats  # audio libraries only where audio is read

    # the loader compares the checkpoint's front end with the log-mel options it needs of these
    module = frozen_encoder(encoder, pretrained, {**options, "n_mels": n_mels, "fs": fs}, classes_num)
    return dump_feats(wav_scp, out_prefix, feats_type="pretrained", n_mels=n_mels, fs=fs,
                      transform=frame_outputs(module), **options)

