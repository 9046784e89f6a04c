"""The audio ConvNeXt-Tiny encoder (``encoder: convnext``), loadable from the authors' published
AudioSet checkpoints.

Reference: T. Pellegrini, I. Khalfaoui-Hassani, E. Labbé, T. Masquelier, "Adapting a ConvNeXt
model to audio classification on AudioSet", Interspeech 2023 (arXiv:2306.00830); code
github.com/topel/audioset-convnext-inf (``src/audioset_convnext_inf/pytorch/convnext.py``:
``ConvNeXt``, ``Block``, ``LayerNorm``, ``convnext_tiny(after_stem_dim=[252, 56])`` as
``ConvNeXt.from_pretrained`` builds it), itself ConvNeXt-T of Liu et al., "A ConvNet for the
2020s", CVPR 2022. It is the audio encoder of CoNeTTE (Labbé et al., "CoNeTTE: An efficient
Audio Captioning system leveraging multiple datasets with Task Embedding", arXiv:2309.00454)
and of the DCASE 2024 task 6 baseline, both with the checkpoint
``convnext_tiny_465mAP_BL_AC_70kit.pth`` (Zenodo record 8020843, https://zenodo.org/record/8020843;
``convnext_tiny_471mAP.pth`` there has the same layout). Users download it; nothing is fetched
at run time. The modules and parameter names are the authors', so :func:`load_pretrained` loads
those checkpoints strictly:

- ``bn0``: BatchNorm over the 224 mel bins of the input;
- ``downsample_layers.0`` (the audio stem): ``Conv2d(1, 96, kernel (4, 4), stride (4, 4),
  padding (4, 0))`` over (time, mel) then a channels-first LayerNorm: 224 mel bins -> 56, T
  frames -> T // 4 + 2;
- ``downsample_layers.1`` .. ``3``: channels-first LayerNorm then ``Conv2d(kernel 2, stride 2)``
  (time and frequency halved, channels 96 -> 192 -> 384 -> 768);
- ``stages.0`` .. ``3``: 3, 3, 9, 3 ConvNeXt blocks of 96, 192, 384, 768 channels, each
  ``dwconv`` (7x7 depthwise, padding 3) -> ``norm`` (LayerNorm over channels) -> ``pwconv1``
  (C -> 4C) -> GELU -> ``pwconv2`` (4C -> C) -> times ``gamma`` (layer scale) -> stochastic
  depth -> plus the block's input;
- ``norm``: the final LayerNorm of the clip vector; ``head_audioset``: the 527-class AudioSet
  head, kept so that the checkpoints load with no key dropped, but not used by the captioner.

As with PANNs (:mod:`captionlib.models.panns`), the authors' front end (torchlibrosa's
``spectrogram_extractor`` and ``logmel_extractor``, the same keys as PANNs', 224 mel bins) is
the features config ``egs/clotho/conf/feats_convnext.yaml`` (stage 2), checked against the
checkpoint by :func:`load_pretrained` rather than loaded; the encoder takes the raw log-mel in
dB. The authors' SpecAugment, mixup and waveform augmentations are not part of the encoder.
"""

from typing import Any, Mapping, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from captionlib.models.encoders import _zero_padding, checkpointed, masked_mean
from captionlib.models.panns import AUDIOSET_CLASSES, load_with_front_end
from captionlib.models.pretrained_load import CheckpointMismatchError
from captionlib.utils.distributed import BatchNorm2d, rows_rand

#: where users get the published checkpoints (named when one is missing: nothing is downloaded)
CHECKPOINT_SOURCE = ("convnext_tiny_465mAP_BL_AC_70kit.pth (CoNeTTE, DCASE 2024 task 6 baseline) or "
                     "convnext_tiny_471mAP.pth of Zenodo record 8020843, https://zenodo.org/record/8020843")
#: the front end the published checkpoints were trained with: the keys of
#: ``egs/clotho/conf/feats_convnext.yaml`` that fix it (tests/captionlib/models/test_convnext.py compares them)
CONVNEXT_FRONT_END = {"fs": 32000, "n_fft": 1024, "win_length_s": 0.032, "hop_length_s": 0.01, "n_mels": 224,
                      "fmin": 50, "fmax": 14000}
CONVNEXT_FEATS_HINT = "egs/clotho/conf/feats_convnext.yaml for the published ConvNeXt checkpoints"
#: the fewest input frames for one output frame: (24 // 4 + 2) // 8 = 1; shorter batches are padded
MIN_FRAMES = 24


