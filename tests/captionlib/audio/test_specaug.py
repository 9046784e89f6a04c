"""Tests of captionlib.audio.specaug.SpecAugment (Park et al. 2019 masking)."""

import pytest
import torch

from captionlib.audio.specaug import SpecAugment

PAD = 7.0


def _batch(lengths, frames=120, n_mels=64):
    x = torch.full((len(lengths), frames, n_mels), PAD)
    for b, n in enumerate(lengths):
        x[b, :n] = 1.0
    return x, torch.tensor(lengths)


def test_eval_mode_is_identity():
    aug = SpecAugment().eval()
    x, lengths = _batch([120, 50])
    assert torch.equal(aug(x, lengths), x)


def test_masks_stay_inside_valid_frames_and_input_untouched():
    torch.manual_seed(0)
    aug = SpecAugment(num_time_masks=2, time_mask_width=50, num_freq_masks=2, freq_mask_width=10).train()
    lengths = [120, 37, 5, 1, 0]
    masked_somewhere = 0
    for _ in range(100):
        x, lens = _batch(lengths)
        x0 = x.clone()
        y = aug(x, lens)
        assert torch.equal(x, x0)  # not modified in place
        for b, n in enumerate(lengths):
            assert torch.all(y[b, n:] == PAD)  # padding never masked
            assert torch.all((y[b, :n] == 1.0) | (y[b, :n] == 0.0))
        masked_somewhere += int((y == 0).any())
    assert masked_somewhere > 70  # masking really happens


def test_single_time_mask_width_and_contiguity():
    torch.manual_seed(1)
    aug = SpecAugment(num_time_masks=1, time_mask_width=50, num_freq_masks=0).train()
    widths = []
    for _ in range(300):
        x, lens = _batch([120, 30])
        y = aug(x, lens)
        for b, n in enumerate([120, 30]):
            frames = (y[b, :n] == 0).all(dim=1).nonzero().flatten()
            partial = ((y[b, :n] == 0).any(dim=1) & ~(y[b, :n] == 0).all(dim=1)).any()
            assert not partial  # a time mask covers all bins
            if len(frames):
                assert frames[-1] - frames[0] + 1 == len(frames)  # contiguous
                assert frames[-1] < n
            widths.append(len(frames) if b == 0 else 0)
            assert len(frames) <= min(50, n)
    assert max(widths) > 30  # wide masks do occur (up to T=50)


def test_single_freq_mask_width_and_contiguity():
    torch.manual_seed(2)
    aug = SpecAugment(num_time_masks=0, num_freq_masks=1, freq_mask_width=10).train()
    seen = set()
    for _ in range(300):
        x, lens = _batch([120, 40])
        y = aug(x, lens)
        for b, n in enumerate([120, 40]):
            bins = (y[b, :n] == 0).all(dim=0).nonzero().flatten()
            assert torch.equal((y[b, :n] == 0).any(dim=0).nonzero().flatten(), bins)  # same bins every frame
            assert len(bins) <= 10
            if len(bins):
                assert bins[-1] - bins[0] + 1 == len(bins)
            seen.add(len(bins))
    assert 10 in seen and 0 in seen


def test_lengths_default_and_shape_check():
    aug = SpecAugment(mask_value=-1.0).train()
    torch.manual_seed(3)
    y = aug(torch.zeros(2, 80, 64))
    assert y.shape == (2, 80, 64)
    with pytest.raises(ValueError, match="batch, frames, n_mels"):
        aug(torch.zeros(80, 64))
    with pytest.raises(ValueError):
        SpecAugment(time_mask_width=-1)
