"""The training option gradient_checkpointing of the BEATs and ConvNeXt encoders: each layer / block
runs again in the backward pass (captionlib.models.encoders.checkpointed), with its dropout and
stochastic-depth draws replayed, so outputs and gradients equal those without it. The 2-rank
check of the replayed row-sharded draws is in tests/captionlib/utils/ddp_checks.py."""

import pytest
import torch

from captionlib.models import encoders
from captionlib.models.beats import BEATsEncoder
from captionlib.models.captioner import build_model
from captionlib.models.convnext import ConvNeXtEncoder
from captionlib.models.encoders import checkpointed, set_gradient_checkpointing
from captionlib.models.panns import Cnn14Encoder
from captionlib.train.options import XEOptions
from captionlib.train.xe import check_xe_options

BEATS_TINY = dict(n_mels=32, embed_dim=16, encoder_layers=2, encoder_embed_dim=24, encoder_ffn_embed_dim=32,
                  encoder_attention_heads=4, conv_pos=8, conv_pos_groups=4, num_buckets=16, max_distance=40,
                  classes_num=0, dropout=0.2, attention_dropout=0.2, activation_dropout=0.2)
CONVNEXT_TINY = dict(n_mels=32, depths=(1, 1, 2, 1), dims=(8, 8, 16, 16), drop_path_rate=0.5, classes_num=3)


def _pair(cls, conf):
    """The encoder without and with checkpointing, same weights, training mode."""
    torch.manual_seed(0)
    plain = cls(**conf).train()
    ckpt = cls(**conf).train()
    ckpt.load_state_dict(plain.state_dict())
    set_gradient_checkpointing(ckpt)
    return plain, ckpt


def _blocks(enc):
    return list(enc.encoder.layers) if isinstance(enc, BEATsEncoder) else [b for s in enc.stages for b in s]


def _count_calls(enc, calls):
    """Append a block's index to ``calls`` each time its forward runs (module hooks do not fire
    in the checkpoint's recomputation); undo with :func:`_uncount`."""
    for i, b in enumerate(_blocks(enc)):
        b.forward = lambda *a, i=i, f=b.forward: calls.append(i) or f(*a)


def _uncount(enc):
    for b in _blocks(enc):
        del b.forward


def _step(enc, feats, lengths, seed):
    """Forward and backward of a fixed function of both outputs; the calls of each block."""
    calls = []
    _count_calls(enc, calls)
    enc.zero_grad()
    torch.manual_seed(seed)
    v, frames = enc(feats, lengths)
    weights = torch.linspace(-1, 1, frames.numel()).view_as(frames)
    (v.square().sum() + (frames * weights).sum()).backward()
    _uncount(enc)
    grads = {k: p.grad.clone() for k, p in enc.named_parameters() if p.grad is not None}
    return v.detach(), frames.detach(), grads, calls


@pytest.mark.parametrize("cls,conf", [(BEATsEncoder, BEATS_TINY), (ConvNeXtEncoder, CONVNEXT_TINY)],
                         ids=["beats", "convnext"])
def test_same_outputs_and_gradients_with_every_block_run_again(cls, conf):
    plain, ckpt = _pair(cls, conf)
    torch.manual_seed(5)
    feats, lengths = torch.randn(3, 100, 32), torch.tensor([100, 70, 37])
    n = len(_blocks(plain))
    for seed in (1, 2):  # other dropout / drop-path draws each step
        v0, f0, g0, calls0 = _step(plain, feats, lengths, seed)
        v1, f1, g1, calls1 = _step(ckpt, feats, lengths, seed)
        assert torch.equal(v0, v1) and torch.equal(f0, f1)
        assert g0.keys() == g1.keys() and len(g0) > 20
        for k in g0:
            torch.testing.assert_close(g1[k], g0[k], rtol=1e-5, atol=1e-6, msg=k)
        assert calls0 == list(range(n)) and calls1 == list(range(n)) + list(range(n))[::-1]  # recomputed in backward
    # the draws matter: another seed gives other gradients (so the replay above is tested)
    assert not torch.allclose(_step(plain, feats, lengths, 3)[2][next(iter(g0))], g0[next(iter(g0))])


def test_checkpointed_only_where_gradients_are_recorded(monkeypatch):
    """No checkpoint without gradients (no_grad, a frozen encoder); one where the parameters or
    only the inputs need them; a second backward through the graph recomputes again."""
    used = []
    monkeypatch.setattr(encoders, "checkpoint", lambda *a, **k: used.append(1) or torch.utils.checkpoint.checkpoint(
        *a, **k))
    _, enc = _pair(ConvNeXtEncoder, CONVNEXT_TINY)
    feats, lengths = torch.randn(2, 64, 32), torch.tensor([64, 40])
    n = len(_blocks(enc))
    with torch.no_grad():
        enc(feats, lengths)
    enc.requires_grad_(False)
    assert not enc(feats, lengths)[0].requires_grad and not used
    block, x = _blocks(enc)[0], torch.randn(2, 8, 16, 4, requires_grad=True)  # the input alone needs gradients
    calls = []
    _count_calls(enc, calls)
    y = checkpointed(block, x, torch.tensor([16, 9]))
    y.square().sum().backward(retain_graph=True)
    grad = x.grad.clone()
    y.square().sum().backward()
    assert used == [1] and calls == [0, 0, 0] and torch.allclose(x.grad, 2 * grad)
    enc.requires_grad_(True)
    enc(feats, lengths)
    assert len(used) == 1 + n


def test_a_training_option_refused_by_encoders_without_it():
    assert XEOptions().gradient_checkpointing is False
    model = build_model(dict(vocab_size=10, feats_dim=32, encoder="beats",
                             encoder_conf={k: v for k, v in BEATS_TINY.items() if k != "n_mels"}))
    set_gradient_checkpointing(model.encoder)
    assert model.encoder.encoder.gradient_checkpointing and "gradient_checkpointing" not in model.state_dict()
    with pytest.raises(ValueError, match="Cnn14Encoder has no layers it can run again.*beats, convnext"):
        set_gradient_checkpointing(Cnn14Encoder(64))
    set_gradient_checkpointing(Cnn14Encoder(64), False)  # off: nothing to do
    opts = XEOptions(train_data_dir="d", valid_data_dir="d", output_dir="o", encoder="cnn14",
                     gradient_checkpointing=True)
    with pytest.raises(ValueError, match="Cnn14Encoder has no layers"):  # at --check_only, before any work
        check_xe_options(opts)
