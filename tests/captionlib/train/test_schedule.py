"""Learning-rate schedules, AdamW's weight-decay exemptions and gradient accumulation (issue 24)."""

import dataclasses
import math

import pytest
import torch
from test_trainer import Objective  # counts its calls; raises KeyboardInterrupt at fail_at
from torch import nn

from captionlib.models.captioner import Captioner
from captionlib.train.options import TrainOptions
from captionlib.train.schedule import lr_factor, make_optimizer, param_groups
from captionlib.train.trainer import Trainer

CONF = {"vocab_size": 12, "encoder": "linear", "encoder_conf": {"output_size": 8, "dropout": 0.0},
        "decoder_conf": {"embed_size": 8, "hidden_size": 8, "dropout": 0.0}, "feats_dim": 16}


def test_warmup_then_cosine_to_the_floor():
    f = lr_factor(TrainOptions(scheduler="warmup_cosine", warmup_steps=4, min_lr_ratio=0.1), total_steps=14)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    decay = [f(s) for s in range(4, 14)]
    assert all(a > b for a, b in zip(decay, decay[1:])) and math.isclose(decay[-1], 0.1)
    assert math.isclose(f(4 + 5 - 1), 0.1 + 0.9 * 0.5)  # half-way down the cosine
    assert f(100) == pytest.approx(0.1)  # past the end: the floor


def test_noam_peaks_at_the_warmup_and_step_decays():
    f = lr_factor(TrainOptions(scheduler="noam", warmup_steps=4), 100)
    assert f(3) == 1.0 and f(1) == 0.5 and f(15) == pytest.approx(0.5)  # sqrt(4 / 16)
    g = lr_factor(TrainOptions(scheduler="warmup_step", warmup_steps=2, decay_steps=3, decay_rate=0.5), 100)
    assert [g(s) for s in range(9)] == [0.5, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert lr_factor(TrainOptions(), 10)(5) == 1.0
    for bad in ({"scheduler": "noam"}, {"scheduler": "warmup_step", "decay_steps": 0}, {"warmup_steps": -1},
                {"min_lr_ratio": 1.5}, {"scheduler": "linear"}):
        with pytest.raises(ValueError):
            lr_factor(TrainOptions(**bad), 10)


def test_adamw_exempts_biases_norms_and_embeddings():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    groups = param_groups(TrainOptions(optim="adamw", weight_decay=0.01), model, [nn.Parameter(torch.ones(3, 3))], 1e-3)
    decayed, exempt, own = groups[0]["params"], groups[1]["params"], groups[2]["params"]
    assert [tuple(p.shape) for p in decayed] == [(4, 4)]
    assert sorted(tuple(p.shape) for p in exempt) == [(4,), (4,), (4,), (10, 4)]
    assert groups[1]["weight_decay"] == 0.0 and groups[2]["lr"] == 1e-3 and own[0].shape == (3, 3)
    opt = make_optimizer(TrainOptions(optim="adamw", weight_decay=0.01), groups)
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["weight_decay"] == 0.01
    # Adam keeps one group per parameter set (L2 on everything, as before)
    assert len(param_groups(TrainOptions(weight_decay=0.01), model)) == 1
    with pytest.raises(ValueError, match="optim must be one of adam, adamw"):
        make_optimizer(TrainOptions(optim="sgd"), groups)


def _batches(epoch):
    g = torch.Generator().manual_seed(epoch)
    return [(torch.randn(2, 10, 16, generator=g), torch.tensor([10, 7]), torch.randint(1, 11, (2, 4), generator=g))
            for _ in range(4)]


def _trainer(out, objective, batches=_batches, **options):
    torch.manual_seed(0)
    model = Captioner(**CONF)
    opts = TrainOptions(output_dir=str(out), max_epoch=3, lr=1e-2, **options)
    opt = make_optimizer(opts, param_groups(opts, model))
    sched = None
    if opts.scheduler != "none":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(opts, math.ceil(4 / opts.accum_grad) * 3))
    return Trainer(model, opt, objective, batches, lambda m: {"cider_d": 0.1}, opts, CONF, [str(i) for i in range(12)],
                   scheduler=sched)


def test_resuming_mid_warmup_gives_the_same_lr_sequence_and_model(tmp_path):
    schedule = {"scheduler": "warmup_cosine", "warmup_steps": 6, "optim": "adamw", "weight_decay": 0.1}
    whole = _trainer(tmp_path / "whole", Objective(), **schedule)
    whole.run()
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path / "killed", Objective(fail_at=7), **schedule).run()  # in epoch 2, still warming up
    resumed = _trainer(tmp_path / "killed", Objective(), **schedule)
    resumed.run()
    assert [h["train_lr"] for h in resumed.history] == [h["train_lr"] for h in whole.history]
    assert whole.history[0]["train_lr"] == pytest.approx(1e-2 * (1 + 2 + 3 + 4) / 6 / 4)  # the mean of epoch 1
    for k, v in whole.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    assert resumed.optimizer.param_groups[0]["lr"] == whole.optimizer.param_groups[0]["lr"]


def test_gradient_accumulation_equals_the_larger_batch(tmp_path):
    def pairs(epoch):  # two batches of 2 ...
        return _batches(epoch)

    def merged(epoch):  # ... are one batch of 4 (the losses are means over equal counts)
        b = _batches(epoch)
        return [tuple(torch.cat([x, y]) for x, y in zip(b[i], b[i + 1])) for i in (0, 2)]

    accum = _trainer(tmp_path / "accum", Objective(), pairs, accum_grad=2, grad_clip=1.0)
    big = _trainer(tmp_path / "big", Objective(), merged, grad_clip=1.0)
    accum.run(), big.run()
    for k, v in big.model.state_dict().items():
        assert torch.allclose(v, accum.model.state_dict()[k], atol=1e-6), k
    assert [h["steps"] for h in accum.history] == [4, 4, 4]
    # a window cut short by the end of the epoch is the mean of its own batches

    def merged3(epoch):
        b = _batches(epoch)
        return [tuple(torch.cat(x) for x in zip(*b[:3])), b[3]]

    short = _trainer(tmp_path / "short", Objective(), pairs, accum_grad=3)
    three = _trainer(tmp_path / "three", Objective(), merged3)
    short.run(), three.run()
    for k, v in three.model.state_dict().items():
        assert torch.allclose(v, short.model.state_dict()[k], atol=1e-6), k
    with pytest.raises(ValueError, match="accum_grad must be >= 1"):
        _trainer(tmp_path / "bad", Objective(), accum_grad=0)
    assert dataclasses.asdict(TrainOptions())["accum_grad"] == 1
