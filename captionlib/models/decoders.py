"""Caption decoders with a step-wise interface shared by search, sampling and ensembles.

:class:`GRUDecoder` is the decoder of seed 000 (Xu et al., DCASE 2020, sec. 2.1): one GRU
layer of 512 units that receives the audio embedding ``v`` as its first input and the
embedding of the previous word at the following steps (Show-and-Tell style, Vinyals et al.
2015), dropout 0.3 on the word embeddings.
"""

from typing import Tuple

import torch
from torch import nn


class GRUDecoder(nn.Module):
    """One-layer GRU decoder fed ``v`` first, then the previous words.

    Args:
        vocab_size: number of tokens (index 0 = padding).
        embed_size: word embedding size; equals the encoder output size since ``v``
            is fed through the same input.
        hidden_size: GRU units.
        num_layers: GRU layers.
        dropout: dropout on the word embeddings.
        init_state: ``zeros`` (seed 000: the GRU starts from a zero state and hears ``v``
            only as its first input) or ``audio``: the initial state of every layer is also
            ``tanh(W v + b)`` (Show, Attend and Tell's initialisation), which conditions every
            step on the audio more directly.

    Raises:
        ValueError: unknown ``init_state``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_size: int = 256,
        hidden_size: int = 512,
        num_layers: int = 1,
        dropout: float = 0.3,
        init_state: str = "zeros",
    ):
        super().__init__()
        if init_state not in ("zeros", "audio"):
            raise ValueError(f"init_state must be zeros or audio, got {init_state!r}")
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.init = nn.Linear(embed_size, num_layers * hidden_size) if init_state == "audio" else None
        self.embed = nn.Embedding(vocab_size, embed_size, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(embed_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.output = nn.Linear(hidden_size, vocab_size)

    def forward_teacher(self, v: torch.Tensor, ys_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits.

        Args:
            v: (batch, embed_size) audio embedding.
            ys_in: (batch, length) previous words (padded with 0 after the caption).

        Returns:
            logits (batch, length + 1, vocab): position t predicts word t+1 (the last
            valid position predicts eos).
        """
        x = torch.cat([v.unsqueeze(1), self.dropout(self.embed(ys_in))], dim=1)
        out, _ = self.rnn(x, self._initial_state(v))
        return self._logits(out)

    def _initial_state(self, v: torch.Tensor):
        """(num_layers, batch, hidden) initial state from ``v``, or ``None`` (zeros)."""
        if self.init is None:
            return None
        return torch.tanh(self.init(v)).view(v.size(0), self.num_layers, -1).transpose(0, 1).contiguous()

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """Output layer; the padding token (id 0) can never be emitted."""
        logits = self.output(out)
        logits[..., 0] = float("-inf")  # in place: the linear layer's backward does not need its output
        return logits

    def first_step(self, v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Feed ``v``; returns (log-probs of the first word (batch, vocab), state)."""
        out, state = self.rnn(v.unsqueeze(1), self._initial_state(v))
        return torch.log_softmax(self._logits(out[:, 0]), dim=-1), state

    def step(self, tokens: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Feed the previous tokens (batch,); returns (log-probs (batch, vocab), new state)."""
        out, state = self.rnn(self.dropout(self.embed(tokens)).unsqueeze(1), state)
        return torch.log_softmax(self._logits(out[:, 0]), dim=-1), state

    def step_hidden(self, state: torch.Tensor) -> torch.Tensor:
        """Top-layer hidden vector (batch, hidden_size) of a state, e.g. for critics/baselines."""
        return state[-1]

    @staticmethod
    def reorder_state(state: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Select/repeat batch entries of a state (num_layers, batch, hidden) by ``index``."""
        return state.index_select(1, index)
