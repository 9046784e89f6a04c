"""Smoke tests of caption_tokenize/train/rl_train/decode/average_checkpoints (ESPnet2 style)."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BINS = ["caption_tokenize", "caption_train", "caption_rl_train", "caption_decode", "caption_average_checkpoints"]
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", BINS)
def test_get_parser_and_main_without_args(name):
    mod = importlib.import_module(f"captionbin.{name}")
    assert mod.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        mod.main([])
    assert e.value.code != 0


@pytest.mark.parametrize("name", ["caption_train", "caption_rl_train"])
def test_print_config_is_loadable_yaml(name):
    out = subprocess.run(
        [sys.executable, "-m", f"captionbin.{name}", "--print_config"], capture_output=True, text=True, check=True
    ).stdout
    conf = yaml.safe_load(out)
    assert conf["batch_size"] == 32


@pytest.mark.parametrize("conf", sorted(REPO.glob("egs/*/conf/tuning/train_*.yaml")), ids=lambda p: p.name)
def test_every_recipe_train_config_parses(conf, tmp_path, capsys):
    """Each passes the checks the recipes run before stage 1 (--check_only), an RL config with the
    objective of its name (its rl_conf block is that objective's): they must refuse no valid config."""
    name = "caption_train" if conf.name.startswith("train_xe") else "caption_rl_train"
    mod = importlib.import_module(f"captionbin.{name}")
    args = mod.get_parser().parse_args(["--config", str(conf)])
    assert args.max_epoch >= 1
    required = ["--token_list", "x"] if name == "caption_train" else ["--init_param", "x", "--cider_df", "y"]
    if name == "caption_rl_train":  # the recipes pass the --rl_algo a config is for: conf/train_<algo>*.yaml
        from captionlib.rl import RL_ALGOS

        required += ["--rl_algo", max((a for a in RL_ALGOS if conf.name.startswith(f"train_{a}")), key=len)]
    with pytest.raises(SystemExit) as e:
        mod.main(["--config", str(conf), "--train_data_dir", "d", "--valid_data_dir", "d", "--output_dir",
                  str(tmp_path / "exp"), "--check_only", "true", *required])
    err = capsys.readouterr().err
    if "needs SPICE, which cannot run" not in err:  # a SPIDEr reward on a machine without the CoreNLP jars
        assert e.value.code == 0, err
    assert not (tmp_path / "exp").exists()


def test_misspelled_key_fails(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_szie: 8\n")
    from captionbin.caption_train import main

    with pytest.raises(SystemExit):
        main(["--config", str(bad), "--print_config"])


def test_average_checkpoints_of_an_untrained_dir_is_one_error_line(tmp_path, capsys):
    """Stage 7 run before stage 5 ended in a traceback."""
    from captionbin.caption_average_checkpoints import main

    with pytest.raises(SystemExit) as e:
        main(["--exp_dir", str(tmp_path / "xe"), "--nbest", "2"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "Traceback" not in err
    assert "ERROR: " in err and "history.json: missing (is " in err and "a finished training dir?)" in err
