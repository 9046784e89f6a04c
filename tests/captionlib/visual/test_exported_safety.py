"""A received ``.pt2`` runs no code: every route by which ``torch.export.load`` (torch 2.13) would
run code from the file is refused, naming the file and the member, through load_exported,
a packed image model (from_pretrained, caption_infer) and caption_extract_visual_feats."""

import subprocess
import sys

import pytest
import torch

from captionbin import caption_extract_visual_feats, caption_infer
from captionbin.caption_pack import main as pack
from captionlib.packed import CNN_MEMBER, PretrainedCaptioner
from captionlib.visual.cnn import RandomConvNet, export_backbone, load_exported
from bad_inputs import replace_zip_member
from crafted_pt2 import ROUTES, RUNS_CODE, craft_pt2
from packed_models import IMAGES, make_visual_recipe, visual_pack_args
from visual_media import write_media_scp


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """A real .pt2 of a small conv net (32 px) and a packed image model that holds it."""
    root = tmp_path_factory.mktemp("exported")
    pt2 = root / "net.pt2"
    export_backbone(RandomConvNet(seed=1).eval(), pt2, image_size=32, meta={"cnn": "random_convnet"})
    recipe = make_visual_recipe(root / "r", "image", {"cnn": "exported", "cnn_weights": str(pt2),
                                                      "output": "pooled", "image_size": 32})
    packed = root / "image.zip"
    pack(visual_pack_args(recipe, packed))
    return pt2, packed


@pytest.mark.parametrize("route", RUNS_CODE)
def test_the_crafted_files_do_run_code_in_torch_export_load(program, tmp_path, route):
    """The payloads are real: torch.export.load itself runs each (so the refusals below matter)."""
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt2"
    craft_pt2(program[0], crafted, route, marker)
    try:
        torch.export.load(crafted).module()(torch.zeros(1, 3, 32, 32))
    except Exception:  # several routes fail after their code has run
        pass
    assert marker.exists()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_load_exported_refuses_each_route_naming_the_member(program, tmp_path, route):
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt2"
    member = craft_pt2(program[0], crafted, route, marker)
    with pytest.raises(ValueError) as e:
        load_exported(crafted)
    message = str(e.value)
    assert message.startswith(f"{crafted}: refused member {member}") and "\n" not in message, message
    assert not marker.exists()


def test_an_exported_program_still_loads_and_runs(program):
    module, meta = load_exported(program[0])
    assert meta["image_size"] == 32
    assert module(torch.zeros(2, 3, 32, 32)).shape == (2, 64, 4, 4)


def test_a_pt2_over_the_cap_is_refused_before_loading(program):
    with pytest.raises(ValueError, match=r"over the cap of 1,000 bytes"):
        load_exported(program[0], max_bytes=1000)


@pytest.mark.parametrize("route", RUNS_CODE)
def test_a_packed_image_model_with_a_crafted_cnn_is_refused_everywhere(program, tmp_path, route, capsys):
    """from_pretrained, caption_infer and caption_extract_visual_feats each refuse it, naming the
    member, and its code does not run."""
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt2"
    member = craft_pt2(program[0], crafted, route, marker)
    packed = tmp_path / "model.zip"
    packed.write_bytes(program[1].read_bytes())
    replace_zip_member(packed, CNN_MEMBER, crafted.read_bytes())
    with pytest.raises(ValueError, match=f"member {CNN_MEMBER}\\): refused member {member}"):
        PretrainedCaptioner.from_pretrained(packed)
    with pytest.raises(SystemExit) as e:
        caption_infer.main(["--model", str(packed), str(IMAGES[0])])
    assert e.value.code == 1
    assert f"refused member {member}" in capsys.readouterr().err
    scp = write_media_scp(tmp_path / "image.scp", {"a": IMAGES[0]})
    with pytest.raises(SystemExit) as e:
        caption_extract_visual_feats.main(["--media_scp", str(scp), "--cnn", "exported", "--cnn_weights",
                                           str(crafted), "--out_prefix", str(tmp_path / "f" / "feats.1")])
    assert e.value.code != 0
    assert f"{crafted}: refused member {member}" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "f" / "feats.1.scp").exists()


def test_caption_infer_refuses_a_crafted_cnn_as_a_command(program, tmp_path):
    marker = tmp_path / "ran"
    crafted = tmp_path / "crafted.pt2"
    member = craft_pt2(program[0], crafted, "sample_inputs", marker)
    packed = tmp_path / "model.zip"
    packed.write_bytes(program[1].read_bytes())
    replace_zip_member(packed, CNN_MEMBER, crafted.read_bytes())
    r = subprocess.run([sys.executable, "-m", "captionbin.caption_infer", "--model", str(packed), str(IMAGES[0])],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and f"refused member {member}" in r.stderr, r.stderr
    assert "Logging error" not in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists()
