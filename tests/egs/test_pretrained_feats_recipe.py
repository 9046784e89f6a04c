"""egs/mini_clotho with --feats_type pretrained: stage 2 stores a frozen pretrained encoder's frame
outputs (CNN10 in the authors' checkpoint layout, random weights), and XE (encoder linear +
Transformer decoder, as the DCASE 2024 baseline trains on its precomputed ConvNeXt frames), SCST,
decoding and scoring run on them; stage 10 packs the encoder's checkpoint with the model (and
refuses another file than stage 2's), and caption_infer on the recipe's audio files gives stage
8's captions. Its own module, so that
pytest-xdist runs it beside the mini_clotho run of test_recipes.py."""

import json
import shutil

import torch
import yaml
from test_recipes import GENERATED, ROOT, _assert_caption_infer_gives_stage8, _run

from captionlib.models.panns import Cnn10Encoder, front_end_tensors
from recipe_logs import failure_report


def test_mini_clotho_on_a_frozen_encoders_frames(tmp_path):
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__")
    for sub in ["egs/TEMPLATE", "egs/clotho/local", "egs/clotho/conf", "egs/mini_clotho", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "mini_clotho"
    conf = yaml.safe_load((ROOT / "egs" / "clotho" / "conf" / "feats_panns.yaml").read_text())
    torch.manual_seed(0)
    (d / "downloads").mkdir()
    torch.save({"model": dict(Cnn10Encoder().state_dict(), **front_end_tensors(conf)), "iteration": 1},
               d / "downloads" / "cnn10.pth")
    yaml.safe_dump(dict(conf, feats_type="pretrained", encoder="cnn10", pretrained="downloads/cnn10.pth"),
                   (d / "conf" / "feats_pretrained_cnn10.yaml").open("w"))
    opts = ["--feats_type", "pretrained", "--feats_config", "conf/feats_pretrained_cnn10.yaml",
            "--xe_config", "conf/tuning/train_xe_linear_transformer_debug.yaml", "--word2vec", "false",
            "--rl_algo", "scst", "--rl_args", "--max_epoch 1 --num_iters_per_epoch 3", "--ensemble_models", "",
            "--num_diversity_samples", "0", "--metrics", "bleu,rouge_l,cider_d"]
    r = _run(["./run.sh", *opts], cwd=d, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, failure_report(r, d)
    for dset in ("train_development_validation", "validation", "evaluation"):
        dump = d / "dump" / "pretrained_cnn10" / dset
        assert (dump / "feats_type").read_text() == "pretrained\n" and (dump / "feats_dim").read_text() == "512\n"
    xe = d / "exp" / "xe_train_xe_linear_transformer_debug_pretrained_cnn10_word"
    assert yaml.safe_load((xe / "config.yaml").read_text())["encoder"] == "linear"
    assert [h["epoch"] for h in json.loads((xe / "history.json").read_text())] == [1, 2, 3]
    for model in (xe, next(xe.glob("scst_*"))):
        decode = next(model.glob("decode_*/evaluation"))
        assert (decode / "text").read_text().strip()
        assert json.loads((decode / "score.json").read_text())["CIDEr-D"] >= 0
    assert "Stage 10: Pack" in out and "Stage 10: skipped" not in out
    _assert_caption_infer_gives_stage8(d, xe, tmp_path)

    # another checkpoint under the same name after stage 2: stage 10 refuses to pack it with the model
    torch.manual_seed(1)
    torch.save({"model": dict(Cnn10Encoder().state_dict(), **front_end_tensors(conf)), "iteration": 2},
               d / "downloads" / "cnn10.pth")
    r = _run(["./run.sh", "--stage", "10", "--stop_stage", "10", *opts], cwd=d, timeout=600)
    assert r.returncode != 0
    log = (xe / "packed" / "log" / "pack.log").read_text()
    assert "downloads/cnn10.pth: not the encoder checkpoint the training features were dumped with" in log, log
