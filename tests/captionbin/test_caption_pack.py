"""caption_pack: parser, the packed feature/decode configs (audio, image and video models, the
CNN each needs), errors naming the file."""

import hashlib
import zipfile
from pathlib import Path

import pytest
import yaml

from captionbin.caption_pack import get_parser, main
from captionlib.packed import (
    CNN_MEMBER,
    VISUAL_DEFAULTS,
    VISUAL_KEYS,
    PretrainedCaptioner,
    find_cnn_weights,
    pack_model,
    read_packed,
)
from packed_models import CNN_CONFIGS, make_recipe, make_visual_recipe, pack_args, visual_pack_args


def test_get_parser_and_usage():
    assert get_parser() is not None
    with pytest.raises(SystemExit):
        main([])


def test_pack_with_decode_args(tmp_path):
    recipe = make_recipe(tmp_path / "r")
    out = tmp_path / "out" / "packed.zip"
    main(pack_args(recipe, out, "--decode_args=--beam_size 4 --length_penalty 0.5 --rerank 3"))
    manifest, members = read_packed(out)
    assert yaml.safe_load(members["decode_config.yaml"]) == {
        "beam_size": 4, "batch_size": 2, "max_len": 8, "length_penalty": 0.5, "rerank": 3, "rerank_lm_weight": 0.0,
        "sample_temperature": 1.0, "sample_top_k": 0, "sample_top_p": 1.0}
    assert manifest["model_file"] == recipe["model_file"]
    assert members["config.yaml"] == open(recipe["train_config"], "rb").read()
    assert not list(out.parent.glob("*.tmp"))  # written atomically
    with zipfile.ZipFile(out) as z:
        assert z.testzip() is None


def test_an_archive_caption_infer_would_refuse_is_not_written(tmp_path, capsys):
    """--decode_args "--beam_size 0" was packed (exit 0), and caption_infer refused the archive;
    --output naming the model file replaced the trained model with the archive."""
    recipe = make_recipe(tmp_path / "r")
    with pytest.raises(SystemExit) as e:
        main(pack_args(recipe, tmp_path / "p.zip", "--decode_args=--beam_size 0"))
    assert e.value.code == 1 and "beam_size must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # caption_decode's usage (exit 2) was printed instead
        main(pack_args(recipe, tmp_path / "p.zip", "--decode_args=--bogus 1"))
    err = capsys.readouterr().err
    assert e.value.code == 1 and "--decode_config/--decode_args: unrecognized arguments: --bogus 1" in err, err
    assert "usage: caption_decode" not in err
    model = Path(recipe["model_file"])
    before = model.read_bytes()
    with pytest.raises(SystemExit) as e:
        main(pack_args(recipe, model))
    assert e.value.code == 1 and f"{model}: is also an input" in capsys.readouterr().err
    assert model.read_bytes() == before and not (tmp_path / "p.zip").exists()


