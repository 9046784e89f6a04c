"""Policy gradient with Monte-Carlo rollouts and a learned baseline (seed 003).

Liu et al., "Improved Image Captioning via Policy Gradient optimization of SPIDEr"
(ICCV 2017; summarised in seed 003). For one caption ``g_1 .. g_T`` (``g_T`` = eos)
sampled per clip (M = 1 in the paper):

* ``Q(g_{1:t-1}, g_t) ~= 1/K sum_k R(g_{1:t}; g^k_{t+1:T})``: K rollouts sampled from the
  current policy continuing the prefix ``g_{1:t}``; at the eos step Q is the caption's own
  reward (no rollout), after eos there are no terms;
* baseline ``B_phi(s_t)``: an MLP on the decoder hidden vector before ``g_t``
  (``model.decoder.step_hidden``), *detached* so that its gradient does not reach the
  RNN, trained by ``L_phi = mean_t (Q_t - B_phi(s_t))^2``;
* actor loss = -mean over samples of ``sum_t (Q_t - B_t).detach() * log p(g_t | s_t)``,
  an unbiased estimate of ``-grad V(s_0)`` (seed 003, gradient of ``V_theta(s_0)``).

The rollouts run under ``no_grad`` in the model's current mode, all in one batch of
(clips x steps x K) rows: each row re-feeds its prefix to the decoder (teacher forcing)
and samples from the step after it, with the same ``max_len`` truncation as
:func:`captionlib.decode.search.sample` (eos forced at the last step). The sampled
captions and all rollouts are scored in one reward call. Cost: about
``num_rollouts * mean_length`` extra captions decoded and scored per sample.
The MLE warm start is the XE model file passed as ``init_param`` to the RL trainer.
"""

from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch
from torch import nn

from captionlib.decode.search import draw_categorical, sample
from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import RL_CONF, CriticConf, SampledObjective
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option


@dataclass
class MonteCarloPGConf(CriticConf):
    """The ``rl_conf`` keys of MC-PG (``--rl_algo mc_pg``, seed 003); ``critic_lr`` is its baseline MLP's."""

    num_rollouts: int = option(3, "K, Monte-Carlo rollouts per step", RL_CONF, valid=">= 1")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (0 if there are none)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@torch.no_grad()
def rollouts(
    model, v: torch.Tensor, prefixes: torch.Tensor, depth: torch.Tensor, max_len: int,
    temperature: float = DEFAULTS.temperature,
) -> torch.Tensor:
    """Complete each prefix by sampling from the model (one row per rollout).

    Args:
        model: step-wise decoder (``first_step``, ``step``, ``eos_id``).
        v: (rows, embed) audio embedding of each row.
        prefixes: (rows, length) token ids; only the first ``depth[i]`` of row i are used
            (they must not contain eos).
        depth: (rows,) prefix lengths, 1 <= depth < max_len.
        max_len: maximum caption length in tokens, eos included (eos forced at the end).
        temperature: sampling temperature.

    Returns:
        (rows, length') full captions (prefix + continuation), eos kept, 0 after it.
    """
    rows, eos = v.size(0), model.eos_id
    if prefixes.size(1) < max_len:
        prefixes = torch.cat([prefixes, prefixes.new_zeros(rows, max_len - prefixes.size(1))], 1)
    logp, state = model.first_step(v)
    finished = torch.zeros(rows, dtype=torch.bool, device=v.device)
    toks = []
    for s in range(max_len):
        forced = depth > s
        tok = prefixes[:, s]
        if not bool(forced.all()):
            drawn = draw_categorical(logp, temperature)
            tok = torch.where(forced, tok, drawn)
        if s == max_len - 1:
            tok = torch.where(finished, tok, tok.new_full((), eos))
        toks.append(torch.where(finished, tok.new_zeros(()), tok))
        finished = finished | (tok == eos)
        if bool(finished.all()):
            break
        logp, state = model.step(tok, state)
    return torch.stack(toks, 1)


