"""A test-only captioning policy whose captions can all be enumerated (test double).

Vocabulary: ``<blank> <unk> a b c <sos/eos>`` (ids 0..5, eos = 5); the policy only emits
the three words ``a b c`` (ids 2..4) and eos, and a caption has at most ``MAX_WORDS`` = 3
words, so there are 1 + 3 + 9 + 27 = 40 captions per clip.

The policy is tabular: one learnable logit vector over the 4 actions per (clip, prefix).
It exposes the part of the :class:`captionlib.models.captioner.Captioner` interface that
the RL objectives use (``encode``, ``first_step``, ``step``, ``reorder_state``, ``eos_id``,
``vocab_size``, ``decoder.step_hidden``, ``decoder.rnn.hidden_size``,
``encoder.output_size``, ``parameters()``), so that :func:`captionlib.decode.search.sample`
and the objectives run on it unchanged. Because everything is enumerable,
:meth:`TinyPolicy.expected_reward` gives the exact ``J = mean_clips E[r | clip]`` and
autograd on it the exact policy gradient.

Two details make the tests sensitive to gradient leaks:

* the audio embedding ``v = onehot(clip) * enc_scale`` depends on a learnable
  ``enc_scale`` (the logits are ``v . table[:, prefix]``), so a critic that
  back-propagates into ``v`` adds a spurious gradient;
* the hidden vector returned by ``decoder.step_hidden`` contains the current action
  probabilities (differentiable in the table), so a learned baseline that is not detached
  from the "RNN state" adds a spurious gradient too.
"""

import itertools
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

TOKENS = ["<blank>", "<unk>", "a", "b", "c", "<sos/eos>"]
WORDS = TOKENS[2:5]
WORD_IDS = [2, 3, 4]
EOS = 5
VOCAB = len(TOKENS)
MAX_WORDS = 3
EMBED = 8  # encoder.output_size: one-hot clip id padded to EMBED dims

# all word prefixes of length 0..MAX_WORDS, plus a terminal state (after eos)
PREFIXES: List[Tuple[int, ...]] = [
    p for n in range(MAX_WORDS + 1) for p in itertools.product(range(len(WORDS)), repeat=n)
]
PREFIX_ID: Dict[Tuple[int, ...], int] = {p: i for i, p in enumerate(PREFIXES)}
TERMINAL = len(PREFIXES)
NUM_STATES = TERMINAL + 1
ACTIONS = WORD_IDS + [EOS]  # action a in 0..3 -> token ACTIONS[a]

# all captions as action tuples (words 0..2, then eos = 3)
SEQUENCES: List[Tuple[int, ...]] = [p + (3,) for p in PREFIXES]


def _transition_table() -> torch.Tensor:
    """next_state[state, token] (NUM_STATES, VOCAB): eos / impossible moves -> TERMINAL."""
    nxt = torch.full((NUM_STATES, VOCAB), TERMINAL, dtype=torch.long)
    for p, i in PREFIX_ID.items():
        if len(p) < MAX_WORDS:
            for w, tok in enumerate(WORD_IDS):
                nxt[i, tok] = PREFIX_ID[p + (w,)]
    return nxt


def _allowed_mask() -> torch.Tensor:
    """(NUM_STATES, 4) True where an action is possible (only eos at full length/terminal)."""
    allowed = torch.ones(NUM_STATES, 4, dtype=torch.bool)
    for p, i in PREFIX_ID.items():
        if len(p) == MAX_WORDS:
            allowed[i, :3] = False
    allowed[TERMINAL, :3] = False
    return allowed


class _Encoder(nn.Module):
    def __init__(self, num_clips: int):
        super().__init__()
        self.output_size = EMBED
        self.scale = nn.Parameter(torch.ones(num_clips))


class _RNN:
    def __init__(self, hidden_size: int):
        self.hidden_size = hidden_size


