"""Tests of caption_export_cnn: random_convnet .pt2 used by caption_extract_visual_feats --cnn exported;
torchvision names when torchvision cannot import (here) or can (elsewhere)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from captionbin import caption_export_cnn, caption_extract_visual_feats
from captionlib.io.feats import FeatReader
from captionlib.visual.cnn import RandomConvNet, load_exported
from visual_media import write_image, write_media_scp

ROOT = Path(__file__).resolve().parents[2]


def _torchvision_error():
    try:
        import torchvision  # noqa: F401
    except Exception as e:
        return e
    return None


def test_parser_required():
    assert caption_export_cnn.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_export_cnn.main(["--cnn", "random_convnet"])
    assert e.value.code != 0


def test_random_convnet_export_then_extract(tmp_path, capsys):
    pt2 = tmp_path / "cnn" / "random.pt2"
    caption_export_cnn.main(["--cnn", "random_convnet", "--seed", "3", "--image_size", "32", "--out", str(pt2)])
    module, meta = load_exported(pt2)
    assert meta == {"cnn": "random_convnet", "seed": 3, "image_size": 32, "feat_dim": 64}
    num_params = sum(p.numel() for p in RandomConvNet().parameters())
    assert num_params == 23584  # 3 conv layers' weights and biases
    log = capsys.readouterr().err
    assert f"INFO: wrote {pt2} (random_convnet at 32 px, {num_params} parameters)" in log
    assert "ending in .pt2" not in log
    assert sorted(p.name for p in pt2.parent.iterdir()) == ["random.pt2"]
    media = {f"img{i}": write_image(tmp_path / f"{i}.jpg", 48, 32, seed=i) for i in range(2)}
    scp = write_media_scp(tmp_path / "image.scp", media)
    common = ["--media_scp", str(scp), "--image_size", "32", "--output", "pooled", "--log_interval", "0"]
    caption_extract_visual_feats.main(common + ["--cnn", "exported", "--cnn_weights", str(pt2),
                                                "--out_prefix", str(tmp_path / "a" / "feats.1")])
    caption_extract_visual_feats.main(common + ["--cnn", "random_convnet", "--seed", "3",
                                                "--out_prefix", str(tmp_path / "b" / "feats.1")])
    assert (tmp_path / "a" / "feats_type.1").read_text() == (tmp_path / "b" / "feats_type.1").read_text()
    a, b = FeatReader(tmp_path / "a" / "feats.1.scp"), FeatReader(tmp_path / "b" / "feats.1.scp")
    for k in media:
        np.testing.assert_allclose(a[k], b[k], atol=1e-6)


def test_default_image_size_is_the_backbones(tmp_path):
    pt2 = tmp_path / "random.pt2"
    caption_export_cnn.main(["--cnn", "random_convnet", "--out", str(pt2)])
    assert load_exported(pt2)[1]["image_size"] == 224
    with pytest.raises(SystemExit) as e:
        caption_export_cnn.main(["--cnn", "random_convnet", "--image_size", "0", "--out", str(pt2)])
    assert e.value.code == 1


@pytest.mark.parametrize("binary", ["caption_export_cnn", "caption_extract_visual_feats", "caption_import_feats"])
def test_parser_does_not_import_torch(binary):
    """--help / --print_config (run by dump_feats.sh every time) must not pay for importing torch."""
    code = (f"import sys; from captionbin.{binary} import get_parser; get_parser(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchvision', 'av', 'h5py') "
            "or m.startswith('captionlib.visual.')); print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_torchvision_name_without_torchvision_exits_1(tmp_path, capsys):
    if _torchvision_error() is None:
        pytest.skip("torchvision imports here")
    weights = tmp_path / "resnet101.pth"
    torch.save({}, weights)
    with pytest.raises(SystemExit) as e:
        caption_export_cnn.main(["--cnn", "resnet101", "--cnn_weights", str(weights), "--out", str(tmp_path / "r.pt2")])
    assert e.value.code == 1
    assert "ERROR: torchvision cannot be imported" in capsys.readouterr().err


@pytest.mark.parametrize("name, size", [("resnet101", 64), ("vgg16", 64)])
def test_torchvision_export(tmp_path, name, size):
    if _torchvision_error() is not None:
        pytest.skip(f"torchvision cannot be imported: {_torchvision_error()}")
    from torchvision import models

    weights = tmp_path / f"{name}.pth"
    torch.save(getattr(models, name)(weights=None).state_dict(), weights)
    pt2 = tmp_path / f"{name}.pt2"
    caption_export_cnn.main(["--cnn", name, "--cnn_weights", str(weights), "--image_size", str(size),
                             "--out", str(pt2)])
    module, meta = load_exported(pt2)
    assert meta["cnn"] == name and module(torch.randn(2, 3, size, size)).ndim == 4
