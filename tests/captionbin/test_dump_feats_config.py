"""egs/TEMPLATE/scripts/dump_feats.sh writes the resolved feature options into the dump dir
(``feats_config.yaml``), which XE training with a pretrained encoder reads (issue 26)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from captionlib.io.datadir import write_scp
from captionlib.io.feats import FeatReader
from captionlib.models.panns import Cnn10Encoder, front_end_tensors
from captionlib.models.pretrained_feats import frozen_encoder
from captionlib.train.xe import read_feats_config

REPO = Path(__file__).resolve().parents[2]
CLIP = Path("/work/shared/data/clotho_fixture/validation/Whistling.wav")
PANNS = REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml"


@pytest.fixture
def recipe(tmp_path):
    for tool in ("run.pl", "split_scp.pl", "parse_options.sh"):
        if not (REPO / "utils" / tool).is_file():
            pytest.skip(f"utils/{tool} not available")
    if not CLIP.is_file():
        pytest.skip(f"{CLIP} not available")
    rec = tmp_path / "rec"
    (rec / "conf").mkdir(parents=True)
    (rec / "utils").symlink_to(REPO / "utils")
    (rec / "scripts").symlink_to(REPO / "egs" / "TEMPLATE" / "scripts")
    shutil.copy(PANNS, rec / "conf" / "feats_panns.yaml")
    shutil.copy(REPO / "egs" / "mini_clotho" / "conf" / "feats_logmel.yaml", rec / "conf" / "feats_logmel.yaml")
    data = rec / "data" / "set"
    data.mkdir(parents=True)
    write_scp(data / "wav.scp", {"clip1": str(CLIP)})
    write_scp(data / "text", {"clip1-1": "a caption"})
    return rec


def _dump(rec, config, feats_type="logmel", rc=0):
    env = dict(os.environ, LC_ALL="C")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    cmd = ["scripts/dump_feats.sh", "--python", sys.executable, "--nj", "1", "--feats_type", feats_type,
           "--feats_config", config, "data/set", "dump/set"]
    p = subprocess.run(cmd, cwd=rec, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == rc, p.stdout + p.stderr
    return p.stdout + p.stderr


def _print_config(rec, config):
    out = subprocess.run([sys.executable, "-m", "captionbin.caption_dump_feats", "--config", config,
                          "--print_config"], cwd=rec, capture_output=True, text=True, check=True).stdout
    return yaml.safe_load(out)


def test_the_dump_dir_holds_its_resolved_features_config(recipe):
    d = recipe / "dump" / "set"
    _dump(recipe, "conf/feats_panns.yaml")
    conf = read_feats_config(str(d))
    assert conf == _print_config(recipe, "conf/feats_panns.yaml")
    assert (conf["fs"], conf["n_fft"], conf["fmin"], conf["fmax"], conf["log"]) == (32000, 1024, 50.0, 14000.0, "db")
    # the trainer's front-end check reads it as the config file itself
    ours, config_file = front_end_tensors(conf), front_end_tensors(yaml.safe_load(PANNS.read_text()))
    assert all(torch.equal(ours[k], config_file[k]) for k in ours)

    # a dump made before feats_config.yaml existed gets it from a re-run, without a new dump
    (d / "feats_config.yaml").unlink()
    mtime = (d / "feats.scp").stat().st_mtime_ns
    out = _dump(recipe, "conf/feats_panns.yaml")
    assert "already dumped" in out and f"Wrote {d.relative_to(recipe)}/feats_config.yaml" in out
    assert read_feats_config(str(d)) == conf and (d / "feats.scp").stat().st_mtime_ns == mtime

    # another features config redoes the dump and its feats_config.yaml
    _dump(recipe, "conf/feats_logmel.yaml")
    assert read_feats_config(str(d)) == _print_config(recipe, "conf/feats_logmel.yaml")
    assert (d / "feats.scp").stat().st_mtime_ns != mtime and (d / "feats_dim").read_text() == "64\n"

    # a re-dump that fails leaves no feats.scp of the old dump pointing at the arks it removed
    bad = recipe / "conf" / "feats_bad.yaml"
    bad.write_text((recipe / "conf" / "feats_logmel.yaml").read_text() + "fmin: 90000\n")
    _dump(recipe, "conf/feats_bad.yaml", rc=1)
    assert not (d / ".done").exists() and not list(d.glob("feats.*"))
    assert not any((d / f).exists() for f in ("utt2num_frames", "feats_dim", "feats_type"))


def test_feats_type_pretrained_dumps_the_frozen_encoders_frames(recipe):
    """--feats_type pretrained: stage 2 stores what the frozen encoder hands the decoder (its frame
    outputs on the log-mel of the config), records the checkpoint in feats_config.yaml, redoes the
    dump when the checkpoint changes, and refuses a config that makes another feature type."""
    conf = yaml.safe_load(PANNS.read_text())
    torch.manual_seed(0)
    state = dict(Cnn10Encoder().state_dict(), **front_end_tensors(conf))  # the authors' layout
    (recipe / "downloads").mkdir()
    torch.save({"model": state, "iteration": 1}, recipe / "downloads" / "cnn10.pth")
    yaml.safe_dump(dict(conf, feats_type="pretrained", encoder="cnn10", pretrained="downloads/cnn10.pth"),
                   (recipe / "conf" / "feats_pretrained_cnn10.yaml").open("w"))
    _dump(recipe, "conf/feats_logmel.yaml", feats_type="pretrained", rc=1)
    out = _dump(recipe, "conf/feats_pretrained_cnn10.yaml", feats_type="logmel", rc=1)
    assert "makes feats_type 'pretrained', not the 'logmel' asked for" in out
    d = recipe / "dump" / "set"
    _dump(recipe, "conf/feats_panns.yaml")
    logmel = FeatReader(str(d / "feats.scp"))["clip1"]
    _dump(recipe, "conf/feats_pretrained_cnn10.yaml", feats_type="pretrained")
    assert (d / "feats_type").read_text() == "pretrained\n" and (d / "feats_dim").read_text() == "512\n"
    assert read_feats_config(str(d))["pretrained"] == "downloads/cnn10.pth"
    frames = FeatReader(str(d / "feats.scp"))["clip1"]
    enc = frozen_encoder("cnn10", str(recipe / "downloads" / "cnn10.pth"), conf)
    with torch.no_grad():
        _, memory = enc(torch.tensor(logmel)[None], torch.tensor([len(logmel)]))
    assert frames.shape == (len(logmel) // 16, 512) and np.abs(frames - memory[0].numpy()).max() < 1e-5
    assert "already dumped" in _dump(recipe, "conf/feats_pretrained_cnn10.yaml", feats_type="pretrained")
    torch.save({"model": state, "iteration": 2}, recipe / "downloads" / "cnn10.pth")  # another checkpoint
    assert "already dumped" not in _dump(recipe, "conf/feats_pretrained_cnn10.yaml", feats_type="pretrained")
