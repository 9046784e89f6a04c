"""Actor-critic fine-tuning with a value network on caption prefixes (seed 002).

Shi et al., "Image Captioning based on Deep Reinforcement Learning" (seed 002, sec. 3.2-3.3):
a *policy network* (here the captioner) and a *value network* v(s_t) made of the audio
encoding, an RNN over the partial caption and a linear mapping (MLP). The value network
is trained by mean squared error to the reward (seed 002 eq. 9, ``L_v = ||v(s_t) - R||^2``);
training first fits the value network alone (warm-up), then both jointly with the
advantage ``r - V(s_t)`` at every step.

Here, for a caption ``w_1 .. w_T`` (``w_T`` = eos) sampled from the captioner for a clip
with audio embedding ``v``, and its final reward ``r``:

* state ``s_t`` = (clip, ``w_1 .. w_{t-1}``), t = 1..T (``s_1`` is the empty prefix);
* ``V(s_t) = MLP([h_t; v])`` with ``h_1 = tanh(W v)`` and ``h_{t+1} = GRU(E[w_t], h_t)``:
  the critic has its own word embedding and GRU and sees ``v.detach()``, so nothing of
  the critic's loss reaches the captioner;
* value loss = mean over the valid (clip, t) of ``(V(s_t) - r)^2``; its minimiser is
  ``E[r | s_t]``, the value of the prefix under the current policy;
* actor loss = -mean over samples of ``sum_t (r - V(s_t)).detach() * log p(w_t | s_t)``
  (positions after eos masked). Since ``V(s_t)`` does not depend on ``w_t``, this is an
  unbiased estimate of ``-grad E[r]`` for any critic.

For the first ``warmup_steps`` training calls the actor loss is 0 (a constant, no graph;
captions are sampled under ``no_grad``) and only the critic learns. The number of
training calls is a registered buffer (``num_updates``), so it is saved with the
objective's state and survives a resume.
"""

from contextlib import nullcontext
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn

from captionlib.decode.search import sample
from captionlib.rl.policy_gradient import SampledObjective
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer


class ValueNetwork(nn.Module):
    """V(s_t) for every prefix of given captions (seed 002 fig. 3: encoder + RNN + linear map).

    Args:
        vocab_size: number of tokens (id 0 = padding).
        embed_size: size of the audio embedding ``v``.
        hidden_size: size of the critic's word embeddings and GRU state.
    """

    def __init__(self, vocab_size: int, embed_size: int, hidden_size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.init = nn.Linear(embed_size, hidden_size)
        self.rnn = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(hidden_size + embed_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1)
        )

    def forward(self, v: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Values of the prefixes.

        Args:
            v: (batch, embed_size) audio embeddings (pass them detached).
            tokens: (batch, length) caption ids (eos kept, 0 after it).

        Returns:
            (batch, length): entry t is V(clip, tokens[:, :t]), the predicted final reward
            before emitting token t (entry 0 = empty prefix).
        """
        h0 = torch.tanh(self.init(v))  # (B, H)
        states = [h0.unsqueeze(1)]
        if tokens.size(1) > 1:
            out, _ = self.rnn(self.embed(tokens[:, :-1]), h0.unsqueeze(0).contiguous())
            states.append(out)
        h = torch.cat(states, 1)  # (B, L, H)
        return self.mlp(torch.cat([h, v.unsqueeze(1).expand(-1, h.size(1), -1)], -1)).squeeze(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (0 if there are none)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


class ActorCritic(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)``; loss = actor + value loss.

    Args:
        reward, tokenizer, max_len, temperature: see :class:`SampledObjective`.
        vocab_size: the captioner's vocabulary size (critic word embeddings).
        embed_size: size of the audio embedding ``v`` (``model.encoder.output_size``).
        warmup_steps: training calls that only fit the critic (seed 002: value network
            trained before joint training).
        num_samples: captions sampled per clip (1 by default).
        critic_size: word-embedding/GRU size of the critic (default ``embed_size``).

    Stats: ``reward`` (mean reward of the samples), ``baseline`` (mean V(s_1), the
    critic's estimate of the expected reward of the clip before any word), ``advantage``
    (mean of ``r - V(s_t)`` over all valid steps, what weighs the actor's log-probs),
    ``entropy`` (per token), ``value_loss``, ``warmup`` (1.0 during warm-up else 0.0),
    ``sample_len``.

    Raises:
        ValueError: ``warmup_steps < 0`` or ``num_samples < 1``.
    """

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        vocab_size: int,
        embed_size: int,
        warmup_steps: int = 100,
        max_len: int = 30,
        temperature: float = 1.0,
        num_samples: int = 1,
        critic_size: Optional[int] = None,
    ):
        super().__init__(reward, tokenizer, max_len, temperature)
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.warmup_steps, self.num_samples = warmup_steps, num_samples
        self.critic = ValueNetwork(vocab_size, embed_size, critic_size or embed_size)
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))

    @property
    def in_warmup(self) -> bool:
        """True while fewer than ``warmup_steps`` training calls were made."""
        return int(self.num_updates) < self.warmup_steps

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        actor_loss, value_loss, stats = self.losses(model, batch)
        return actor_loss + value_loss, stats

    def losses(self, model, batch) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
        """(actor_loss, value_loss, stats) for a ``collate_clips`` batch; advances the
        warm-up counter in training mode."""
        clips, feats, lens = self.inputs(model, batch)
        return self.losses_from_embedding(model, clips, model.encode(feats, lens))

    def losses_from_embedding(
        self, model, clips: List[str], v: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
        """As :meth:`losses` given the audio embeddings ``v`` (batch, embed)."""
        warm = self.in_warmup
        n = self.num_samples
        vv = v.repeat_interleave(n, 0)
        with torch.no_grad() if warm else nullcontext():
            out = sample(model, vv, self.max_len, temperature=self.temperature)
        keys = [c for c in clips for _ in range(n)]
        r = self.rewards(keys, self.words(out.tokens), v.device)  # (N,)
        mask = out.mask
        values = self.critic(vv.detach(), out.tokens)  # (N, L)
        value_loss = masked_mean((values - r.unsqueeze(1)) ** 2, mask)
        adv = (r.unsqueeze(1) - values).detach() * mask
        if warm:
            actor_loss = value_loss.new_zeros(())
        else:
            actor_loss = -(adv * out.logprobs * mask).sum(1).mean()
        if self.training:
            self.num_updates += 1
        ntok = mask.sum()
        return actor_loss, value_loss, {
            "reward": r.mean().item(),
            "baseline": values[:, 0].mean().item(),
            "advantage": (adv.sum() / ntok).item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "value_loss": value_loss.item(),
            "warmup": float(warm),
            "sample_len": (ntok / mask.size(0)).item(),
        }
