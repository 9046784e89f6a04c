"""Encoders of (batch, frames, dim) feature matrices, chosen by ``encoder:`` in the config.

Every encoder maps features (batch, frames, input_size) and their lengths (batch,) to a clip
vector ``v`` (batch, output_size) and frame-level outputs (batch, frames', output_size), and
gives the valid lengths of those outputs through ``output_lengths``; the frame outputs are the
memory of an attention decoder. The modality is only in the features (log-mel frames, image
regions or grid cells, video frames), not here.

- :class:`CRNNEncoder` (``crnn``): seed 000's audio encoder (Xu et al., "A CRNN-GRU based
  reinforcement learning approach to audio captioning", DCASE 2020, Fig. 1 / sec. 2.1).
- :class:`LinearEncoder` (``linear``): a learned projection of each frame/region, mean-pooled
  for ``v``: the image embedding of Show-and-Tell (Vinyals et al. 2015; seeds 002, 003) on a
  pooled CNN vector, and the region projection of Top-Down attention (Anderson et al. 2018;
  seed 001) on regions or grid cells.
- :class:`RNNEncoder` (``rnn``): a projection then an LSTM/GRU over frames, ``v`` its last
  valid state: the temporal encoder of S2VT (Venugopalan et al. 2015) used by seed 004.
"""

import contextlib
from typing import Any, Sequence, Tuple

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from captionlib.utils.distributed import BatchNorm2d, Dropout, replay_row_state

_GRU_WEIGHTS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def _conv_block(in_ch: int, out_ch: int) -> nn.Sequential:
    """BatchNorm -> 3x3 conv (padding 1) -> LeakyReLU(0.1), as in seed 000 Fig. 1."""
    return nn.Sequential(
        BatchNorm2d(in_ch),
        nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1),
        nn.LeakyReLU(0.1, inplace=True),
    )