class MonteCarloPG(SampledObjective):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)``; loss = actor + baseline loss.

    Args:
        reward, tokenizer, max_len, temperature: see :class:`SampledObjective`.
        hidden_size: size of the decoder hidden vector (``model.decoder.hidden_size``).
        num_rollouts: K, rollouts per step.
        num_samples: M, captions sampled per clip (seed 003: 1).
        baseline_hidden: hidden units of the baseline MLP.

    Stats: ``reward`` (mean reward of the sampled captions), ``baseline`` (mean B_t over
    valid steps), ``advantage`` (mean Q_t - B_t over valid steps), ``q`` (mean Q_t),
    ``entropy`` (per token), ``baseline_loss``, ``rollouts`` (rollout captions scored),
    ``sample_len``.

    Raises:
        ValueError: ``num_rollouts < 1`` or ``num_samples < 1``.
    """

    Conf = MonteCarloPGConf
    paper = "Liu et al. 2017 (MC-PG)"

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        hidden_size: int,
        num_rollouts: int = MonteCarloPGConf.num_rollouts,
        max_len: int = DEFAULTS.max_len,
        temperature: float = DEFAULTS.temperature,
        num_samples: int = 1,
        baseline_hidden: int = 256,
    ):
        super().__init__(reward, tokenizer, max_len, temperature)
        if num_rollouts < 1:
            raise ValueError(f"num_rollouts must be >= 1, got {num_rollouts}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.num_rollouts, self.num_samples = num_rollouts, num_samples
        self.baseline_mlp = nn.Sequential(
            nn.Linear(hidden_size, baseline_hidden), nn.ReLU(), nn.Linear(baseline_hidden, 1)
        )

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "MonteCarloPG":
        """MC-PG (``--rl_algo mc_pg``) from :class:`captionlib.rl.options.RLOptions` (``max_len``,
        ``temperature``) and its ``rl_conf`` block ``conf`` (:class:`MonteCarloPGConf`); the baseline
        MLP reads the decoder state (``model.decoder.hidden_size``).

        Raises:
            ValueError: see the class.
        """
        return cls(reward, tokenizer, hidden_size=model.decoder.hidden_size, num_rollouts=conf.num_rollouts,
                   max_len=opts.max_len, temperature=opts.temperature)

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        actor_loss, baseline_loss, stats = self.losses(model, batch)
        return actor_loss + baseline_loss, stats

    def losses(self, model, batch) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
        """(actor_loss, baseline_loss, stats) for a ``collate_clips`` batch."""
        clips, feats, lens = self.inputs(model, batch)
        return self.losses_from_embedding(model, clips, model.encode(feats, lens))

    def q_values(self, model, clips: List[str], v: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor):
        """Monte-Carlo Q estimates for sampled captions.

        Args:
            clips: clip id of each row; v: (N, embed); tokens, mask: (N, L) from ``sample``.

        Returns:
            (q (N, L) with 0 after eos, rewards of the captions (N,), rollouts scored).
        """
        eos, k = model.eos_id, self.num_rollouts
        need = mask.bool() & (tokens != eos)  # steps followed by rollouts
        b_idx, t_idx = need.nonzero(as_tuple=True)
        rows = b_idx.repeat_interleave(k)
        roll = rollouts(
            model, v.detach()[rows], tokens[rows], (t_idx + 1).repeat_interleave(k), self.max_len, self.temperature
        )
        keys = list(clips) + [clips[i] for i in rows.tolist()]
        r_all = self.rewards(keys, self.words(tokens) + self.words(roll), v.device)
        r, r_roll = r_all[: len(clips)], r_all[len(clips):]
        q = torch.zeros(tokens.shape, dtype=r.dtype, device=v.device)
        q[b_idx, t_idx] = r_roll.view(-1, k).mean(1)
        q = torch.where(mask.bool() & (tokens == eos), r.unsqueeze(1).expand_as(q), q)
        return q, r, int(rows.numel())

    def losses_from_embedding(
        self, model, clips: List[str], v: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
        """As :meth:`losses` given the audio embeddings ``v`` (batch, embed)."""
        n = self.num_samples
        vv = v.repeat_interleave(n, 0)
        keys = [c for c in clips for _ in range(n)]
        out = sample(model, vv, self.max_len, temperature=self.temperature, return_states=True)
        q, r, nroll = self.q_values(model, keys, vv, out.tokens, out.mask)
        mask = out.mask
        b = self.baseline_mlp(out.states.detach()).squeeze(-1)  # (N, L), no gradient into the RNN
        baseline_loss = masked_mean((q - b) ** 2, mask)
        adv = (q - b).detach() * mask
        actor_loss = -(adv * out.logprobs * mask).sum(1).mean()
        ntok = mask.sum()
        return actor_loss, baseline_loss, {
            "reward": r.mean().item(),
            "baseline": (b.detach() * mask).sum().item() / ntok.item(),
            "advantage": (adv.sum() / ntok).item(),
            "q": ((q * mask).sum() / ntok).item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "baseline_loss": baseline_loss.item(),
            "rollouts": float(nroll),
            "sample_len": (ntok / mask.size(0)).item(),
        }