class _Decoder(nn.Module):
    """Holds the logit table; ``step_hidden`` gives a (differentiable) 'RNN state'."""

    def __init__(self, num_clips: int):
        super().__init__()
        self.table = nn.Parameter(torch.zeros(num_clips, NUM_STATES, 4))
        self.rnn = _RNN(NUM_STATES + EMBED + 4)
        self.register_buffer("next_state", _transition_table(), persistent=False)
        self.register_buffer("allowed", _allowed_mask(), persistent=False)

    def action_logp(self, v: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Log-probs (batch, 4) of the actions at prefix states (batch,) of clips encoded by v."""
        nc = self.table.size(0)
        clip = v[:, :nc].detach().abs().argmax(1)  # v is a scaled one-hot clip indicator
        scale = v.gather(1, clip.unsqueeze(1))  # (batch, 1), differentiable in enc_scale
        logits = scale * self.table[clip, states]
        logits = logits.masked_fill(~self.allowed[states], float("-inf"))
        return torch.log_softmax(logits, -1)

    def vocab_logp(self, v: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Log-probs over the full vocabulary (batch, VOCAB); pad and unk get -inf."""
        alp = self.action_logp(v, states)
        out = alp.new_full((alp.size(0), VOCAB), float("-inf"))
        return out.index_copy(1, torch.tensor(ACTIONS, device=alp.device), alp)

    def step_hidden(self, state) -> torch.Tensor:
        prefix, v = state
        onehot = nn.functional.one_hot(prefix, NUM_STATES).to(v.dtype)
        return torch.cat([onehot, v, self.action_logp(v, prefix).exp()], dim=-1)


class TinyPolicy(nn.Module):
    """Tabular policy over captions of at most 3 words from {a, b, c}.

    Args:
        num_clips: number of distinct clips; clip ``i`` is encoded by features whose
            ``feats[:, 0, i] == 1`` (see :meth:`batch`).
        seed: initialisation of the logit table.
        logit_scale: std of the initial logits.

    The state is ``(prefix_state (batch,) long, v (batch, EMBED))``.
    """

    def __init__(self, num_clips: int = 2, seed: int = 0, logit_scale: float = 0.7):
        super().__init__()
        if num_clips > EMBED:
            raise ValueError(f"at most {EMBED} clips")
        g = torch.Generator().manual_seed(seed)
        self.num_clips = num_clips
        self.vocab_size = VOCAB
        self.eos_id = EOS
        self.encoder = _Encoder(num_clips)
        self.decoder = _Decoder(num_clips)
        with torch.no_grad():
            self.decoder.table.copy_(logit_scale * torch.randn(num_clips, NUM_STATES, 4, generator=g))

    # ---- Captioner interface -------------------------------------------------------------
    def encode(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """v (batch, EMBED) = one-hot clip id (from ``feats[:, 0]``) scaled by ``enc_scale``."""
        onehot = feats[:, 0, :EMBED]
        scale = torch.cat([self.encoder.scale, self.encoder.scale.new_ones(EMBED - self.num_clips)])
        return onehot * scale

    def first_step(self, v: torch.Tensor):
        prefix = torch.full((v.size(0),), PREFIX_ID[()], dtype=torch.long, device=v.device)
        return self.decoder.vocab_logp(v, prefix), (prefix, v)

    def step(self, tokens: torch.Tensor, state):
        prefix, v = state
        prefix = self.decoder.next_state[prefix, tokens]
        return self.decoder.vocab_logp(v, prefix), (prefix, v)

    @staticmethod
    def reorder_state(state, index: torch.Tensor):
        prefix, v = state
        return prefix.index_select(0, index), v.index_select(0, index)

    # ---- test helpers --------------------------------------------------------------------
    def batch(self, clips: Sequence[int]) -> Tuple[List[str], torch.Tensor, torch.Tensor]:
        """A ``collate_clips``-like batch (clip_ids, feats (B, 1, EMBED), lens (B,))."""
        feats = torch.zeros(len(clips), 1, EMBED)
        feats[torch.arange(len(clips)), 0, torch.as_tensor(list(clips))] = 1.0
        return [f"clip{c}" for c in clips], feats, torch.ones(len(clips), dtype=torch.long)

    def sequence_logp(self) -> torch.Tensor:
        """Exact log-probabilities (num_clips, len(SEQUENCES)) of every caption."""
        nc = self.num_clips
        v = self.encode(self.batch(range(nc))[1], None)
        out = []
        for seq in SEQUENCES:
            lp = torch.zeros(nc)
            prefix: Tuple[int, ...] = ()
            for a in seq:
                states = torch.full((nc,), PREFIX_ID[prefix], dtype=torch.long)
                lp = lp + self.decoder.action_logp(v, states)[:, a]
                if a < 3:
                    prefix = prefix + (a,)
            out.append(lp)
        return torch.stack(out, 1)

    def expected_reward(self, reward: "TableReward") -> torch.Tensor:
        """Exact J = mean over clips of E[r | clip] (differentiable in the parameters)."""
        return (self.sequence_logp().exp() * reward.table_tensor(self.num_clips)).sum(1).mean()

    def prefix_values(self, reward: "TableReward") -> Dict[Tuple[int, Tuple[int, ...]], Tuple[float, float]]:
        """Exact V(clip, prefix) = E[r | clip, prefix] and P(prefix | clip) for every prefix."""
        with torch.no_grad():
            p = self.sequence_logp().exp()
            r = reward.table_tensor(self.num_clips)
        out = {}
        for c in range(self.num_clips):
            for pref in PREFIXES:
                idx = [i for i, s in enumerate(SEQUENCES) if s[: len(pref)] == pref]
                mass = float(p[c, idx].sum())
                out[(c, pref)] = (float((p[c, idx] * r[c, idx]).sum()) / max(mass, 1e-30), mass)
        return out

    def flat_grad(self) -> torch.Tensor:
        """All parameter gradients as one vector (zeros where None)."""
        return torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.parameters()]
        )


def words_of(seq: Sequence[int]) -> Tuple[str, ...]:
    """Action tuple (eos = 3 last) -> words."""
    return tuple(WORDS[a] for a in seq if a < 3)


class TableReward:
    """Fixed reward table r(clip, caption) in [0, 1] (a test double for ``Reward``).

    ``__call__(clip_ids, candidates)`` -> ``{"reward": (N,) np.ndarray}`` like
    :class:`captionlib.rl.rewards.Reward`. Captions never produced by the policy raise
    ``KeyError``.
    """

    def __init__(self, num_clips: int = 2, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.table = {
            (f"clip{c}", words_of(s)): float(rng.uniform()) for c in range(num_clips) for s in SEQUENCES
        }
        self.calls = 0

    def __call__(self, clip_ids: Sequence[str], candidates: Sequence[Sequence[str]]) -> Dict[str, np.ndarray]:
        self.calls += 1
        return {"reward": np.array([self.table[(k, tuple(c))] for k, c in zip(clip_ids, candidates)])}

    def table_tensor(self, num_clips: int) -> torch.Tensor:
        """(num_clips, len(SEQUENCES)) rewards in the order of :data:`SEQUENCES`."""
        return torch.tensor([[self.table[(f"clip{c}", words_of(s))] for s in SEQUENCES] for c in range(num_clips)])
