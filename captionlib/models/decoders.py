"""Caption decoders with a step-wise interface shared by search, sampling and ensembles.

Every decoder has ``forward_teacher(v, ys_in)``, ``first_step(v)``, ``step(tokens, state)``,
``reorder_state(state, index)`` and ``step_hidden(state)``; chosen by ``decoder:`` in the config.

- :class:`GRUDecoder` (``gru``): the decoder of seed 000 (Xu et al., DCASE 2020, sec. 2.1):
  one GRU layer of 512 units that receives the clip embedding ``v`` as its first input and the
  embedding of the previous word at the following steps (Show-and-Tell style, Vinyals et al.
  2015), dropout 0.3 on the word embeddings.
- :class:`LSTMDecoder` (``lstm``): the same with LSTM cells: Show-and-Tell (Vinyals et al.
  2015; seeds 002, 003) and, on an :class:`~captionlib.models.encoders.RNNEncoder`, seed 004's
  S2VT-style decoder.
- :class:`TopDownDecoder` (``att_lstm``): the attention LSTM + language LSTM of Anderson et al.
  2018 ("Bottom-up and top-down attention", sec. 3.2), attending over the encoder's frame or
  region outputs; seed 001's captioner.
"""

from typing import Tuple

import torch
from torch import nn

from captionlib.models.batch_parts import BatchParts, pooled
from captionlib.utils.distributed import Dropout


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

    rnn_class = nn.GRU

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
        self.hidden_size = hidden_size  # of step_hidden()
        self.init = nn.Linear(embed_size, num_layers * hidden_size) if init_state == "audio" else None
        self.embed = nn.Embedding(vocab_size, embed_size, padding_idx=0)
        self.dropout = Dropout(dropout)
        self.rnn = self.rnn_class(embed_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.output = nn.Linear(hidden_size, vocab_size)

    def forward_teacher(self, v: torch.Tensor, ys_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits.

        Args:
            v: (batch, embed_size) clip embedding (or an encoding whose first part it is).
            ys_in: (batch, length) previous words (padded with 0 after the caption).

        Returns:
            logits (batch, length + 1, vocab): position t predicts word t+1 (the last
            valid position predicts eos).
        """
        v = pooled(v)
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
        v = pooled(v)
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


class LSTMDecoder(GRUDecoder):
    """:class:`GRUDecoder` with LSTM cells (Show-and-Tell, Vinyals et al. 2015: the image
    embedding is the first input, then the previous words). The state is the pair
    ``(h, c)``, each (num_layers, batch, hidden); ``init_state: audio`` sets ``h`` from
    ``v`` and ``c`` to zeros. Same arguments and errors as :class:`GRUDecoder`.
    """

    rnn_class = nn.LSTM

    def _initial_state(self, v: torch.Tensor):
        h = super()._initial_state(v)
        return None if h is None else (h, torch.zeros_like(h))

    def step_hidden(self, state) -> torch.Tensor:
        """Top-layer hidden vector (batch, hidden_size) of a state ``(h, c)``."""
        return state[0][-1]

    @staticmethod
    def reorder_state(state, index: torch.Tensor):
        """Select/repeat batch entries of ``(h, c)``, each (num_layers, batch, hidden)."""
        return tuple(s.index_select(1, index) for s in state)


class TopDownDecoder(nn.Module):
    """Attention LSTM + language LSTM over the encoder's frame/region outputs (Anderson et
    al. 2018, "Bottom-up and top-down attention for image captioning and visual question
    answering", sec. 3.2, eqs. 2-7).

    At step t the attention LSTM reads ``[h_lang(t-1), v, W_e x(t)]`` (``v`` the pooled
    encoding, ``x(t)`` the previous word; eos stands for the start token at t = 0); the
    attention ``a_i = w^T tanh(W_m m_i + W_h h_att(t))`` over the memory ``m`` (padding
    masked) gives the attended vector; the language LSTM reads ``[attended, h_att(t)]`` and
    its output gives the word distribution.

    The encoding is :class:`~captionlib.models.batch_parts.BatchParts` ``(v, memory,
    memory_lens)``: (batch, memory_size), (batch, frames, memory_size), (batch,). The state
    is BatchParts ``(h_att, c_att, h_lang, c_lang, v, memory, memory projection, mask)``.

    Args:
        vocab_size: number of tokens (0 = padding, ``vocab_size - 1`` = eos).
        memory_size: encoder output size (set by :class:`~captionlib.models.captioner.Captioner`).
        embed_size: word embedding size.
        hidden_size: units of each LSTM (1000 in the paper).
        att_size: attention projection size (512 in the paper).
        dropout: dropout on the word embeddings and on the language LSTM output.

    Raises:
        TypeError: ``first_step``/``forward_teacher`` given a plain tensor (no memory).
    """

    uses_memory = True

    def __init__(
        self,
        vocab_size: int,
        memory_size: int = 512,
        embed_size: int = 512,
        hidden_size: int = 1000,
        att_size: int = 512,
        dropout: float = 0.5,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, embed_size, padding_idx=0)
        self.dropout = Dropout(dropout)
        self.att_lstm = nn.LSTMCell(hidden_size + memory_size + embed_size, hidden_size)
        self.lang_lstm = nn.LSTMCell(memory_size + hidden_size, hidden_size)
        self.mem_proj = nn.Linear(memory_size, att_size)
        self.hid_proj = nn.Linear(hidden_size, att_size)
        self.att_out = nn.Linear(att_size, 1)
        self.output = nn.Linear(hidden_size, vocab_size)
        self.hidden_size = hidden_size

    def _start(self, encoding) -> BatchParts:
        if not isinstance(encoding, BatchParts):
            raise TypeError("TopDownDecoder needs the encoder's memory: an encoding (v, memory, memory_lens)")
        v, memory, lens = encoding
        zeros = v.new_zeros(v.size(0), self.hidden_size)
        mask = torch.arange(memory.size(1), device=memory.device)[None, :] < lens[:, None]
        return BatchParts((zeros, zeros, zeros, zeros, v, memory, self.mem_proj(memory), mask))

    def _advance(self, tokens: torch.Tensor, state: BatchParts) -> Tuple[torch.Tensor, BatchParts]:
        """One step: previous tokens (batch,) -> logits (batch, vocab), new state."""
        h_att, c_att, h_lang, c_lang, v, memory, mem_proj, mask = state
        x = self.dropout(self.embed(tokens))
        h_att, c_att = self.att_lstm(torch.cat([h_lang, v, x], dim=-1), (h_att, c_att))
        scores = self.att_out(torch.tanh(mem_proj + self.hid_proj(h_att)[:, None, :])).squeeze(-1)
        alpha = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        attended = torch.bmm(alpha.unsqueeze(1), memory).squeeze(1)
        h_lang, c_lang = self.lang_lstm(torch.cat([attended, h_att], dim=-1), (h_lang, c_lang))
        logits = self.output(self.dropout(h_lang))
        logits[..., 0] = float("-inf")  # padding is never emitted
        return logits, BatchParts((h_att, c_att, h_lang, c_lang, v, memory, mem_proj, mask))

    def _bos(self, encoding) -> torch.Tensor:
        return torch.full((encoding.size(0),), self.vocab_size - 1, dtype=torch.long, device=encoding.device)

    def forward_teacher(self, encoding, ys_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (batch, length + 1, vocab) for previous words ``ys_in``
        (batch, length), 0-padded; position t predicts word t+1 (as :class:`GRUDecoder`)."""
        state = self._start(encoding)
        tokens = torch.cat([self._bos(encoding)[:, None], ys_in], dim=1)
        logits = []
        for t in range(tokens.size(1)):
            out, state = self._advance(tokens[:, t], state)
            logits.append(out)
        return torch.stack(logits, dim=1)

    def first_step(self, encoding) -> Tuple[torch.Tensor, BatchParts]:
        """Start from the encoding; returns (log-probs of the first word (batch, vocab), state)."""
        logits, state = self._advance(self._bos(encoding), self._start(encoding))
        return torch.log_softmax(logits, dim=-1), state

    def step(self, tokens: torch.Tensor, state: BatchParts) -> Tuple[torch.Tensor, BatchParts]:
        """Feed the previous tokens (batch,); returns (log-probs (batch, vocab), new state)."""
        logits, state = self._advance(tokens, state)
        return torch.log_softmax(logits, dim=-1), state

    @staticmethod
    def step_hidden(state: BatchParts) -> torch.Tensor:
        """The language LSTM's hidden vector (batch, hidden_size), e.g. for critics/baselines."""
        return state[2]

    @staticmethod
    def reorder_state(state: BatchParts, index: torch.Tensor) -> BatchParts:
        """Select/repeat batch entries of every part of the state by ``index``."""
        return state.index_select(0, index)
