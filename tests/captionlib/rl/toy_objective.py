"""A toy RL objective in one file, as a user adds one (docs/design.md, "Adding an objective"):
REINFORCE without a baseline on ``num_samples`` samples per clip, times a learned scalar of its
own (so that the trainer's second parameter group is used), with its own ``rl_conf`` block."""

from dataclasses import dataclass

import torch
from torch import nn

from captionlib.train.options import option


@dataclass
class ToyConf:
    """The ``rl_conf`` keys of the toy objective."""

    num_samples: int = option(1, "captions sampled per clip", "rl_conf", valid=">= 1")
    scale_lr: float = option(0.1, "learning rate of the scalar", "rl_conf", valid="> 0")


class ToyObjective(nn.Module):
    """``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)``: minus the reward times the
    summed log-probabilities of each sample (batch * num_samples rows), times ``scale``."""

    Conf = ToyConf
    paper = "toy REINFORCE"
    built_with = None

    def __init__(self, reward, tokenizer, max_len: int, num_samples: int):
        super().__init__()
        self.reward, self.tokenizer, self.max_len, self.num_samples = reward, tokenizer, max_len, num_samples
        self.scale = nn.Parameter(torch.ones(()))

    @classmethod
    def describe(cls, conf, reward):
        """The paper cell of RESULTS.md."""
        return f"{cls.paper} ({conf.get('num_samples', 1)} samples), reward {reward}"

    @classmethod
    def from_options(cls, opts, conf, model, reward, tokenizer, train_set):
        """The objective from the shared options and its ``rl_conf`` block ``conf`` (a :class:`ToyConf`)."""
        cls.built_with = (opts, conf)
        return cls(reward, tokenizer, opts.max_len, conf.num_samples)

    def forward(self, model, batch):
        from captionlib.decode.search import sample

        clip_ids, feats, lens = batch
        v = model.encode(feats, lens).repeat_interleave(self.num_samples, 0)
        out = sample(model, v, self.max_len)
        words = [self.tokenizer.ids2text(t).split() for t in out.tokens.tolist()]
        keys = [c for c in clip_ids for _ in range(self.num_samples)]
        r = torch.as_tensor(self.reward(keys, words)["reward"], dtype=torch.float32)
        loss = -(self.scale * r * (out.logprobs * out.mask).sum(1)).mean()
        return loss, {"reward": float(r.mean())}
