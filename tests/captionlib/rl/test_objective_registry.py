"""The RL objective registry (issue 23): one class per ``--rl_algo``, each building itself
from the options; a new objective trains through the same entry point as the built-in ones."""

import json

import pytest
import torch
from torch import nn

from captionlib.rl import RL_ALGOS, RL_OBJECTIVES, objective_class, register_objective
from captionlib.rl.options import RLOptions
from tiny_training import train_tiny_xe


def test_every_built_in_algorithm_has_a_class_with_from_options():
    for name in RL_ALGOS:
        assert callable(objective_class(name).from_options), name
    with pytest.raises(ValueError, match="unknown rl_algo 'scts'; choose from scst, "):
        objective_class("scts")
    with pytest.raises(TypeError, match="has no from_options"):
        register_objective("bad", nn.Module)


class ToyObjective(nn.Module):
    """REINFORCE without a baseline on one sample per clip, with a learned temperature-free
    scalar of its own (so that the trainer's second parameter group is used)."""

    built_with = None

    def __init__(self, reward, tokenizer, max_len):
        super().__init__()
        self.reward, self.tokenizer, self.max_len = reward, tokenizer, max_len
        self.scale = nn.Parameter(torch.ones(()))

    @classmethod
    def from_options(cls, opts, model, reward, tokenizer, train_set):
        if opts.num_samples != 1:
            raise ValueError("toy: one sample per clip")
        cls.built_with = opts
        return cls(reward, tokenizer, opts.max_len)

    def forward(self, model, batch):
        from captionlib.decode.search import sample

        clip_ids, feats, lens = batch
        out = sample(model, model.encode(feats, lens), self.max_len)
        words = [self.tokenizer.ids2text(t).split() for t in out.tokens.tolist()]
        r = torch.as_tensor(self.reward(clip_ids, words)["reward"], dtype=torch.float32)
        loss = -(self.scale * r * (out.logprobs * out.mask).sum(1)).mean()
        return loss, {"reward": float(r.mean())}


def test_a_registered_objective_trains_through_train_rl(tmp_path):
    from captionlib.rl.train import train_rl

    data = train_tiny_xe(tmp_path)

    register_objective("toy", ToyObjective)
    try:
        opts = RLOptions(rl_algo="toy", init_param=str(tmp_path / "xe" / "valid.cider_d.best.pth"),
                         cider_df=str(tmp_path / "cider_df.npz"), train_data_dir=str(data),
                         valid_data_dir=str(data), output_dir=str(tmp_path / "toy"), batch_size=4,
                         max_epoch=1, max_len=6, num_iters_per_epoch=1)
        before = torch.load(opts.init_param, weights_only=True)["model"]
        train_rl(opts)
    finally:
        del RL_OBJECTIVES["toy"]
    assert ToyObjective.built_with is opts
    history = json.loads((tmp_path / "toy" / "history.json").read_text())
    assert [h["steps"] for h in history] == [1] and "train_reward" in history[0]
    after = torch.load(tmp_path / "toy" / "latest.pth", weights_only=True)
    assert after["objective"]["scale"].item() != 1.0  # its own parameter group was updated
    changed = [k for k in before if not torch.equal(before[k], after["model"][k])]
    assert changed, "one RL step changed no weight of the captioner"
    model_file = torch.load(tmp_path / "toy" / "1epoch.pth", weights_only=True)
    assert model_file["rl_algo"] == "toy"