class _L4PoolFunction(torch.autograd.Function):
    """``(sum of x ** 4 over each window) ** (1 / 4)`` with the powers taken as products."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, kernel: Tuple[int, int]) -> torch.Tensor:
        x4 = x * x
        x4.mul_(x4)
        out = F.avg_pool2d(x4, kernel).mul_(kernel[0] * kernel[1]).sqrt_().sqrt_()
        ctx.save_for_backward(x, out)
        ctx.kernel = kernel
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, out = ctx.saved_tensors
        # d out / d x = x ** 3 / out ** 3 inside each window; 0 where a window is all zeros (as torch's)
        per_window = torch.where(out > 0, grad / (out * out * out), 0)
        up = F.interpolate(per_window, scale_factor=ctx.kernel, mode="nearest")
        if up.shape != x.shape:  # the rows and columns a window does not cover (no ceil mode)
            up = F.pad(up, (0, x.size(3) - up.size(3), 0, x.size(2) - up.size(2)))
        return up.mul_(x).mul_(x).mul_(x), None


class L4Pool2d(nn.LPPool2d):
    """L4-norm pooling: ``nn.LPPool2d(4, kernel_size)`` (stride = kernel, no padding, no ceil
    mode), the same outputs and gradients to float rounding, in less time.

    ``F.lp_pool2d`` takes ``x.pow(4)`` (a general power on every element) and differentiates
    it through ``pow(x, 3)``; here the power is two products and the backward pass one fused
    chain of products, so on the CRNN's first feature maps (batch 32, 32 channels, 1479
    frames, 64 bins) forward and backward take about 0.6x the time on the CPU. A window of
    zeros gets a zero gradient, as with ``nn.LPPool2d``. Not twice differentiable.

    Half-precision inputs (fp16, bf16: mixed precision) are pooled in float32, where the fourth
    powers cannot overflow, as CUDA autocast runs ``pow`` for ``nn.LPPool2d``; the output is then
    float32.

    Shapes: (batch, channels, time, freq) -> (batch, channels, time // kt, freq // kf).

    Args:
        kernel_size: (kt, kf) window, also the stride.
    """

    def __init__(self, kernel_size: Tuple[int, int]):
        super().__init__(4, tuple(kernel_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in (torch.float16, torch.bfloat16):
            x = x.float()
        return _L4PoolFunction.apply(x, self.kernel_size)


def _zero_padding(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Zero the frames of (batch, channels, time, freq) beyond each item's length."""
    valid = torch.arange(x.size(2), device=x.device)[None, :] < lengths[:, None]
    return x * valid[:, None, :, None].to(x.dtype)


def masked_mean(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean over time of the valid frames.

    Args:
        x: (batch, time, dim).
        lengths: (batch,) valid frames per item (>= 1).

    Returns:
        (batch, dim).
    """
    mask = (torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]).to(x.dtype)
    return (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)


def checkpointed(module: nn.Module, *args: torch.Tensor, enabled: bool = True) -> Any:
    """``module(*args)``, with activation checkpointing where ``enabled`` and gradients are
    recorded: only the inputs are kept for the backward pass, which runs the module again to
    get its activations (``torch.utils.checkpoint``, non-reentrant; Chen et al., "Training deep
    nets with sublinear memory cost", 2016). It trades one more forward pass of the module for its activation
    memory: the training option ``gradient_checkpointing`` (:func:`set_gradient_checkpointing`),
    for fine-tuning the pretrained Transformer and ConvNeXt encoders on long clips.

    The recomputation draws what the forward pass drew: the checkpoint restores torch's
    generator states (CPU and the input's device) and autocast, and this re-enters the row
    state of :mod:`captionlib.utils.distributed` (row-sharded dropout under several ranks),
    so gradients equal those without checkpointing. Not ``enabled``, or without gradients
    (``torch.no_grad``, or nothing in the call requires them: a frozen encoder), it is the
    plain call.

    Not for modules with BatchNorm in training mode: the recomputation would update its
    running statistics a second time.
    """
    needs_grad = enabled and torch.is_grad_enabled() and (any(p.requires_grad for p in module.parameters()) or any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args))
    if not needs_grad:
        return module(*args)
    return checkpoint(module, *args, use_reentrant=False,
                      context_fn=lambda: (contextlib.nullcontext(), replay_row_state()))


def check_gradient_checkpointing(encoder_cls: type) -> None:
    """Check that encoders of class ``encoder_cls`` take the training option
    ``gradient_checkpointing`` (their class attribute ``supports_gradient_checkpointing``, as
    in Hugging Face's models).

    Raises:
        ValueError: it does not, naming the class (PANNs' CNNs: their BatchNorm layers would
            update their statistics twice).
    """
    if not getattr(encoder_cls, "supports_gradient_checkpointing", False):
        raise ValueError(f"gradient_checkpointing: the encoder {encoder_cls.__name__} has no layers it can run again "
                         "in the backward pass (encoders with it: beats, convnext)")


def set_gradient_checkpointing(encoder: nn.Module, on: bool = True) -> None:
    """Turn activation checkpointing (:func:`checkpointed`) of ``encoder``'s layers on or off:
    every submodule with a ``gradient_checkpointing`` attribute (BEATs' layer stack, the audio
    ConvNeXt) gets ``on``. A training setting, not an encoder option: the model files and
    ``model_conf`` do not hold it, and the gradients are the same either way.

    Raises:
        ValueError: ``on`` and the encoder does not support it (:func:`check_gradient_checkpointing`).
    """
    if on:
        check_gradient_checkpointing(type(encoder))
    for m in encoder.modules():
        if hasattr(m, "gradient_checkpointing"):
            m.gradient_checkpointing = on


def reverse_within_lengths(lengths: torch.Tensor, frames: int) -> torch.Tensor:
    """Time index (batch, frames) that reverses each item's first ``lengths`` frames and
    leaves its padding in place; it is its own inverse."""
    t = torch.arange(frames, device=lengths.device)[None, :]
    return torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)


class _DirectionGRU(nn.GRU):
    """A unidirectional ``nn.GRU`` run (``functional_call``) with one direction's weights of a
    :class:`BatchIndependentBiGRU`. On CUDA, ``nn.GRU`` re-homes new weights into a flat
    buffer of its own (``flatten_parameters``) on every call with other weights; here that
    would move the owner's parameters out of the owner's flat cuDNN buffer, so it is off."""

    def flatten_parameters(self) -> None:
        """No-op: the weights belong to (and are flattened by) the bidirectional owner."""


class BatchIndependentBiGRU(nn.GRU):
    """One-layer bidirectional GRU over padded batches whose outputs do not depend on the
    padding, without packing.

    The forward direction runs on the padded input (it is causal, so padding after a clip
    cannot reach the clip's frames); the backward direction runs forward over each clip
    reversed within its own length, so it starts at the clip's own last frame, as a packed
    sequence would. Outputs beyond each length are zero, as ``pad_packed_sequence`` gives.
    Trains several times faster than the packed ``nn.GRU`` on CPU (see ``bench/bench_train.py``);
    ``impl="packed"`` keeps the packed path for comparison. It is an
    ``nn.GRU(batch_first=True, bidirectional=True)`` with the same parameters
    (``weight_ih_l0``, ..., ``weight_ih_l0_reverse``, ...), so state dicts are unchanged.

    Args:
        input_size, hidden_size: as ``nn.GRU``; the output has ``2 * hidden_size`` features.
        impl: ``split`` (two unidirectional passes) or ``packed``.

    Raises:
        ValueError: unknown ``impl``.
    """

    def __init__(self, input_size: int, hidden_size: int, impl: str = "split"):
        if impl not in ("split", "packed"):
            raise ValueError(f"bigru must be split or packed, got {impl!r}")
        super().__init__(input_size, hidden_size, batch_first=True, bidirectional=True)
        self.impl = impl
        # a unidirectional template run with either direction's weights (not a submodule:
        # its own parameters are never used, and the state-dict keys stay nn.GRU's)
        object.__setattr__(self, "_direction", _DirectionGRU(input_size, hidden_size, batch_first=True))

    def _run(self, x: torch.Tensor, suffix: str) -> torch.Tensor:
        weights = {name: getattr(self, name + suffix) for name in _GRU_WEIGHTS}
        return functional_call(self._direction, weights, (x,))[0]

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """Args: x (batch, frames, input_size), lengths (batch,) in 1..frames.
        Returns: (batch, frames, 2 * hidden_size), zero beyond each length."""
        frames = x.size(1)
        if bool((lengths == frames).all()):  # no padding: one bidirectional call
            return super().forward(x)[0]
        if self.impl == "packed":
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = nn.utils.rnn.pad_packed_sequence(super().forward(packed)[0], batch_first=True, total_length=frames)
            return out
        index = reverse_within_lengths(lengths, frames)
        backward = self._run(x.gather(1, index[..., None].expand_as(x)), "_reverse")
        backward = backward.gather(1, index[..., None].expand_as(backward))
        valid = (torch.arange(frames, device=x.device)[None, :] < lengths[:, None]).to(x.dtype)
        return torch.cat([self._run(x, ""), backward], dim=-1) * valid[..., None]


class CRNNEncoder(nn.Module):
    """CRNN encoder: 5 conv layers in 3 blocks with L4-norm pooling, BiGRU, masked mean.

    Blocks (channels): [32] | [128, 128] | [128, 128]; after each block an LPPool2d(p=4)
    with (time, freq) kernels (2, 4), (2, 4), (1, 4): time is subsampled by 4 and 64 mel
    bins pool to 1. Dropout 0.3, BiGRU with 128 units per direction, then a masked mean
    over time (seed 000's global average pooling) gives ``v`` of size 256. With
    ``n_mels=64`` it has 679,042 parameters (seed 000: "679k").

    :meth:`forward_with_cnn` also returns the CNN output averaged over time before the
    BiGRU (the input of seed 004's attribute branch, Fig. 2), of size
    ``cnn_output_size = channels[4] * n_mels // prod(freq_pooling)`` (128 for the defaults).

    ``channels`` and ``freq_pooling`` make narrower encoders for small corpora and CPU
    budgets (e.g. ``egs/soundscapes``); the defaults are seed 000's.

    Args:
        n_mels: feature dimension; must be divisible by the product of ``freq_pooling``.
        dropout: dropout before the BiGRU.
        rnn_units: GRU units per direction (output size is twice this).
        channels: output channels of the 5 conv layers (blocks [c1] | [c2, c3] | [c4, c5]).
        freq_pooling: frequency kernels of the 3 pooling layers.
        bigru: ``split`` (default) or ``packed``, see :class:`BatchIndependentBiGRU`; the
            two give the same outputs (to float rounding) and the same state dict.

    Raises:
        ValueError: ``n_mels`` not divisible by the frequency pooling, or not 5 channels /
            3 pooling kernels.
    """

    time_subsampling = 4

    def __init__(
        self,
        n_mels: int = 64,
        dropout: float = 0.3,
        rnn_units: int = 128,
        channels: Sequence[int] = (32, 128, 128, 128, 128),
        freq_pooling: Sequence[int] = (4, 4, 4),
        bigru: str = "split",
    ):
        super().__init__()
        channels, freq_pooling = list(channels), list(freq_pooling)
        if len(channels) != 5 or len(freq_pooling) != 3:
            raise ValueError(f"CRNNEncoder needs 5 channels and 3 freq_pooling kernels, got {channels}, {freq_pooling}")
        pool = freq_pooling[0] * freq_pooling[1] * freq_pooling[2]
        if n_mels % pool != 0:
            raise ValueError(f"CRNNEncoder needs n_mels divisible by {pool} (freq_pooling {freq_pooling}), "
                             f"got {n_mels}")
        c1, c2, c3, c4, c5 = channels
        self.cnn = nn.Sequential(
            _conv_block(1, c1),
            L4Pool2d((2, freq_pooling[0])),
            _conv_block(c1, c2),
            _conv_block(c2, c3),
            L4Pool2d((2, freq_pooling[1])),
            _conv_block(c3, c4),
            _conv_block(c4, c5),
            L4Pool2d((1, freq_pooling[2])),
            Dropout(dropout),
        )
        # channels-last convolution weights make the oneDNN (CPU) and cuDNN kernels run on
        # channels-last activations: the conv stack trains ~1.2x faster on CPU
        # (bench/bench_train.py); load_state_dict copies into these tensors, keeping the layout
        self.cnn.to(memory_format=torch.channels_last)
        rnn_in = c5 * (n_mels // pool)
        self.rnn = BatchIndependentBiGRU(rnn_in, rnn_units, impl=bigru)
        self.output_size = 2 * rnn_units
        self.cnn_output_size = rnn_in

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encode a batch of (normalised) log-mel features.

        Args:
            feats: (batch, frames, n_mels); frames should be at least 4.
            lengths: (batch,) valid frames per clip.

        Returns:
            ``v`` (batch, 2 * rnn_units) clip embedding and the frame-level outputs
            (batch, frames // 4, 2 * rnn_units), zero beyond each clip's ``lengths // 4`` frames.
        """
        x, out_lens = self._cnn_frames(feats, lengths)
        # the backward direction starts at each clip's own last frame, so a clip's embedding
        # does not depend on the padding its batch-mates impose
        x = self.rnn(x, out_lens)
        return masked_mean(x, out_lens), x

    def output_lengths(self, lengths: torch.Tensor, frames: int) -> torch.Tensor:
        """Valid frames (batch,) of the frame-level outputs for input ``lengths`` (batch,) of a
        batch padded to ``frames``: ``lengths // 4`` clamped to [1, frames // 4]."""
        return (lengths // self.time_subsampling).clamp(min=1, max=max(frames // self.time_subsampling, 1))

    def forward_with_cnn(
        self, feats: torch.Tensor, lengths: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`forward` plus the time-pooled CNN features, from the same CNN pass.

        Args:
            feats: (batch, frames, n_mels); lengths: (batch,), as :meth:`forward`.

        Returns:
            ``v`` and the frame-level outputs as :meth:`forward`, and the CNN output (after
            its dropout, before the BiGRU) averaged over each clip's valid ``lengths // 4``
            frames (at least 1), padding frames excluded: (batch, cnn_output_size), the
            input of seed 004's attribute branch ("temporal average pooling", sec. 3.1).
        """
        x, out_lens = self._cnn_frames(feats, lengths)
        cnn = masked_mean(x, out_lens)
        x = self.rnn(x, out_lens)
        return masked_mean(x, out_lens), x, cnn

    def _cnn_frames(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """CNN stack: (batch, frames, n_mels) -> frames (batch, frames // 4, cnn_output_size)
        and their valid lengths (batch,) clamped to [1, frames // 4]."""
        x, lens = feats.unsqueeze(1), lengths
        for layer in self.cnn:
            if isinstance(layer, nn.Sequential):  # BatchNorm -> conv -> LeakyReLU
                bn, conv, act = layer
                # zero the padded frames after BatchNorm's shift, so the 3x3 convolutions see
                # the same zeros at a clip's end whether or not the batch pads it
                x = act(conv(_zero_padding(bn(x), lens)))
            else:
                x = layer(x)
                if isinstance(layer, nn.LPPool2d):
                    lens = lens // layer.kernel_size[0]
        x = x.permute(0, 2, 1, 3).flatten(2)  # (B, T/4, C*F')
        return x, lens.clamp(min=1, max=x.size(1))


class LinearEncoder(nn.Module):
    """Projection of each frame/region: Linear -> ReLU -> dropout; ``v`` is the masked mean.

    On a pooled CNN vector (1 frame) this is the image embedding of Show-and-Tell (Vinyals et
    al. 2015, sec. 3.1: a linear map of the CNN output; seeds 002 and 003), with a ReLU and
    dropout added as in self-critical.pytorch's ``fc_embed``; on regions or grid cells it is
    the feature embedding of Top-Down attention in self-critical.pytorch (``att_embed``:
    Linear -> ReLU -> dropout before the attention of Anderson et al. 2018; seed 001), whose
    decoder attends over the frame outputs.

    Args:
        input_size: feature dimension D (e.g. 2048 for ResNet-152 / bottom-up regions).
        output_size: projection size (the decoder's ``embed_size`` for GRU/LSTM decoders).
        dropout: dropout after the ReLU.
    """

    time_subsampling = 1

    def __init__(self, input_size: int, output_size: int = 512, dropout: float = 0.5):
        super().__init__()
        self.proj = nn.Linear(input_size, output_size)
        self.dropout = Dropout(dropout)
        self.output_size = output_size
        self.cnn_output_size = output_size

    def output_lengths(self, lengths: torch.Tensor, frames: int) -> torch.Tensor:
        """Valid output frames (batch,): the input ``lengths`` clamped to [1, frames]."""
        return lengths.clamp(min=1, max=frames)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: feats (batch, frames, input_size), lengths (batch,).
        Returns: ``v`` (batch, output_size) and frame outputs (batch, frames, output_size),
        zero beyond each length."""
        lens = self.output_lengths(lengths, feats.size(1))
        valid = (torch.arange(feats.size(1), device=feats.device)[None, :] < lens[:, None]).to(feats.dtype)
        x = self.dropout(torch.relu(self.proj(feats))) * valid[..., None]
        return masked_mean(x, lens), x

    def forward_with_cnn(self, feats: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` plus the temporally pooled projected features (batch, output_size),
        here equal to ``v`` (the attribute-branch input of seed 004, sec. 3.1)."""
        v, x = self.forward(feats, lengths)
        return v, x, v


class RNNEncoder(nn.Module):
    """Projection then a one-directional LSTM (or GRU) over frames; ``v`` is the state at each
    clip's last valid frame.

    S2VT's encoding phase (Venugopalan et al. 2015; seed 004 sec. 3.1: CNN frame features
    -> a fully connected layer of 500 -> LSTMs with 1000 units). S2VT shares its two LSTM
    layers between encoding and decoding; here the encoder's last state is ``v``, which the
    decoder receives as its first input (and its initial state with ``init_state: audio``).
    Being causal, the outputs of a clip do not depend on the padding of its batch.

    Args:
        input_size: feature dimension D (1536 for Inception-ResNet-v2 pooled frames).
        proj_size: size of the frame projection (0: none).
        hidden_size: RNN units (``output_size``).
        num_layers: stacked RNN layers.
        cell: ``lstm`` or ``gru``.
        dropout: dropout on the projected frames.

    Raises:
        ValueError: unknown ``cell``.
    """

    time_subsampling = 1

    def __init__(
        self,
        input_size: int,
        proj_size: int = 500,
        hidden_size: int = 1000,
        num_layers: int = 1,
        cell: str = "lstm",
        dropout: float = 0.2,
    ):
        super().__init__()
        if cell not in ("lstm", "gru"):
            raise ValueError(f"RNNEncoder cell must be lstm or gru, got {cell!r}")
        self.proj = nn.Linear(input_size, proj_size) if proj_size > 0 else None
        self.dropout = Dropout(dropout)
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.cnn_output_size = proj_size if proj_size > 0 else input_size
        self.rnn = rnn(self.cnn_output_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.output_size = hidden_size

    output_lengths = LinearEncoder.output_lengths

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: feats (batch, frames, input_size), lengths (batch,).
        Returns: ``v`` (batch, hidden_size), the output at each clip's last valid frame, and
        the frame outputs (batch, frames, hidden_size), zero beyond each length."""
        return self.forward_with_cnn(feats, lengths)[:2]

    def forward_with_cnn(self, feats: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` plus the projected frame features averaged over each clip's valid
        frames (batch, ``cnn_output_size``): seed 004's attribute-branch input ("temporal
        average pooling" of the CNN + fully connected frame features, sec. 3.1)."""
        lens = self.output_lengths(lengths, feats.size(1))
        x = feats if self.proj is None else torch.relu(self.proj(feats))
        frames_mean = masked_mean(x, lens)
        out, _ = self.rnn(self.dropout(x))
        valid = (torch.arange(out.size(1), device=out.device)[None, :] < lens[:, None]).to(out.dtype)
        out = out * valid[..., None]
        v = out[torch.arange(out.size(0), device=out.device), lens - 1]
        return v, out, frames_mean