class ChannelsFirstLayerNorm(nn.LayerNorm):
    """The authors' ``LayerNorm(data_format="channels_first")``: LayerNorm over the channels of
    (batch, channels, time, freq) (biased variance, ``eps`` inside the square root), the same
    ``weight`` and ``bias`` (channels,)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, channels, time, freq) -> the same shape."""
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class DropPath(nn.Module):
    """Stochastic depth (Huang et al. 2016), as the authors' ``DropPath``: in training, each
    item's residual branch is zeroed with probability ``p`` and the kept ones divided by
    ``1 - p``; the identity in eval mode or with ``p = 0``. Items draw with
    :func:`~captionlib.utils.distributed.rows_rand` (one process's draws across ranks)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, ...) -> the same shape."""
        if not self.training or self.p == 0:
            return x
        keep = 1.0 - self.p
        draw = rows_rand(x.size(0), *([1] * (x.dim() - 1)), dtype=x.dtype, device=x.device)
        return x * (draw < keep).to(x.dtype) / keep


class Block(nn.Module):
    """The authors' ConvNeXt ``Block`` (see the module docstring) on (batch, dim, time, freq).

    Frames beyond each clip's length are zeroed before ``dwconv`` (its only operation across
    time), so a clip's valid outputs are those of the clip alone, whose convolution sees zeros
    past its end.

    Args:
        dim: channels.
        drop_path: stochastic-depth probability of the residual branch.
        layer_scale_init_value: initial value of ``gamma`` (the checkpoints hold it).
    """

    def __init__(self, dim: int, drop_path: float = 0.0, layer_scale_init_value: float = 1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale_init_value))
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """x (batch, dim, time, freq), lengths (batch,) valid frames -> the same shape as x."""
        y = self.dwconv(_zero_padding(x, lengths)).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + self.drop_path(y.permute(0, 3, 1, 2))


