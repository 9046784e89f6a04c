"""Tests of captionlib.visual.cnn: random_convnet, pooled/grid outputs, torch.export round trip,
and the torchvision truncation logic (on a stand-in ``torchvision.models`` module, since the
real torchvision does not import against this torch build)."""

import logging
import sys
import types
from collections import OrderedDict

import pytest
import torch
from torch import nn

from captionlib.visual.cnn import (
    RandomConvNet,
    build_backbone,
    build_torchvision_backbone,
    cnn_features,
    export_backbone,
    load_exported,
)


def test_random_convnet_shapes_seed_and_global_rng():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b, c = RandomConvNet(seed=1), RandomConvNet(seed=1), RandomConvNet(seed=2)
    assert torch.equal(torch.random.get_rng_state(), before)
    x = torch.randn(2, 3, 32, 24)
    assert a(x).shape == (2, 64, 4, 3)
    assert torch.equal(a(x), b(x)) and not torch.equal(a(x), c(x))
    assert RandomConvNet(channels=(4, 8), seed=0)(x).shape == (2, 8, 8, 6)


def test_pooled_is_the_mean_of_the_grid_and_grid_is_row_major():
    net = build_backbone("random_convnet", seed=0)
    x = torch.randn(3, 3, 32, 40)
    fmap = net(x).detach()
    grid, pooled = cnn_features(net, x, "grid"), cnn_features(net, x, "pooled")
    assert grid.shape == (3, 4 * 5, 64) and pooled.shape == (3, 64)
    assert torch.allclose(grid.mean(dim=1), pooled, atol=1e-6)
    assert torch.equal(grid[1, 1 * 5 + 2], fmap[1, :, 1, 2])
    with pytest.raises(ValueError, match="output"):
        cnn_features(net, x, "att")
    with pytest.raises(ValueError, match="B, C, H', W'"):
        cnn_features(nn.Flatten(), x)


def test_export_round_trip(tmp_path, caplog, recwarn):
    net = build_backbone("random_convnet", seed=5)
    path = tmp_path / "sub" / "random.pt2"
    with caplog.at_level(logging.WARNING):
        export_backbone(net, path, 32, {"cnn": "random_convnet"})
    # the temporary file is <path>.tmp.pt2: torch warns about an archive not ending in .pt2
    messages = [r.getMessage() for r in caplog.records] + [str(w.message) for w in recwarn]
    assert not [m for m in messages if "ending in .pt2" in m]
    module, meta = load_exported(path)
    assert meta == {"cnn": "random_convnet", "image_size": 32, "feat_dim": 64}
    for shape in [(1, 3, 32, 32), (5, 3, 32, 32), (2, 3, 48, 40)]:  # dynamic batch and image size
        x = torch.randn(*shape)
        assert torch.allclose(cnn_features(module, x, "grid"), cnn_features(net, x, "grid"), atol=1e-6)
    assert torch.allclose(build_backbone("exported", path)(x), net(x), atol=1e-6)
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["random.pt2"]  # no *.tmp.pt2 left


def test_build_backbone_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="--cnn_weights"):
        build_backbone("exported")
    with pytest.raises(ValueError, match="unknown cnn"):
        build_backbone("alexnet")
    with pytest.raises(ValueError, match="needs --cnn_weights"):
        build_backbone("resnet101")
    with pytest.raises(FileNotFoundError, match="r101.pth"):
        build_backbone("resnet101", tmp_path / "r101.pth")
    weights = tmp_path / "w.pth"
    torch.save({}, weights)
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import fails as when torch/torchvision mismatch
    with pytest.raises(RuntimeError, match="torchvision cannot be imported.*caption_export_cnn.*--cnn exported"):
        build_backbone("resnet101", weights)


# ---- stand-in torchvision.models with the child names of the real architectures ----


class _FakeResNet(nn.Module):
    def __init__(self, weights=None):
        super().__init__()
        self.conv1, self.relu = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU()
        self.layer4 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(16, 10)


class _FakeVGG(nn.Module):
    def __init__(self, weights=None):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 12, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.avgpool, self.classifier = nn.AdaptiveAvgPool2d(7), nn.Linear(12 * 49, 10)


class _FakeInception(nn.Module):
    def __init__(self, weights=None, aux_logits=True, init_weights=True):
        super().__init__()
        self.Conv2d_1a_3x3 = nn.Conv2d(3, 8, 3, stride=2)
        self.Mixed_6e = nn.Conv2d(8, 8, 3)
        self.AuxLogits = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
        self.Mixed_7c = nn.Conv2d(8, 20, 3)
        self.avgpool, self.dropout, self.fc = nn.AdaptiveAvgPool2d(1), nn.Dropout(), nn.Linear(20, 10)


@pytest.fixture
def fake_torchvision(monkeypatch):
    models = types.SimpleNamespace(resnet101=_FakeResNet, resnet152=_FakeResNet, vgg16=_FakeVGG,
                                   inception_v3=_FakeInception)
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(models=models))
    return models


@pytest.mark.parametrize("name, cls, out_shape", [
    ("resnet101", _FakeResNet, (2, 16, 8, 8)),
    ("resnet152", _FakeResNet, (2, 16, 8, 8)),
    ("vgg16", _FakeVGG, (2, 12, 16, 16)),  # last max-pool dropped
    ("inception_v3", _FakeInception, (2, 20, 11, 11)),
])
def test_torchvision_truncation_and_weights(tmp_path, fake_torchvision, name, cls, out_shape):
    torch.manual_seed(0)
    ref = cls()
    weights = tmp_path / f"{name}.pth"
    torch.save(ref.state_dict(), weights)
    trunk = build_torchvision_backbone(name, weights)
    assert not trunk.training
    x = torch.randn(2, 3, 32, 32)
    assert trunk(x).shape == out_shape
    names = dict(trunk.named_children())
    assert not {"avgpool", "fc", "AuxLogits", "dropout"} & set(names)
    if name.startswith("resnet"):
        assert torch.equal(names["layer4"].weight, ref.layer4.weight)
    if name == "inception_v3":  # transform_input of the Google weights: (x * std + mean - 0.5) / 0.5
        mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
        expected = ((x * std.view(1, 3, 1, 1) + mean.view(1, 3, 1, 1)) - 0.5) / 0.5
        assert torch.allclose(names["transform_input"](x), expected, atol=1e-6)
    bad = tmp_path / "bad.pth"
    torch.save(OrderedDict(foo=torch.zeros(1)), bad)
    with pytest.raises(RuntimeError, match=f"bad.pth does not hold {name} weights"):
        build_torchvision_backbone(name, bad)


def test_real_torchvision(tmp_path):
    try:
        from torchvision import models
    except Exception as e:  # not installed, or built against another torch
        pytest.skip(f"torchvision cannot be imported: {e}")
    weights = tmp_path / "r101.pth"
    torch.save(models.resnet101(weights=None).state_dict(), weights)
    assert build_backbone("resnet101", weights)(torch.randn(1, 3, 64, 64)).shape == (1, 2048, 2, 2)
