"""egs/mini_clotho with BEATs: stage 2 dumps Kaldi fbank (conf/feats_beats.yaml, frontend kaldi),
XE loads a BEATs checkpoint in the authors' layout ({"cfg", "model"}, debug sizes, random
weights) strictly into the captioner's encoder (checking its cfg and the dump's front end),
frozen for the first epoch, then trained with gradient checkpointing, under a Transformer decoder;
SCST, decoding, scoring and packing run, and caption_infer on the recipe's audio files
(computing the fbank itself) gives stage 8's
captions. Its own module, so that pytest-xdist runs it beside the mini_clotho run of
test_recipes.py."""

import json
import shutil

import torch
import yaml
from test_recipes import GENERATED, ROOT, _assert_caption_infer_gives_stage8, _run

from captionlib.models.beats import BEATsEncoder
from recipe_logs import failure_report

XE_CONFIG = "conf/tuning/train_xe_beats_transformer_debug.yaml"


def test_mini_clotho_with_a_beats_encoder(tmp_path):
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__")
    for sub in ["egs/TEMPLATE", "egs/clotho/local", "egs/clotho/conf", "egs/mini_clotho", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "mini_clotho"
    conf = yaml.safe_load((d / XE_CONFIG).read_text())["encoder_conf"]
    arch = {k: v for k, v in conf.items() if k not in ("pretrained", "lr_factor")}
    cfg = dict(arch, input_patch_size=16, conv_bias=False, activation_fn="gelu", layer_norm_first=False, deep_norm=True,
               relative_position_embedding=True, gru_rel_pos=True, finetuned_model=False, dropout=0.0)
    del cfg["classes_num"]
    torch.manual_seed(0)
    (d / "downloads").mkdir()
    state = BEATsEncoder(**arch).state_dict()
    torch.save({"cfg": cfg, "model": state}, d / "downloads" / "beats_debug.pt")
    opts = ["--feats_config", "conf/feats_beats.yaml", "--xe_config", XE_CONFIG, "--word2vec", "false",
            "--rl_algo", "scst", "--rl_args", "--max_epoch 1 --num_iters_per_epoch 3", "--ensemble_models", "",
            "--num_diversity_samples", "0", "--metrics", "bleu,rouge_l,cider_d"]
    r = _run(["./run.sh", *opts], cwd=d, timeout=1800)
    assert r.returncode == 0, failure_report(r, d)
    for dset in ("train_development_validation", "validation", "evaluation"):
        dump = d / "dump" / "logmel_beats" / dset
        assert (dump / "feats_dim").read_text() == "128\n"
        assert yaml.safe_load((dump / "feats_config.yaml").read_text())["frontend"] == "kaldi"
    xe = d / "exp" / "xe_train_xe_beats_transformer_debug_logmel_beats_word"
    assert "encoder (beats) initialised from downloads/beats_debug.pt" in (xe / "train.log").read_text()
    first = torch.load(xe / "1epoch.pth", weights_only=True)["model"]
    enc = {k[len("encoder."):]: v for k, v in first.items() if k.startswith("encoder.")}
    assert sorted(enc) == sorted(state) and all(torch.equal(enc[k], state[k]) for k in state)  # frozen in epoch 1
    last = torch.load(xe / "3epoch.pth", weights_only=True)["model"]
    assert not torch.equal(last["encoder.patch_embedding.weight"], state["patch_embedding.weight"])
    assert [h["epoch"] for h in json.loads((xe / "history.json").read_text())] == [1, 2, 3]
    for model in (xe, next(xe.glob("scst_*"))):
        decode = next(model.glob("decode_*/evaluation"))
        assert (decode / "text").read_text().strip()
        assert json.loads((decode / "score.json").read_text())["CIDEr-D"] >= 0
    _assert_caption_infer_gives_stage8(d, xe, tmp_path)
