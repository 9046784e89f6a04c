"""Packed image and video models (issue 28 item 3): egs/mini_mscoco (images, grid features) and
egs/mini_msvd (videos, 4 frames each), in temporary copies, through stage 10 (XE only: no RL, no
ensemble, no diversity samples); caption_infer on the recipe's own val/test media files with the
packed model writes stage 8's captions, from features equal to stage 2's dump."""

import json
import sys

import numpy as np
import pytest
import yaml
from test_recipes import _run
from test_visual_recipes import _copy_recipe

from recipe_logs import failure_report

pytestmark = pytest.mark.long(0.7)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

# XE only (no RL, ensemble or diversity samples), val decoded too (the XE test sets), fast metrics
FAST = ["--xe_test_sets", "val", "--rl_algo", "", "--ensemble_models", "", "--num_diversity_samples", "0",
        "--metrics", "bleu,cider_d"]
MEDIA = {"mini_mscoco": "image", "mini_msvd": "video"}


@pytest.mark.parametrize("mini", sorted(MEDIA))
def test_caption_infer_on_packed_visual_model_gives_stage8(tmp_path, mini):
    from captionlib.io.feats import FeatReader
    from captionlib.packed import PretrainedCaptioner, read_packed

    d = _copy_recipe(tmp_path, mini)
    r = _run(["./run.sh", *FAST], cwd=d, timeout=900)
    assert r.returncode == 0, failure_report(r, d)
    media = MEDIA[mini]
    xe_dir = next(p for p in (d / "exp").glob("xe_*") if p.is_dir())
    packed = xe_dir / "packed" / "valid.cider_d.best.zip"
    manifest, members = read_packed(packed)
    feats_config = yaml.safe_load(members["feats_config.yaml"])
    assert (feats_config["feats_type"], feats_config["media_type"], feats_config["cnn"]) == ("cnn", media,
                                                                                           "random_convnet")
    assert manifest["metrics"]["CIDEr-D"] >= 0 and "media_scp" not in feats_config

    files, stage8 = {}, {}
    for dset in ["val", "test"]:
        for line in (d / "data" / dset / f"{media}.scp").read_text().splitlines():
            clip, path = line.split(" ", 1)
            files[str(d / path) if not path.startswith("/") else path] = clip
        for line in next(xe_dir.glob(f"decode_*/{dset}/text")).read_text().splitlines():
            clip, _, caption = line.partition(" ")
            stage8[clip] = caption
    out = tmp_path / "captions.json"
    r = _run([sys.executable, "-m", "captionbin.caption_infer", "--model", str(packed), "--output", str(out),
              *files], cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    got = {files[row["file"]]: row["caption"] for row in json.loads(out.read_text())}
    assert got == stage8 and len(got) == len(files) >= 3

    # the features are stage 2's: a video's frames go through the CNN in the same batches (equal);
    # stage 2 batches images as its shards fall, which may change the last bits (5e-7)
    captioner = PretrainedCaptioner.from_pretrained(packed)
    dumped = {}
    for dset in ["val", "test"]:
        dumped.update(FeatReader(str(d / "dump" / "cnn" / dset / "feats.scp")).items())
    for path, clip in files.items():
        if media == "video":
            np.testing.assert_array_equal(captioner.features(path), dumped[clip])
        else:
            np.testing.assert_allclose(captioner.features(path), dumped[clip], rtol=0, atol=1e-5)
