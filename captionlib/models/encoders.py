"""Audio encoders.

:class:`CRNNEncoder` is the encoder of seed 000 (Xu et al., "A CRNN-GRU based
reinforcement learning approach to audio captioning", DCASE 2020, Fig. 1 / sec. 2.1).
"""

from typing import Tuple

import torch
from torch import nn


def _conv_block(in_ch: int, out_ch: int) -> nn.Sequential:
    """BatchNorm -> 3x3 conv (padding 1) -> LeakyReLU(0.1), as in seed 000 Fig. 1."""
    return nn.Sequential(
        nn.BatchNorm2d(in_ch),
        nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1),
        nn.LeakyReLU(0.1, inplace=True),
    )


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


class CRNNEncoder(nn.Module):
    """CRNN encoder: 5 conv layers in 3 blocks with L4-norm pooling, BiGRU, masked mean.

    Blocks (channels): [32] | [128, 128] | [128, 128]; after each block an LPPool2d(p=4)
    with (time, freq) kernels (2, 4), (2, 4), (1, 4): time is subsampled by 4 and 64 mel
    bins pool to 1. Dropout 0.3, BiGRU with 128 units per direction, then a masked mean
    over time (seed 000's global average pooling) gives ``v`` of size 256. With
    ``n_mels=64`` it has 679,042 parameters (seed 000: "679k").

    Args:
        n_mels: feature dimension; must be divisible by 64 (the three frequency pools).
        dropout: dropout before the BiGRU.
        rnn_units: GRU units per direction (output size is twice this).
    """

    time_subsampling = 4

    def __init__(self, n_mels: int = 64, dropout: float = 0.3, rnn_units: int = 128):
        super().__init__()
        if n_mels % 64 != 0:
            raise ValueError(f"CRNNEncoder needs n_mels divisible by 64, got {n_mels}")
        self.cnn = nn.Sequential(
            _conv_block(1, 32),
            nn.LPPool2d(4, (2, 4)),
            _conv_block(32, 128),
            _conv_block(128, 128),
            nn.LPPool2d(4, (2, 4)),
            _conv_block(128, 128),
            _conv_block(128, 128),
            nn.LPPool2d(4, (1, 4)),
            nn.Dropout(dropout),
        )
        rnn_in = 128 * (n_mels // 64)
        self.rnn = nn.GRU(rnn_in, rnn_units, batch_first=True, bidirectional=True)
        self.output_size = 2 * rnn_units

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encode a batch of (normalised) log-mel features.

        Args:
            feats: (batch, frames, n_mels); frames should be at least 4.
            lengths: (batch,) valid frames per clip.

        Returns:
            ``v`` (batch, 256) clip embedding and the frame-level outputs
            (batch, frames // 4, 256), zero beyond each clip's ``lengths // 4`` frames.
        """
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
        t_out = x.size(1)
        out_lens = lens.clamp(min=1, max=t_out)
        # packed: the backward direction starts at each clip's own last frame, so a clip's
        # embedding does not depend on the padding its batch-mates impose
        packed = nn.utils.rnn.pack_padded_sequence(x, out_lens.cpu(), batch_first=True, enforce_sorted=False)
        x, _ = self.rnn(packed)
        x, _ = nn.utils.rnn.pad_packed_sequence(x, batch_first=True, total_length=t_out)
        return masked_mean(x, out_lens), x
