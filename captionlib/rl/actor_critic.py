"""Actor-critic fine-tuning with a value network on caption prefixes (seed 002).

Shi et al., "Image Captioning based on Deep Reinforcement Learning" (seed 002, sec. 3.2-3.3):
a *policy network* (here the captioner) and a *value network* v(s_t) made of an image
encoder (its own CNN, fig. 3), an RNN over the partial caption and a linear mapping (MLP).
The value network is trained by mean squared error to the reward (seed 002 eq. 9,
``L_v = ||v(s_t) - R||^2``); training first fits the value network alone (warm-up), then
both jointly with the advantage ``R - v(s_t)`` at every step (eq. 10-11).

Two options choose how close to the paper this is:

* ``reward_type``: ``metric`` (default) is the configured :class:`Reward` (CIDEr-D unless
  ``--reward`` says otherwise), i.e. *A2C with a CIDEr-D reward*, not the paper's reward.
  ``embedding`` is the paper's reward (sec. 3.3.1, eq. 5-7): the cosine between the clip
  and the caption in a jointly trained audio-caption embedding space
  (:class:`captionlib.rl.embedding.AudioCaptionEmbedding`). The embedding is trained on
  every training call by the hinge ranking loss of eq. 5
  (:func:`captionlib.rl.embedding.ranking_loss`, margin ``embedding_margin``) over the
  batch's clips, each paired with one of its reference captions drawn at random (from
  ``reward.refs``), the other clips of the batch being the negatives. It learns from the
  first call, so the ``warmup_steps`` calls during which the actor is frozen are also its
  pre-training on the references (the paper trains the networks separately first,
  sec. 3.3.2; raise ``warmup_steps`` to pre-train longer). Eq. 7 writes the joint loss
  ``L_j = alpha (L_e + R_T)``; here the embedding minimises ``L_e`` alone: ``alpha`` only
  scales a loss that is the sole one reaching the embedding's parameters (the trainer's
  Adam is invariant to that, up to its epsilon and gradient clipping), and minimising
  ``+R_T`` literally would lower the reward of the policy's own captions, which the paper
  does not discuss. The reward of a sampled
  caption is computed without gradient, so the embedding does not learn from samples.
* ``value_encoder``: ``shared`` (default) feeds the critic the captioner's audio embedding
  ``v``, detached; ``separate`` gives the critic its own audio encoder on the features, as
  the paper's value network has its own CNN: a
  :class:`captionlib.rl.embedding.FrameEncoder` (per-frame LayerNorm + 2-layer MLP, mean
  over the valid frames) of size ``critic_size``. The paper's value network and embedding
  share their CNN, RNN and ``l_e`` (sec. 3.3.1); here they are separate modules, so the
  reward does not move with the value loss.

For a caption ``w_1 .. w_T`` (``w_T`` = eos) sampled from the captioner for a clip with
critic input ``u`` (``v.detach()`` or the critic's own encoding of the clip) and its final
reward ``r``:

* state ``s_t`` = (clip, ``w_1 .. w_{t-1}``), t = 1..T (``s_1`` is the empty prefix);
* ``V(s_t) = MLP([h_t; u])`` with ``h_1 = tanh(W u)`` and ``h_{t+1} = GRU(E[w_t], h_t)``:
  the critic has its own word embedding and GRU, so nothing of the critic's loss reaches
  the captioner;
* value loss = mean over the valid (clip, t) of ``(V(s_t) - r)^2``; its minimiser is
  ``E[r | s_t]``, the value of the prefix under the current policy;
* actor loss = -mean over samples of ``sum_t (r - V(s_t)).detach() * log p(w_t | s_t)``
  (positions after eos masked). Since ``V(s_t)`` does not depend on ``w_t``, this is an
  unbiased estimate of ``-grad E[r]`` for any critic (for the embedding reward: with the
  embedding held at its current parameters).

For the first ``warmup_steps`` training calls the actor loss is 0 (a constant, no graph;
captions are sampled under ``no_grad``) and only the critic (and embedding) learn. The
number of training calls is a registered buffer (``num_updates``), so it is saved with the
objective's state and survives a resume.
"""

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch import nn