def _conv_lengths(lengths: torch.Tensor, conv: nn.Conv2d) -> torch.Tensor:
    """Output frames of ``conv`` (time on its first axis) for input ``lengths`` (batch,)."""
    return (lengths + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[0] + 1


class ConvNeXtEncoder(nn.Module):
    """Audio ConvNeXt (Tiny by default) over log-mel frames: clip vector and frame outputs.

    From the features (batch, frames, n_mels) (stage 2's log-mel in dB of
    ``feats_convnext.yaml``): ``bn0`` over the mel bins, the stem and the four stages, mean over
    frequency, giving (batch, frames', 768); then

    - the frame outputs: those vectors, zero past each clip's valid frames: the last stage
      averaged over frequency, the ``frame_embs`` (batch, 768, frames') that CoNeTTE and the
      DCASE 2024 task 6 baseline take from this model (no final LayerNorm);
    - ``v``, the clip vector: ``norm`` of max plus mean over the clip's valid frames, the
      authors' clip embedding (``forward_features``, the input of ``head_audioset``).

    Time: a clip of L frames gives ``(L // 4 + 2) // 8`` output frames (the stem pads 4 frames
    at each end, then halves three times): one per ``time_subsampling`` = 32 input frames
    (0.32 s at the 10 ms hop), e.g. 31 for a 10 s clip (1001 frames), as the authors' 31.
    A batch of fewer than :data:`MIN_FRAMES` frames is zero-padded to it.

    Padding: a clip's outputs do not depend on the other clips of its batch (in eval mode; in
    training, ``bn0``'s batch statistics include the padding): the frames past its length are
    zeroed after ``bn0`` (the stem then sees what it sees past the end of the clip alone: zero
    padding) and before each ``dwconv``, and left out of the clip pooling. Every other
    operation is per frame, but the downsampling convolutions (kernel = stride = 2), whose
    valid outputs combine valid frames only.

    Args:
        n_mels: mel bins of the input (224 for the published checkpoints; at least 32).
        depths: blocks per stage (Tiny: 3, 3, 9, 3).
        dims: channels per stage (Tiny: 96, 192, 384, 768; ``output_size`` is the last).
        drop_path_rate: stochastic depth, rising linearly from 0 over the blocks to this
            (0 here, as the authors load the checkpoints; their convnext_tiny default: 0.1).
        layer_scale_init_value: initial ``gamma`` of every block.
        classes_num: outputs of the unused ``head_audioset`` (527 for AudioSet).

    Fine-tuning: the training option ``gradient_checkpointing``
    (:func:`~captionlib.models.encoders.set_gradient_checkpointing`) keeps each block's input
    only and runs the block again in the backward pass: the same gradients; on 2 clips of 30 s,
    1.5x less memory at 1.30x the time of a step on a CPU (``bench/bench_gradient_checkpointing.py``).

    Parameters: 28,222,767 with the defaults (the authors' count of ``convnext_tiny`` with the
    [252, 56] stem, front end excluded; the paper's 28.2M), 405,263 of them in ``head_audioset``.

    Raises:
        ValueError: ``n_mels`` < 32 (no frequency bin left after the stem and downsampling) or
            ``depths`` and ``dims`` not of 4 stages.
    """

    time_subsampling = 32
    supports_gradient_checkpointing = True  # captionlib.models.encoders.set_gradient_checkpointing

    def __init__(self, n_mels: int = 224, depths: Sequence[int] = (3, 3, 9, 3),
                 dims: Sequence[int] = (96, 192, 384, 768), drop_path_rate: float = 0.0,
                 layer_scale_init_value: float = 1e-6, classes_num: int = AUDIOSET_CLASSES):
        super().__init__()
        self.gradient_checkpointing = False  # captionlib.models.encoders.set_gradient_checkpointing
        if n_mels < 32:
            raise ValueError(f"ConvNeXtEncoder divides frequency by 32: needs n_mels >= 32, got {n_mels}")
        if len(depths) != 4 or len(dims) != 4:
            raise ValueError(f"ConvNeXtEncoder has 4 stages: got depths {list(depths)}, dims {list(dims)}")
        self.bn0 = BatchNorm2d(n_mels)
        stem = nn.Conv2d(1, dims[0], kernel_size=(4, 4), stride=(4, 4), padding=(4, 0))
        self.downsample_layers = nn.ModuleList([nn.Sequential(stem, ChannelsFirstLayerNorm(dims[0], eps=1e-6))])
        for i in range(3):
            self.downsample_layers.append(nn.Sequential(
                ChannelsFirstLayerNorm(dims[i], eps=1e-6), nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2)))
        rates = torch.linspace(0, drop_path_rate, sum(depths), device="cpu").tolist()
        starts = [sum(depths[:i]) for i in range(4)]
        self.stages = nn.ModuleList(
            nn.ModuleList(Block(dims[i], rates[starts[i] + j], layer_scale_init_value) for j in range(depths[i]))
            for i in range(4))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head_audioset = nn.Linear(dims[-1], classes_num)  # AudioSet head: loaded, not used
        self.output_size = self.cnn_output_size = dims[-1]
        for m in self.modules():  # the authors' _init_weights: truncated normal (std 0.02), zero biases
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def _stage_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Valid frames after the stem and the three downsamplings, for ``lengths`` (batch,)."""
        for i, layer in enumerate(self.downsample_layers):
            lengths = _conv_lengths(lengths, layer[0] if i == 0 else layer[1])
        return lengths

    def output_lengths(self, lengths: torch.Tensor, frames: int) -> torch.Tensor:
        """Valid frames (batch,) of the frame outputs for input ``lengths`` (batch,) of a batch
        padded to ``frames``: ``(L // 4 + 2) // 8`` for each clip's L frames (the output
        frames of the clip alone), at least 1; the batch has that of ``max(frames,
        MIN_FRAMES)``."""
        return self._stage_lengths(lengths.clamp(min=1, max=max(frames, MIN_FRAMES))).clamp(min=1)

    def conv_frames(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``bn0``, the stem and the stages, averaged over frequency.

        Args:
            feats: (batch, frames, n_mels) log-mel in dB.
            lengths: (batch,) valid frames per clip.

        Returns:
            (batch, frames', output_size), not zeroed past the lengths, and the valid lengths
            (batch,) (:meth:`output_lengths`).
        """
        short = MIN_FRAMES - feats.size(1)
        if short > 0:
            feats = F.pad(feats, (0, 0, 0, short))
        x = self.bn0(feats.transpose(1, 2).unsqueeze(-1)).permute(0, 3, 2, 1)  # (B, 1, T, n_mels)
        lens = lengths.clamp(min=1, max=feats.size(1))
        x = _zero_padding(x, lens)
        for i, (down, stage) in enumerate(zip(self.downsample_layers, self.stages)):
            x = down(x)
            lens = _conv_lengths(lens, down[0] if i == 0 else down[1])
            for block in stage:
                x = checkpointed(block, x, lens, enabled=self.gradient_checkpointing)
        return x.mean(dim=3).transpose(1, 2), lens.clamp(min=1)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encode log-mel features.

        Args:
            feats: (batch, frames, n_mels); lengths: (batch,) valid frames per clip.

        Returns:
            ``v`` (batch, output_size) and the frame outputs (batch, frames', output_size),
            zero beyond :meth:`output_lengths`.
        """
        return self.forward_with_cnn(feats, lengths)[:2]

    def forward_with_cnn(self, feats: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` plus the frame outputs averaged over each clip's valid frames,
        (batch, output_size): the attribute-branch input of seed 004."""
        x, lens = self.conv_frames(feats, lengths)
        valid = (torch.arange(x.size(1), device=x.device)[None, :] < lens[:, None])[..., None]  # (B, T', 1)
        cnn = masked_mean(x, lens)
        v = self.norm(x.masked_fill(~valid, float("-inf")).amax(dim=1) + cnn)
        return v, x * valid.to(x.dtype), cnn


def is_conette_rename(error: CheckpointMismatchError) -> bool:
    """Whether a mismatch is exactly CoNeTTE's rename of the layer scales: every missing key is
    a block's ``gamma`` and every unexpected one the same key with ``scale_layer`` instead (its
    ``ConvNeXtBlock`` renames ``gamma`` when it loads the published checkpoint, so a state dict
    it saves has the new name), nothing mis-shaped."""
    return bool(error.missing) and not error.mis_shaped and all(k.endswith(".gamma") for k in error.missing) \
        and sorted(error.unexpected) == sorted(k[: -len("gamma")] + "scale_layer" for k in error.missing)


def load_pretrained(encoder: ConvNeXtEncoder, path: str, feats_config: Mapping[str, Any]) -> None:
    """Load an audio ConvNeXt checkpoint (the authors' layout: ``{"model": state_dict, ...}``,
    the ``"model"`` entry the DCASE 2024 baseline reads) strictly.

    As :func:`captionlib.models.panns.load_pretrained`: every encoder key (``head_audioset``
    included) must be in the checkpoint with the encoder's shape, the torchlibrosa front-end
    keys (:data:`captionlib.models.panns.FRONT_END_KEYS`) too, compared with the features
    config's front end (224 mel bins for ``feats_convnext.yaml``) and not loaded; any other
    key is an error; nothing is loaded unless all checks pass.

    Args:
        encoder: a :class:`ConvNeXtEncoder` (parameters are overwritten).
        path: the checkpoint, e.g. ``convnext_tiny_465mAP_BL_AC_70kit.pth``
            (https://zenodo.org/record/8020843).
        feats_config: the features config the encoder's input is dumped with (``fs`` required).

    Raises:
        FileNotFoundError: no such file (the message names :data:`CHECKPOINT_SOURCE`).
        CheckpointMismatchError: (a ValueError) missing, unexpected or mis-shaped keys, all listed;
            when they are exactly CoNeTTE's rename of ``gamma`` to ``scale_layer``
            (:func:`is_conette_rename`), one line saying so and how to rename them back.
        FrontEndMismatchError: (a ValueError) the checkpoint's mel matrix or STFT kernels
            differ from the features config's, naming the file.
        ValueError: an unreadable or unsafe file, not a state dict, or no ``fs`` in the config.
    """
    try:
        load_with_front_end(encoder, path, feats_config, CHECKPOINT_SOURCE, CONVNEXT_FEATS_HINT, CONVNEXT_FRONT_END)
    except CheckpointMismatchError as e:
        if is_conette_rename(e):
            raise e.reworded(
                f"{path}: the checkpoint does not match ConvNeXtEncoder (nothing was loaded): it looks like a CoNeTTE "
                f"re-save, whose ConvNeXtBlock renames the published layer scales <block>.gamma to "
                f"<block>.scale_layer ({len(e.unexpected)} keys, {e.unexpected[0]} ...): rename every "
                f"'stages.<i>.<j>.scale_layer' key back to 'stages.<i>.<j>.gamma' (e.g. {{k.replace('.scale_layer', "
                f"'.gamma'): v for k, v in state.items()}}) and save the file again") from None
        raise
