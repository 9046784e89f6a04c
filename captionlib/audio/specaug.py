"""SpecAugment time and frequency masking for padded feature batches.

Reference: D. S. Park, W. Chan, Y. Zhang, C.-C. Chiu, B. Zoph, E. D. Cubuk,
Q. V. Le, "SpecAugment: A Simple Data Augmentation Method for Automatic Speech
Recognition", Interspeech 2019 (arXiv:1904.08779). Time warping is not
implemented. The seed system (``seeds/000``, post-challenge) uses time masks of
at most T=50 frames and frequency masks of at most F=10 bins.
"""

from typing import Optional

import torch
from torch import nn

from captionlib.utils.distributed import rows_rand


class SpecAugment(nn.Module):
    """Time and frequency masking, active only in training mode (``module.train()``).

    For every clip ``b`` and each of ``num_time_masks`` masks, a width ``t`` is
    drawn uniformly from ``[0, min(time_mask_width, lengths[b])]`` and a start
    ``t0`` uniformly from ``[0, lengths[b] - t]``; frames ``[t0, t0 + t)`` are set to
    ``mask_value``. So masks never touch the padding beyond a clip's valid
    length, and each clip gets its own masks. Frequency masks likewise draw a width
    from ``[0, freq_mask_width]`` and a start from ``[0, n_mels - f]`` per clip and
    mask those bins over the clip's valid frames. With normalised features the
    default ``mask_value=0.0`` is the (global) mean, as in Park et al.

    Args:
        num_time_masks: masks along time per clip.
        time_mask_width: maximum width T of a time mask, in frames.
        num_freq_masks: masks along frequency per clip.
        freq_mask_width: maximum width F of a frequency mask, in bins.
        mask_value: value written into masked cells.

    Shape:
        - x: ``(batch, frames, n_mels)``
        - lengths: ``(batch,)`` valid frames per clip (``None``: all frames valid)
        - output: same shape as ``x`` (a new tensor; ``x`` is not modified).

    Example:
        >>> aug = SpecAugment(num_time_masks=2, time_mask_width=50, num_freq_masks=2, freq_mask_width=10)
        >>> y = aug(x, lengths)      # in train mode; identity in eval mode
    """

    def __init__(
        self,
        num_time_masks: int = 2,
        time_mask_width: int = 50,
        num_freq_masks: int = 2,
        freq_mask_width: int = 10,
        mask_value: float = 0.0,
    ) -> None:
        super().__init__()
        if min(num_time_masks, time_mask_width, num_freq_masks, freq_mask_width) < 0:
            raise ValueError("SpecAugment mask counts and widths must be >= 0")
        self.num_time_masks = num_time_masks
        self.time_mask_width = time_mask_width
        self.num_freq_masks = num_freq_masks
        self.freq_mask_width = freq_mask_width
        self.mask_value = mask_value

    def extra_repr(self) -> str:
        return (
            f"num_time_masks={self.num_time_masks}, time_mask_width={self.time_mask_width}, "
            f"num_freq_masks={self.num_freq_masks}, freq_mask_width={self.freq_mask_width}"
        )

    @staticmethod
    def _bands(extent: torch.Tensor, max_width: int, num: int, size: int) -> torch.Tensor:
        """Boolean ``(batch, size)``: union of ``num`` random bands inside ``[0, extent[b])``."""
        batch = extent.shape[0]
        device = extent.device
        max_w = torch.clamp(extent, max=max_width)  # (batch,)
        # width uniform in [0, max_w], start uniform in [0, extent - width]
        width = torch.floor(rows_rand(batch, num, device=device) * (max_w[:, None] + 1).float()).long()
        start = torch.floor(
            rows_rand(batch, num, device=device) * (extent[:, None] - width + 1).float()
        ).long()
        pos = torch.arange(size, device=device)[None, None, :]
        band = (pos >= start[:, :, None]) & (pos < (start + width)[:, :, None])
        return band.any(dim=1)

    def forward(self, x: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Mask ``x`` (batch, frames, n_mels) within ``lengths`` (batch,); identity in eval mode."""
        if x.dim() != 3:
            raise ValueError(f"SpecAugment expects (batch, frames, n_mels), got shape {tuple(x.shape)}")
        if not self.training:
            return x
        batch, frames, n_mels = x.shape
        if lengths is None:
            lengths = torch.full((batch,), frames, dtype=torch.long, device=x.device)
        lengths = torch.clamp(lengths.to(device=x.device, dtype=torch.long), min=0, max=frames)
        valid = torch.arange(frames, device=x.device)[None, :] < lengths[:, None]  # (batch, frames)
        mask = torch.zeros(batch, frames, n_mels, dtype=torch.bool, device=x.device)
        if self.num_time_masks > 0 and self.time_mask_width > 0:
            tmask = self._bands(lengths, self.time_mask_width, self.num_time_masks, frames)
            mask |= tmask[:, :, None]
        if self.num_freq_masks > 0 and self.freq_mask_width > 0:
            full = torch.full((batch,), n_mels, dtype=torch.long, device=x.device)
            fmask = self._bands(full, self.freq_mask_width, self.num_freq_masks, n_mels)
            mask |= fmask[:, None, :] & valid[:, :, None]
        return x.masked_fill(mask, self.mask_value)
