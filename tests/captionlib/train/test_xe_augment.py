"""Label smoothing and CoNeTTE-style mixup of the XE objective (issue 24)."""

import pytest
import torch

from captionlib.data.datasets import collate_captions, collate_clip_captions
from captionlib.models.captioner import Captioner, xe_loss, xe_targets
from captionlib.train.xe import XEObjective, caption_partners, mix_features, mixup_draw


def _batch(rng):
    items = [(rng.standard_normal((12 + 3 * i, 16)).astype("float32"), rng.integers(1, 9, size=3 + i))
             for i in range(4)]
    return collate_captions(items)


DECODERS = {"gru": {"embed_size": 8, "hidden_size": 8},
            "transformer": {"num_layers": 1, "d_model": 8, "nhead": 2, "dim_feedforward": 16}}


def _model(decoder="gru"):
    torch.manual_seed(0)
    model = Captioner(10, feats_dim=16, encoder="linear", encoder_conf={"output_size": 8},
                      decoder=decoder, decoder_conf=DECODERS[decoder]).eval()
    model.set_normalization(torch.linspace(-1, 1, 16).numpy(), torch.linspace(0.5, 2, 16).numpy())
    return model


def test_label_smoothing_is_the_mixture_of_nll_and_uniform_cross_entropy():
    import numpy as np

    model, batch = _model(), _batch(np.random.default_rng(0))
    plain, stats = XEObjective(0.0, 0.0)(model, batch)
    smooth, stats_s = XEObjective(0.2, 0.0)(model, batch)
    logits = model(*batch[:3])
    targets = xe_targets(batch[2], batch[3], model.eos_id)
    logp = logits.log_softmax(-1)[targets != 0]
    assert torch.isinf(logp[:, 0]).all()  # the padding id is never emitted: not smoothed onto
    expected = 0.8 * plain + 0.2 * (-logp[:, 1:].mean(-1)).mean()
    assert torch.isfinite(smooth) and torch.allclose(smooth, expected, atol=1e-6)
    assert stats["acc"] == stats_s["acc"] and stats["num_units"] == stats_s["num_units"]
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        XEObjective(1.0, 0.0)


def test_mixup_draws_a_dominant_weight_and_a_derangement():
    torch.manual_seed(0)
    for n in (2, 3, 7):
        lam, perm = mixup_draw(n, 0.4)
        assert 0.5 <= lam <= 1.0
        assert sorted(perm.tolist()) == list(range(n)) and all(perm[i] != i for i in range(n))


def test_mixed_features_are_the_mix_of_the_normalised_features_with_zero_padding():
    import numpy as np

    model, (feats, lens, _, _) = _model(), _batch(np.random.default_rng(1))
    perm = torch.tensor([1, 2, 3, 0])
    mixed, mixed_lens = mix_features(model, feats, lens, 0.7, perm)
    assert mixed_lens.tolist() == torch.maximum(lens, lens[perm]).tolist()

    def normalised(x, n):
        z = (x - model.feats_mean) / model.feats_std
        return z * (torch.arange(x.size(1))[None, :, None] < n[:, None, None])

    assert torch.allclose(normalised(mixed, mixed_lens), 0.7 * normalised(feats, lens)
                          + 0.3 * normalised(feats, lens)[perm], atol=1e-5)


def test_mixup_mixes_features_and_previous_words_but_not_the_targets(monkeypatch):
    import numpy as np

    import captionlib.train.xe as xe

    model, batch = _model(), _batch(np.random.default_rng(2))
    monkeypatch.setattr(xe, "mixup_draw", lambda n, alpha: (1.0, torch.arange(n).roll(1)))
    equal = (batch[0][:, :12], torch.full((4,), 12)) + batch[2:]
    same, _ = XEObjective(0.0, 0.4)(model, equal)  # lam = 1 and equal lengths: no mix at all
    assert torch.allclose(same, XEObjective(0.0, 0.0)(model, equal)[0], atol=1e-6)
    same, _ = XEObjective(0.0, 0.0)(model, batch)
    perm = torch.arange(4).roll(1)
    monkeypatch.setattr(xe, "mixup_draw", lambda n, alpha: (0.6, perm))
    mixed, stats = XEObjective(0.0, 0.4)(model, batch)
    assert not torch.allclose(mixed, same)
    # the decoder hears the mixed clips and the mixed previous words; the targets are the captions' own
    targets = xe_targets(batch[2], batch[3], model.eos_id)
    assert stats["num_units"] == int((targets != 0).sum())
    v = model.encode(*mix_features(model, batch[0], batch[1], 0.6, perm))
    hook = model.decoder.embed.register_forward_hook(lambda m, i, out: 0.6 * out + 0.4 * out[perm])
    logits = model.decoder.forward_teacher(v, batch[2])
    hook.remove()
    assert torch.allclose(mixed, xe_loss(logits, targets), atol=1e-6)


def test_caption_partners_pair_the_kth_captions_of_partner_clips():
    caption2clip = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])  # clips of 3, 2 and 4 captions
    partners = caption_partners(caption2clip, torch.tensor([1, 2, 0]))
    # clip 0 -> clip 1 (captions 3, 4; k mod 2), clip 1 -> clip 2 (5, 6), clip 2 -> clip 0 (0, 1, 2, 0)
    assert partners.tolist() == [3, 4, 3, 5, 6, 0, 1, 2, 0]


@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_mixup_of_clips_equals_mixup_of_their_caption_items(monkeypatch, decoder):
    """xe_unit clip: the loss of a mixed batch of clips with their captions is that of the
    (clip, caption) items mixed with the partner items (one encoder pass per clip)."""
    import numpy as np

    import captionlib.train.xe as xe

    rng = np.random.default_rng(4)
    clips = [rng.standard_normal((10 + 4 * i, 16)).astype("float32") for i in range(3)]
    captions = [[rng.integers(1, 9, size=2 + (i + k) % 3) for k in range(n)] for i, n in enumerate((3, 2, 4))]
    clip_batch = collate_clip_captions(list(zip(clips, captions)))
    items = collate_captions([(clips[i], c) for i in range(3) for c in captions[i]])
    model, clip_perm = _model(decoder), torch.tensor([2, 0, 1])
    caption_perm = caption_partners(clip_batch[4], clip_perm)
    monkeypatch.setattr(xe, "mixup_draw", lambda n, alpha: (0.7, clip_perm if n == 3 else caption_perm))
    by_clip, stats = XEObjective(0.1, 0.4)(model, clip_batch)
    by_item, stats_items = XEObjective(0.1, 0.4)(model, items)
    assert torch.allclose(by_clip, by_item, atol=1e-5) and stats == stats_items
    assert not torch.allclose(by_clip, XEObjective(0.1, 0.0)(model, clip_batch)[0])


@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_mixup_trains(decoder):
    import numpy as np

    model = _model(decoder).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    objective, batch = XEObjective(0.1, 0.4), _batch(np.random.default_rng(3))
    assert not objective.row_sharded_randomness and XEObjective(0.1, 0.0).row_sharded_randomness
    first = None
    for _ in range(30):
        loss, _ = objective(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first