def test_an_audio_feature_config_must_fit_feats_type(tmp_path, capsys):
    """--feats_type pretrained with a log-mel config packed a log-mel front end (the config's own
    feats_type won); it is resolved as stage 2 dumps: the command line wins, and the result must
    have what that type needs."""
    recipe = make_recipe(tmp_path / "r")
    args = pack_args(recipe, tmp_path / "p.zip") + ["--feats_type", "pretrained"]
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 1 and "with --feats_type pretrained: --feats_type pretrained needs --encoder" in err, err
    assert recipe["feats_config"] in err and not (tmp_path / "p.zip").exists()
    conf = tmp_path / "feats_convnext.yaml"
    conf.write_text(yaml.safe_dump({**yaml.safe_load(Path(recipe["feats_config"]).read_text()), "fs": 32000,
                                    "feats_type": "pretrained", "encoder": "convnext", "pretrained": "x.pth"}))
    args = pack_args(recipe, tmp_path / "p.zip")
    args[args.index("--feats_config") + 1] = str(conf)
    with pytest.raises(SystemExit) as e:
        main(args + ["--feats_type", "logmel"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "--encoder, --pretrained: only for --feats_type pretrained, not logmel" in err, err


def test_missing_input_fails_naming_it(tmp_path, capsys):
    recipe = make_recipe(tmp_path / "r")
    args = pack_args(recipe, tmp_path / "p.zip")
    args[args.index("--score_json") + 1] = str(tmp_path / "nope" / "score.json")
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 1 and "nope/score.json" in capsys.readouterr().err
    assert not (tmp_path / "p.zip").exists()
    args = pack_args(recipe, tmp_path / "p.zip", "--cider_df", str(tmp_path / "df.pkl"))
    with pytest.raises(SystemExit):
        main(args)
    assert "df.pkl: no such file" in capsys.readouterr().err


def test_train_config_must_be_the_models(tmp_path, capsys):
    """Any file given as --train_config was packed, another model's config.yaml too."""
    recipe = make_recipe(tmp_path / "r")
    (tmp_path / "other.yaml").write_text("encoder: cnn14\ndecoder: gru\n")
    (tmp_path / "list.yaml").write_text("- a\n")
    for config, message in [("other.yaml", "other.yaml trains encoder 'cnn14', "),
                            ("list.yaml", "list.yaml: not a training config.yaml (a YAML mapping of options)")]:
        with pytest.raises(SystemExit) as e:
            main(pack_args(recipe, tmp_path / "p.zip", "--train_config", str(tmp_path / config)))
        assert e.value.code == 1 and message in capsys.readouterr().err
        assert not (tmp_path / "p.zip").exists()
    (tmp_path / "same.yaml").write_text("encoder: crnn\ndecoder: gru\nlr: 0.1\n")  # the model's (defaults)
    main(pack_args(recipe, tmp_path / "p.zip", "--train_config", str(tmp_path / "same.yaml")))
    assert (tmp_path / "p.zip").is_file()


def test_feats_stats_must_be_the_models(tmp_path, capsys):
    """Any file given as --feats_stats was packed (a YAML file too); caption_infer failed later."""
    import numpy as np

    recipe = make_recipe(tmp_path / "r")
    (tmp_path / "stats.yaml").write_text("mean: 0\n")
    np.savez(tmp_path / "stats.npz", mean=np.zeros(3), std=np.ones(3))
    for stats, message in [("stats.yaml", "stats.yaml: not a feats_stats.npz of caption_compute_stats"),
                           ("stats.npz", "stats.npz: mean/std of shape (3,)/(3,), the model takes")]:
        args = pack_args(recipe, tmp_path / "p.zip")
        args[args.index("--feats_stats") + 1] = str(tmp_path / stats)
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 1 and message in capsys.readouterr().err
        assert not (tmp_path / "p.zip").exists()


@pytest.mark.parametrize("media_type", ["image", "video"])
def test_pack_visual_model(tmp_path, media_type):
    """feats_type cnn: the resolved caption_extract_visual_feats config with feats_type and
    media_type, nothing else needed for random_convnet (its seed is in the config)."""
    recipe = make_visual_recipe(tmp_path / "r", media_type)
    out = tmp_path / "v.zip"
    main(visual_pack_args(recipe, out))
    manifest, members = read_packed(out)
    feats = yaml.safe_load(members["feats_config.yaml"])
    assert set(feats) == {"feats_type", *VISUAL_KEYS, *VISUAL_DEFAULTS}
    assert {**feats, **CNN_CONFIGS[media_type]} == feats
    assert (feats["feats_type"], feats["media_type"]) == ("cnn", media_type)
    assert CNN_MEMBER not in members and "cnn_weights" not in manifest and manifest["train_sample_rates"] == {}


def test_visual_pack_errors_name_the_problem(tmp_path, capsys):
    recipe = make_visual_recipe(tmp_path / "r", "video")
    args = visual_pack_args(recipe, tmp_path / "p.zip")
    i = args.index("--media_type")
    with pytest.raises(SystemExit) as e:
        main(args[:i] + args[i + 2:])
    assert e.value.code == 1 and "--feats_type cnn needs --media_type" in capsys.readouterr().err
    small = make_visual_recipe(tmp_path / "small", "image", feats_dim=32)
    with pytest.raises(SystemExit):
        main(visual_pack_args(small, tmp_path / "p.zip"))
    assert "takes 32-d features" in capsys.readouterr().err
    Path(recipe["feats_config"]).write_text(yaml.safe_dump({**CNN_CONFIGS["video"], "output": "grid"}))
    with pytest.raises(SystemExit):
        main(visual_pack_args(recipe, tmp_path / "p.zip"))
    assert "video features are pooled per frame" in capsys.readouterr().err
    Path(recipe["feats_config"]).write_text(yaml.safe_dump({"cnn": "exported", "cnn_weights": "nope/cnn.pt2"}))
    with pytest.raises(SystemExit):
        main(visual_pack_args(recipe, tmp_path / "p.zip"))
    assert "nope/cnn.pt2: no such CNN weights file" in capsys.readouterr().err
    assert not (tmp_path / "p.zip").exists()
    with pytest.raises(ValueError, match="feats_type 'import' cannot be packed"):
        pack_model(tmp_path / "p.zip", recipe["model_file"], recipe["train_config"], {"feats_type": "import"},
                   recipe["feats_stats"], recipe["cider_df"])


def test_torchvision_weights_are_recorded_not_packed_and_looked_for(tmp_path, monkeypatch):
    """A torchvision CNN's weights: name, size and SHA-256 in the manifest; at loading, found where
    they were packed from or in torchvision's cache, else a clear error; another file is refused."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    weights = tmp_path / "resnet101-63fe2227.pth"
    weights.write_bytes(b"the weights")
    recipe = make_visual_recipe(tmp_path / "r", "image", {"cnn": "resnet101", "cnn_weights": str(weights)})
    out = tmp_path / "tv.zip"
    main(visual_pack_args(recipe, out))
    manifest, members = read_packed(out)
    assert manifest["cnn_weights"] == {"file": weights.name, "path": str(weights), "bytes": 11,
                                       "sha256": hashlib.sha256(b"the weights").hexdigest()}
    assert CNN_MEMBER not in members
    feats = yaml.safe_load(members["feats_config.yaml"])
    assert find_cnn_weights(feats, manifest) == str(weights)
    cache = tmp_path / "torch_home" / "hub" / "checkpoints"
    weights.rename(tmp_path / "moved.pth")
    with pytest.raises(FileNotFoundError) as e:
        find_cnn_weights(feats, manifest, name="tv.zip")
    for text in ("tv.zip", "resnet101-63fe2227.pth are not in the archive", str(cache), "--cnn_weights"):
        assert text in str(e.value), e.value
    assert find_cnn_weights(feats, manifest, given=tmp_path / "moved.pth") == str(tmp_path / "moved.pth")
    cache.mkdir(parents=True)
    (cache / weights.name).write_bytes(b"other weights")
    with pytest.raises(ValueError, match="SHA-256 differs"):
        find_cnn_weights(feats, manifest)
    (tmp_path / "moved.pth").rename(cache / weights.name)
    assert find_cnn_weights(feats, manifest) == str(cache / weights.name)
    try:
        import torchvision  # noqa: F401
    except Exception:  # not importable here: loading says so, naming the exported route
        with pytest.raises(RuntimeError, match="torchvision cannot be imported"):
            PretrainedCaptioner.from_pretrained(out)
