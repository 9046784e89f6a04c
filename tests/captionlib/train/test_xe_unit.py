"""XE with one encoder pass per clip (xe_unit: clip) against the per-caption XE."""

import numpy as np
import torch

from captionlib.data.datasets import collate_captions, collate_clip_captions
from captionlib.models.captioner import Captioner
from captionlib.train.xe import xe_objective


def test_clip_batch_equals_caption_batch():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Captioner(9, n_mels=64).eval()  # eval: no dropout, so the two losses can be compared
    clips = [(rng.standard_normal((30 + 5 * i, 64)).astype(np.float32),
              [rng.integers(1, 8, size=n).astype(np.int64) for n in (3, 5, 4)[: 1 + i]]) for i in range(3)]
    feats, lens, ys, ys_lens, caption2clip = collate_clip_captions(clips)
    assert feats.shape == (3, 40, 64) and caption2clip.tolist() == [0, 1, 1, 2, 2, 2]
    assert ys.shape == (6, 5) and ys_lens.tolist() == [3, 3, 5, 3, 5, 4]
    per_caption = collate_captions([(f, c) for f, caps in clips for c in caps])
    loss_clip, _ = xe_objective(model, (feats, lens, ys, ys_lens, caption2clip))
    loss_caption, _ = xe_objective(model, per_caption)
    assert torch.allclose(loss_clip, loss_caption, atol=1e-5)