from captionlib.data.datasets import pad_ids
from captionlib.models.batch_parts import pooled
from captionlib.rl.embedding import AudioCaptionEmbedding, FrameEncoder, ranking_loss
from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import RL_CONF, CriticConf, LogprobsConf, SampledObjective
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option

#: The rewards (``metric``: the ``--reward`` metrics, i.e. A2C with a CIDEr-D reward;
#: ``embedding``: seed 002's audio-caption embedding cosine) and the critic's audio encoders.
REWARD_TYPES = ("metric", "embedding")
VALUE_ENCODERS = ("shared", "separate")


@dataclass
class ActorCriticConf(LogprobsConf, CriticConf):
    """The ``rl_conf`` keys of actor-critic (``--rl_algo ac``, seed 002)."""

    critic_warmup_steps: int = option(100, "steps training the critic only", RL_CONF, valid=">= 0")
    num_samples: int = option(1, "captions sampled per clip", RL_CONF, valid=">= 1")
    reward_type: str = option(
        "metric", "the --reward metrics (metric: A2C with a CIDEr-D reward by default) or seed 002's reward, the "
                  "cosine of clip and caption in a jointly trained embedding (embedding)", RL_CONF, REWARD_TYPES)
    value_encoder: str = option(
        "shared", "the critic reads the captioner's detached audio embedding (shared) or has its own audio "
                  "encoder (separate, seed 002)", RL_CONF, VALUE_ENCODERS)
    embedding_size: int = option(256, "reward_type embedding: embedding space size", RL_CONF, valid=">= 1")
    embedding_margin: float = option(
        0.2, "reward_type embedding: margin of the bidirectional hinge ranking loss (seed 002 eq. 5)", RL_CONF,
        valid=">= 0")


