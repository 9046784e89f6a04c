"""Test doubles shared by the RL objective tests: an 8-token vocabulary, a word-set reward,
a tiny captioner, and a training loop recording the mean sampled reward of each step."""

from typing import Callable, List, Optional, Union

import numpy as np
import torch

from captionlib.models.captioner import Captioner

TOKENS = ["<blank>", "<unk>", "a", "dog", "barks", "rain", "falls", "<sos/eos>"]


class WordSetReward:
    """Reward = number of the candidate's words in {dog, barks} (or ``constant`` for every
    candidate); ``calls`` records ``(clip_ids, candidates, rewards)`` of each call."""

    def __init__(self, constant: Optional[float] = None):
        self.constant = constant
        self.calls = []

    def __call__(self, clip_ids, candidates):
        if self.constant is not None:
            r = np.full(len(candidates), self.constant)
        else:
            r = np.array([float(sum(w in ("dog", "barks") for w in c)) for c in candidates])
        self.calls.append((list(clip_ids), [list(c) for c in candidates], r))
        return {"reward": r}


def tiny_captioner(seed: int = 0) -> Captioner:
    """A CRNN + 16-unit GRU captioner over :data:`TOKENS`, without dropout."""
    torch.manual_seed(seed)
    return Captioner(len(TOKENS), decoder_conf={"hidden_size": 16, "dropout": 0.0}, encoder_conf={"dropout": 0.0})


def train_rewards(objective, model, batch: Union[tuple, Callable[[], tuple]], optimizer, steps: int) -> List[float]:
    """Run ``steps`` optimizer steps of ``objective``; returns the ``reward`` stat of each.
    ``batch`` is a batch, or a function returning the batch of each step."""
    rewards = []
    for _ in range(steps):
        loss, stats = objective(model, batch() if callable(batch) else batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rewards.append(stats["reward"])
    return rewards
