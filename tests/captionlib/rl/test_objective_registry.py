"""The RL objective registry: one class per ``--rl_algo``, each building itself from the shared
options and its ``rl_conf`` block; a new objective trains through the same entry point as the
built-in ones."""

import json

import pytest
import torch
import yaml
from torch import nn

from captionlib.rl import RL_ALGOS, RL_OBJECTIVES, objective_class, register_objective
from tiny_training import train_tiny_xe
from toy_objective import ToyConf, ToyObjective


def test_every_built_in_algorithm_has_a_class_with_from_options():
    for name in RL_ALGOS:
        cls = objective_class(name)
        assert callable(cls.from_options) and cls.paper and cls.Conf.__doc__, name
    with pytest.raises(ValueError, match="unknown rl_algo 'scts'; choose from scst, "):
        objective_class("scts")
    with pytest.raises(TypeError, match="has no from_options"):
        register_objective("bad", nn.Module)
    with pytest.raises(TypeError, match="needs a Conf dataclass"):
        register_objective("bad", type("NoConf", (), {"from_options": classmethod(lambda cls: None)}))


def test_a_new_objective_in_one_file_trains_one_step_through_caption_rl_train(tmp_path, capsys):
    """tests/captionlib/rl/toy_objective.py is the whole objective: its class, its rl_conf block and
    its paper; registering it is the only other step (no edit to rl/options.py, rl/__init__.py or
    report/)."""
    from captionbin.caption_rl_train import main
    from captionlib.report.results import model_paper

    data = train_tiny_xe(tmp_path)
    register_objective("toy", ToyObjective)
    try:
        cmd = ["--rl_algo", "toy", "--init_param", str(tmp_path / "xe" / "valid.cider_d.best.pth"),
               "--cider_df", str(tmp_path / "cider_df.npz"), "--train_data_dir", str(data),
               "--valid_data_dir", str(data), "--batch_size", "4", "--max_epoch", "1", "--max_len", "6",
               "--num_iters_per_epoch", "1"]
        with pytest.raises(SystemExit) as e:  # its own keys are checked like the built-in ones'
            main(cmd + ["--output_dir", str(tmp_path / "bad"), "--rl_conf", "{num_sample: 2}"])
        assert e.value.code == 2
        assert "rl_conf (rl_algo toy): unknown key 'num_sample'; its keys: num_samples, scale_lr" in (
            capsys.readouterr().err)
        with pytest.raises(SystemExit):
            main(["--rl_algo", "toy", "--help"])
        assert "num_samples (int, default 1; >= 1): captions sampled per clip" in capsys.readouterr().out
        before = torch.load(tmp_path / "xe" / "valid.cider_d.best.pth", weights_only=True)["model"]
        main(cmd + ["--output_dir", str(tmp_path / "toy"), "--rl_conf", "num_samples=2"])
        config = yaml.safe_load((tmp_path / "toy" / "config.yaml").read_text())
        assert model_paper("xe/toy", config) == "toy REINFORCE (2 samples), reward CIDEr-D"
    finally:
        del RL_OBJECTIVES["toy"]
    opts, conf = ToyObjective.built_with
    assert opts.rl_algo == "toy" and conf == ToyConf(num_samples=2)
    assert config["rl_conf"] == {"num_samples": 2, "scale_lr": 0.1}  # every key of the block, written once
    history = json.loads((tmp_path / "toy" / "history.json").read_text())
    assert [h["steps"] for h in history] == [1] and "train_reward" in history[0]
    after = torch.load(tmp_path / "toy" / "latest.pth", weights_only=True)
    assert after["objective"]["scale"].item() != 1.0  # its own parameter group was updated
    changed = [k for k in before if not torch.equal(before[k], after["model"][k])]
    assert changed, "one RL step changed no weight of the captioner"
    model_file = torch.load(tmp_path / "toy" / "1epoch.pth", weights_only=True)
    assert model_file["rl_algo"] == "toy"