class ValueNetwork(nn.Module):
    """V(s_t) for every prefix of given captions (seed 002 fig. 3: encoder + RNN + linear map).

    Args:
        vocab_size: number of tokens (id 0 = padding).
        embed_size: size of the audio input ``u`` (the captioner's ``v``, or the output of
            the critic's own encoder).
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
            v: (batch, embed_size) audio inputs ``u`` (pass the captioner's ``v`` detached).
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
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)``; loss = actor loss +
    value loss (+ embedding loss).

    With the defaults this is A2C with a CIDEr-D (``reward``) reward and a critic on the
    captioner's detached embedding; ``reward_type="embedding", value_encoder="separate"``
    is seed 002's reward and value network (see the module docstring).

    Args:
        reward, tokenizer, max_len, temperature, sample_logprobs: see :class:`SampledObjective`.
        vocab_size: the captioner's vocabulary size (critic and embedding word vectors).
        embed_size: size of the captioner's audio embedding ``v`` (``model.embed_size``).
        warmup_steps: training calls that only fit the critic (and the embedding) (seed 002:
            value network trained before joint training).
        num_samples: captions sampled per clip (1 by default).
        critic_size: word-embedding/GRU size of the critic, and output size of its own
            encoder with ``value_encoder="separate"`` (default ``embed_size``).
        reward_type: ``metric`` (``reward``'s weighted metrics) or ``embedding`` (cosine in
            the jointly trained audio-caption space, seed 002 eq. 6; needs ``reward.refs``
            ``{clip_id: [[word, ...], ...]}`` and ``n_mels``).
        value_encoder: ``shared`` (critic on ``v.detach()``) or ``separate`` (critic on its
            own :class:`FrameEncoder` of the features; needs ``n_mels``).
        n_mels: feature dimension of the clips (``model.feats_mean.numel()``).
        embedding_size: size of the embedding space and of its encoders.
        embedding_margin: margin of the ranking loss (seed 002 eq. 5's gamma, in (0, 1); the
            paper gives no value).

    Stats: ``reward`` (mean reward of the samples), ``baseline`` (mean V(s_1), the
    critic's estimate of the expected reward of the clip before any word), ``advantage``
    (mean of ``r - V(s_t)`` over all valid steps, what weighs the actor's log-probs),
    ``entropy`` (per token), ``value_loss``, ``warmup`` (1.0 during warm-up else 0.0),
    ``sample_len``; with the embedding reward also ``embedding_loss``.

    Raises:
        ValueError: ``warmup_steps < 0``, ``num_samples < 1``, unknown ``reward_type`` or
            ``value_encoder``, ``n_mels`` missing where needed, a negative
            ``embedding_margin``, or the embedding reward with a ``reward`` without ``refs``.
    """

    Conf = ActorCriticConf
    paper = "Shi et al. (actor-critic)"

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        vocab_size: int,
        embed_size: int,
        warmup_steps: int = ActorCriticConf.critic_warmup_steps,
        max_len: int = DEFAULTS.max_len,
        temperature: float = DEFAULTS.temperature,
        num_samples: int = ActorCriticConf.num_samples,
        critic_size: Optional[int] = None,
        reward_type: str = ActorCriticConf.reward_type,
        value_encoder: str = ActorCriticConf.value_encoder,
        n_mels: Optional[int] = None,
        embedding_size: int = ActorCriticConf.embedding_size,
        embedding_margin: float = ActorCriticConf.embedding_margin,
        sample_logprobs: str = ActorCriticConf.sample_logprobs,
    ):
        super().__init__(reward, tokenizer, max_len, temperature, sample_logprobs=sample_logprobs)
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type must be one of {REWARD_TYPES}, got {reward_type!r}")
        if value_encoder not in VALUE_ENCODERS:
            raise ValueError(f"value_encoder must be one of {VALUE_ENCODERS}, got {value_encoder!r}")
        if n_mels is None and (reward_type == "embedding" or value_encoder == "separate"):
            raise ValueError("the embedding reward and the separate value encoder need n_mels")
        if embedding_margin < 0:
            raise ValueError(f"embedding_margin must be >= 0, got {embedding_margin}")
        if reward_type == "embedding" and getattr(reward, "refs", None) is None:
            raise ValueError("the embedding reward needs the train references (reward.refs)")
        self.warmup_steps, self.num_samples = warmup_steps, num_samples
        self.reward_type, self.embedding_margin = reward_type, embedding_margin
        critic_size = critic_size or embed_size
        self.value_encoder = FrameEncoder(n_mels, critic_size) if value_encoder == "separate" else None
        critic_in = embed_size if self.value_encoder is None else critic_size
        self.critic = ValueNetwork(vocab_size, critic_in, critic_size)
        self.embedding = (
            AudioCaptionEmbedding(n_mels, vocab_size, embedding_size) if reward_type == "embedding" else None
        )
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))

    @classmethod
    def check_options(cls, opts, conf) -> None:
        """Raises ValueError: ``fluency_penalty`` with ``reward_type: embedding`` (the penalty
        multiplies the ``--reward`` metrics, which that reward does not use)."""
        if opts.fluency_penalty > 0 and conf.reward_type == "embedding":
            raise ValueError("fluency_penalty applies to the --reward metrics, not to rl_conf reward_type embedding")

    @classmethod
    def describe(cls, conf: Mapping[str, Any], reward: str) -> str:
        """The ``paper`` cell: ``"A2C, <reward> reward (Shi et al. value network)"``, or seed 002's
        ``"Shi et al. (actor-critic, embedding reward)"`` with ``reward_type: embedding``."""
        if conf.get("reward_type") == "embedding":
            return "Shi et al. (actor-critic, embedding reward)"
        return f"A2C, {reward} reward (Shi et al. value network)"

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "ActorCritic":
        """Actor-critic (``--rl_algo ac``) from :class:`captionlib.rl.options.RLOptions` (``max_len``,
        ``temperature``) and its ``rl_conf`` block ``conf`` (:class:`ActorCriticConf`); the critic's
        sizes come from ``model`` (vocabulary, ``embed_size``, feature dimension).

        Raises:
            ValueError: see the class.
        """
        return cls(
            reward, tokenizer, vocab_size=model.vocab_size, embed_size=model.embed_size,
            warmup_steps=conf.critic_warmup_steps, max_len=opts.max_len, temperature=opts.temperature,
            num_samples=conf.num_samples, reward_type=conf.reward_type, value_encoder=conf.value_encoder,
            n_mels=model.feats_mean.numel(), embedding_size=conf.embedding_size,
            embedding_margin=conf.embedding_margin, sample_logprobs=conf.sample_logprobs,
        )

    @property
    def in_warmup(self) -> bool:
        """True while fewer than ``warmup_steps`` training calls were made."""
        return int(self.num_updates) < self.warmup_steps

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        actor_loss, own_loss, stats = self.losses(model, batch)
        return actor_loss + own_loss, stats

    def losses(self, model, batch) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
        """(actor_loss, own_loss, stats) for a ``collate_clips`` batch; ``own_loss`` = value
        loss + embedding loss (0 with the metric reward), the loss of the objective's own
        networks. Advances the warm-up counter in training mode."""
        clips, feats, lens = self.inputs(model, batch)
        return self.losses_from_embedding(model, clips, model.encode(feats, lens), feats, lens)

    def reference_tokens(self, clips: List[str], device) -> Tuple[torch.Tensor, torch.Tensor]:
        """One reference caption per clip, drawn uniformly among the clip's ``reward.refs``:
        tokens (batch, length) with eos appended, 0-padded, and lengths (batch,).

        Raises:
            KeyError: a clip without references.
        """
        refs = self.reward.refs
        ids = []
        for c in clips:
            words = refs[c][int(torch.randint(len(refs[c]), ()))]
            ids.append(np.array(self.tokenizer.text2ids(" ".join(words)) + [self.tokenizer.eos_id]))
        tokens, lengths = pad_ids(ids)
        return tokens.to(device), lengths.to(device)

    def losses_from_embedding(
        self, model, clips: List[str], v: torch.Tensor,
        feats: Optional[torch.Tensor] = None, lens: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, float]]:
        """As :meth:`losses` given the audio embeddings ``v`` (batch, embed); ``feats``
        (batch, frames, n_mels) and ``lens`` (batch,) are needed by the embedding reward and
        the separate value encoder.

        Raises:
            ValueError: ``feats``/``lens`` missing where needed.
        """
        if (feats is None or lens is None) and (self.embedding is not None or self.value_encoder is not None):
            raise ValueError("the embedding reward and the separate value encoder need feats and lens")
        warm = self.in_warmup
        n = self.num_samples
        vv = v.repeat_interleave(n, 0)
        with torch.no_grad() if warm else nullcontext():
            words, out = self.draw(model, vv, words=self.embedding is None)  # the embedding reward reads tokens
        mask = out.mask
        stats: Dict[str, float] = {}
        own_loss = mask.new_zeros(())
        if self.embedding is None:
            keys = [c for c in clips for _ in range(n)]
            r = self.rewards(keys, words, v.device)  # (N,)
        else:
            audio = self.embedding.embed_audio(feats, lens)  # (B, D)
            with torch.no_grad():  # seed 002 eq. 6
                caps = self.embedding.embed_captions(out.tokens, mask.sum(1).long())
                r = (audio.detach().repeat_interleave(n, 0) * caps).sum(1)
            ref_tokens, ref_lens = self.reference_tokens(clips, v.device)
            index = {c: i for i, c in enumerate(dict.fromkeys(clips))}
            ids = torch.tensor([index[c] for c in clips], device=v.device)
            same = ids[:, None] == ids[None, :]  # repeated clips are not negatives of each other
            emb_loss = ranking_loss(
                audio, self.embedding.embed_captions(ref_tokens, ref_lens), self.embedding_margin, same
            )
            own_loss = own_loss + emb_loss
            stats["embedding_loss"] = emb_loss.item()
        if self.value_encoder is None:
            critic_in = pooled(vv).detach()
        else:
            critic_in = self.value_encoder(feats, lens).repeat_interleave(n, 0)
        values = self.critic(critic_in, out.tokens)  # (N, L)
        value_loss = masked_mean((values - r.unsqueeze(1)) ** 2, mask)
        adv = (r.unsqueeze(1) - values).detach() * mask
        if warm:
            actor_loss = value_loss.new_zeros(())
        else:
            actor_loss = -(adv * out.logprobs * mask).sum(1).mean()
        if self.training:
            self.num_updates += 1
        ntok = mask.sum()
        return actor_loss, own_loss + value_loss, {
            "reward": r.mean().item(),
            "baseline": values[:, 0].mean().item(),
            "advantage": (adv.sum() / ntok).item(),
            "entropy": (out.entropy.sum() / ntok).item(),
            "value_loss": value_loss.item(),
            "warmup": float(warm),
            "sample_len": (ntok / mask.size(0)).item(),
            **stats,
        }
