"""Transformer caption decoder with a key/value cache (``decoder: transformer``).

A standard Transformer decoder (Vaswani et al. 2017, "Attention is all you need", sec. 3):
masked self-attention over the previous words, cross-attention over the encoder's frame, grid
or region outputs, a position-wise feed-forward network, each a residual block with layer
normalisation, as in CoNeTTE (Labbé et al. 2024) and the DCASE 2024 task 6 baseline.

Step-wise decoding keeps, for every layer, the self-attention keys and values of the words
fed so far and the cross-attention keys and values of the memory (computed once per clip), so
a step costs one position instead of the whole prefix (``bench/bench_transformer_decode.py``).
The step interface is the one of :mod:`captionlib.models.decoders`, so greedy and beam
search, sampling, word-level ensembles and the RL objectives run unchanged.
"""

import inspect
import math
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from captionlib.models.batch_parts import BatchParts
from captionlib.utils.distributed import Dropout

ACTIVATIONS = ("gelu", "relu")
POSITIONALS = ("sinusoidal", "learned")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_fraction(value: Any, name: str) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a number in [0, 1] (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def check_sizes(num_layers: int, d_model: int, nhead: int, activation: str, prefix: str = "",
                dim_feedforward: int = 1, dropout: float = 0.0) -> None:
    """Check a Transformer stack's options (``prefix`` names them in messages, e.g.
    ``decoder_conf.`` or ``encoder_conf.transformer.``).

    Raises:
        ValueError: one line naming the option: ``num_layers``, ``d_model``, ``nhead`` or
            ``dim_feedforward`` not a positive integer, ``d_model`` not divisible by ``nhead``,
            ``dropout`` outside [0, 1], or an ``activation`` not in :data:`ACTIVATIONS`.
    """
    for name, value in (("num_layers", num_layers), ("d_model", d_model), ("nhead", nhead),
                        ("dim_feedforward", dim_feedforward)):
        if not _positive_int(value):
            raise ValueError(f"{prefix}{name} must be a positive integer, got {value!r}")
    if d_model % nhead:
        raise ValueError(f"{prefix}d_model ({d_model}) must be divisible by nhead ({nhead}): each of the "
                         "nhead heads attends over d_model / nhead dimensions")
    _check_fraction(dropout, f"{prefix}dropout")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{prefix}activation must be one of {ACTIVATIONS}, got {activation!r}")


def check_conf(cls: type, conf: Mapping[str, Any], prefix: str) -> None:
    """Check the values of a config of :class:`TransformerDecoder` (``decoder_conf``) or
    :class:`TransformerEncoderStack` (``encoder_conf.transformer``) before anything is built
    (``caption_train --check_only``): those of ``conf``, the defaults of ``cls`` for the others.

    Raises:
        ValueError: as :func:`check_sizes` (and, for the decoder, ``positional``, ``max_len``,
            ``attention_dropout``), naming ``prefix`` + the key.
    """
    values = {n: p.default for n, p in inspect.signature(cls).parameters.items() if p.default is not p.empty}
    values.update(conf)
    cls.check_values(values, prefix)


def sinusoidal_positions(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """Sinusoidal position encodings (Vaswani et al. 2017, sec. 3.5):
    ``PE(pos, 2i) = sin(pos / 10000^(2i / d))``, ``PE(pos, 2i + 1) = cos(pos / 10000^(2i / d))``.

    Args:
        positions: (length,) integer positions (0 = the first input).
        d_model: encoding size d.

    Returns:
        (length, d_model) float32 encodings.
    """
    rates = torch.exp(torch.arange(0, d_model, 2, device=positions.device) * (-math.log(10000.0) / d_model))
    angles = positions.float()[:, None] * rates[None, :]  # (length, ceil(d / 2))
    pe = torch.empty(positions.numel(), d_model, device=positions.device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]
    return pe


def _heads(x: torch.Tensor, nhead: int) -> torch.Tensor:
    """(batch, length, d) -> (batch, nhead, length, d / nhead)."""
    return x.unflatten(-1, (nhead, -1)).transpose(1, 2)


def keys_values(attn: nn.MultiheadAttention, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of ``x`` (batch, length, d) under ``attn``'s input projection, each
    (batch, nhead, length, d / nhead): what a decoder caches."""
    d = attn.embed_dim
    k, v = F.linear(x, attn.in_proj_weight[d:], attn.in_proj_bias[d:]).chunk(2, dim=-1)
    return _heads(k, attn.num_heads), _heads(v, attn.num_heads)


def attend(attn: nn.MultiheadAttention, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
           mask: Optional[torch.Tensor] = None, causal: bool = False) -> torch.Tensor:
    """``attn``'s multi-head attention of the queries ``x`` over precomputed keys and values.

    The parameters of ``torch.nn.MultiheadAttention`` (query part of ``in_proj``, ``out_proj``)
    around ``F.scaled_dot_product_attention``; the attention weights are dropped with
    probability ``attn.dropout`` in training mode, as ``nn.MultiheadAttention`` does.

    Args:
        x: (batch, queries, d) query inputs.
        keys, values: (batch, nhead, keys, d / nhead) from :func:`keys_values`.
        mask: boolean, broadcastable to (batch, nhead, queries, keys), True where a query may
            attend; or ``None``.
        causal: query i attends to keys 0..i only (queries == keys).

    Returns:
        (batch, queries, d).
    """
    d = attn.embed_dim
    q = _heads(F.linear(x, attn.in_proj_weight[:d], attn.in_proj_bias[:d]), attn.num_heads)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal,
                                         dropout_p=attn.dropout if attn.training else 0.0)
    return attn.out_proj(out.transpose(1, 2).flatten(2))


class CachedDecoderLayer(nn.TransformerDecoderLayer):
    """``torch.nn.TransformerDecoderLayer`` (batch first) run with a self-attention key/value cache.

    Same submodules, parameters and state-dict names as torch's layer (``self_attn``,
    ``multihead_attn``, ``linear1``, ``linear2``, ``norm1..3``), whose own ``forward`` gives
    the same outputs in eval mode; this forward also takes the keys/values of the previous
    positions and returns them extended, and reads the memory's keys/values precomputed by
    :meth:`memory_keys_values`. Post-norm: ``x = norm(x + dropout(sublayer(x)))``; pre-norm:
    ``x = x + dropout(sublayer(norm(x)))``.

    The residual, feed-forward (and, in :class:`TransformerDecoder`, embedding) dropouts are
    :class:`captionlib.utils.distributed.Dropout`, whose masks follow the data-parallel
    row-sharding rule; the attention-weight dropout (``attention_dropout``) is drawn inside
    ``F.scaled_dot_product_attention`` and does not.

    Args:
        d_model, nhead, dim_feedforward: sizes (``d_model`` divisible by ``nhead``).
        dropout: residual and feed-forward dropout.
        attention_dropout: dropout on the attention weights.
        activation: ``gelu`` or ``relu`` (of the feed-forward network).
        norm_first: pre-norm (True) or post-norm (False).
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float,
                 attention_dropout: float, activation: str, norm_first: bool):
        super().__init__(d_model, nhead, dim_feedforward, dropout, activation, batch_first=True, norm_first=norm_first)
        self.dropout, self.dropout1, self.dropout2, self.dropout3 = (Dropout(dropout) for _ in range(4))
        self.self_attn.dropout = self.multihead_attn.dropout = attention_dropout

    def memory_keys_values(self, memory: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys/values (clips, nhead, frames, d / nhead) of ``memory`` (clips,
        frames, d), made contiguous once since every decoding step reads them (strided views
        made a CPU step of ``bench/bench_transformer_decode.py`` about 10% slower)."""
        return tuple(t.contiguous() for t in keys_values(self.multihead_attn, memory))

    def _sublayer(self, x: torch.Tensor, norm: nn.LayerNorm, dropout: nn.Module, fn) -> torch.Tensor:
        if self.norm_first:
            return x + dropout(fn(norm(x)))
        return norm(x + dropout(fn(x)))

    def forward(self, x: torch.Tensor, cache: Optional[Tuple[torch.Tensor, torch.Tensor]],  # type: ignore[override]
                memory_kv: Tuple[torch.Tensor, torch.Tensor], memory_mask: torch.Tensor,
                groups: Optional[Tuple[torch.Tensor, torch.Tensor, int]] = None):
        """One layer over new positions.

        Args:
            x: (rows, T, d) inputs of the new positions.
            cache: ``None`` (teacher forcing: the T positions are 0..T-1, attended causally),
                or the self-attention keys and values of the previous positions, each
                (rows, nhead, t, d / nhead), with T = 1 (the position t).
            memory_kv: keys and values of the memory from :meth:`memory_keys_values`, each
                (clips, nhead, frames, d / nhead).
            memory_mask: (clips, 1, 1, frames) boolean, True for valid memory frames.
            groups: ``None`` when row i reads clip i's memory; else ``(clip, slot, most)``
                from :func:`row_slots` (T = 1): the rows of each clip attend to its memory
                together, as the queries of one (clips, most, d) batch, so that rows
                sharing a clip (beam search's hypotheses) need no copy of its memory.

        Returns:
            (rows, T, d) outputs, and the self-attention keys and values of all positions so
            far, each (rows, nhead, t + T, d / nhead).
        """
        kv = []

        def self_attention(h):
            k, v = keys_values(self.self_attn, h)
            if cache is not None:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            kv.extend((k, v))
            return attend(self.self_attn, h, k, v, causal=cache is None)

        def cross_attention(h):
            if groups is None:
                return attend(self.multihead_attn, h, *memory_kv, memory_mask)
            clip, slot, most = groups
            packed = h.new_zeros(memory_mask.size(0), most, h.size(-1))
            packed[clip, slot] = h[:, 0]
            return attend(self.multihead_attn, packed, *memory_kv, memory_mask)[clip, slot][:, None]

        x = self._sublayer(x, self.norm1, self.dropout1, self_attention)
        x = self._sublayer(x, self.norm2, self.dropout2, cross_attention)
        x = self._sublayer(x, self.norm3, self.dropout3,
                           lambda h: self.linear2(self.dropout(self.activation(self.linear1(h)))))
        return x, tuple(kv)


def row_slots(clip: torch.Tensor, clips: int) -> Tuple[torch.Tensor, int]:
    """Each row's place among the rows of its clip.

    Args:
        clip: (rows,) clip index of each row, in 0..clips-1.
        clips: number of clips.

    Returns:
        ``slot`` (rows,): row i is the ``slot[i]``-th row of clip ``clip[i]`` (in row order),
        and the largest number of rows of one clip.
    """
    counts = torch.bincount(clip, minlength=clips)
    order = torch.argsort(clip, stable=True)
    slot = torch.empty_like(clip)
    slot[order] = torch.arange(clip.numel(), device=clip.device) - (counts.cumsum(0) - counts)[clip[order]]
    return slot, int(counts.max())


class TransformerState(NamedTuple):
    """State of :class:`TransformerDecoder`'s step-wise decoding: ``rows`` hypotheses (or
    samples) over ``clips`` encodings.

    Attributes:
        hidden: (rows, d_model) the top layer's output at the current position, after the
            final norm: what the output layer reads (:meth:`TransformerDecoder.step_hidden`).
        caches: per layer, the self-attention keys and values, each (rows, nhead, t,
            d_model / nhead), of the t positions fed so far (t is the next position).
        memory: per layer, the cross-attention keys and values of each clip's memory, each
            (clips, nhead, frames, d_model / nhead).
        memory_mask: (clips, 1, 1, frames) boolean, True for valid frames.
        clip: (rows,) the clip of each row; ``None`` while row i is clip i (no reordering yet).
    """

    hidden: torch.Tensor
    caches: Tuple[Tuple[torch.Tensor, torch.Tensor], ...]
    memory: Tuple[Tuple[torch.Tensor, torch.Tensor], ...]
    memory_mask: torch.Tensor
    clip: Optional[torch.Tensor]


class TransformerDecoder(nn.Module):
    """Transformer decoder over the encoder's frame/grid/region outputs (Vaswani et al. 2017).

    The input at position 0 is the start token (eos, ``vocab_size - 1``, as
    :class:`~captionlib.models.decoders.TopDownDecoder`), then the previous words; the input
    embedding is ``E[w] * sqrt(d_model)`` plus the position encoding (sec. 3.4-3.5), then
    dropout, as is every sublayer's output before its residual sum (sec. 5.4). Cross-attention
    reads the encoder's memory projected to ``d_model`` (a linear map when ``memory_size``
    differs, else none) with its padding masked; a plain (batch, embed)
    encoding (a pooled clip vector) is a memory of one slot. Pre-norm stacks end with a
    LayerNorm (Xiong et al. 2020), post-norm stacks do not (as ``nn.TransformerDecoder``
    without ``norm``, CoNeTTE's). The padding token (id 0) is never emitted.

    Defaults are CoNeTTE's and the DCASE 2024 task 6 baseline's decoder: 6 layers, d_model 256,
    8 heads, feed-forward 2048, dropout 0.2, GELU, post-norm, sinusoidal positions, an output
    layer apart from the embedding (Labbeti/conette-audio-captioning v0.3.1,
    ``src/conf/pl/conette.yaml``: ``nhead: 8, d_model: 256, num_decoder_layers: 6,
    decoder_dropout_p: 0.2, dim_feedforward: 2048, acti_name: gelu``, and
    ``src/conette/nn/decoders/aac_tfmer.py``; Labbeti/dcase2024-task6-baseline v1.1.0,
    ``src/dcase24t6/nn/decoders/aac_tfmer.py``, the same values as defaults). Where this
    differs: CoNeTTE's ``nn.TransformerDecoderLayer`` also drops attention weights with
    p = 0.2, here ``attention_dropout`` (0 by default, see :class:`CachedDecoderLayer`); the
    baseline's frame projection (dropout 0.5, linear 768 -> 256, ReLU, dropout 0.5, in
    ``src/dcase24t6/models/trans_decoder.py``) is here the encoder's business (e.g.
    :class:`~captionlib.models.encoders.LinearEncoder`), the decoder adding only a linear map
    when the sizes differ; word (and learned position) embeddings start from
    N(0, d_model^-1/2) as fairseq's Transformer ``Embedding`` does, so that the scaled word
    embeddings have unit variance, where CoNeTTE keeps ``nn.Embedding``'s N(0, 1).

    Encoding (from :class:`~captionlib.models.captioner.Captioner`, ``uses_memory``):
    :class:`~captionlib.models.batch_parts.BatchParts` ``(v, memory, memory_lens)``, (batch,
    embed), (batch, frames, memory_size), (batch,); or a (batch, memory_size) tensor.

    State of step-wise decoding: a :class:`TransformerState`, the per-layer key/value caches
    of the words fed so far and of the memory. :meth:`reorder_state` selects rows of the word
    caches and only re-indexes the memory (kept once per clip): beam search's hypotheses of a
    clip attend to one copy of its memory (for 32 clips of a CRNN memory of 375 frames, beam 3
    over 20 tokens took 0.95 s on one CPU thread, 5.1 s with the memory copied for every
    hypothesis at every step).

    Args:
        vocab_size: number of tokens (0 = padding, ``vocab_size - 1`` = eos/start).
        memory_size: size of the encoder's frame outputs (set by the Captioner).
        num_layers: decoder layers.
        d_model: model size (embeddings, attention, layer outputs).
        nhead: attention heads (dividing ``d_model``).
        dim_feedforward: hidden units of the position-wise feed-forward network.
        dropout: dropout on the input embeddings, the residual branches and inside the
            feed-forward network.
        attention_dropout: dropout on the attention weights.
        activation: ``gelu`` (CoNeTTE) or ``relu`` (Vaswani et al.).
        norm_first: pre-norm (True) or post-norm (False, Vaswani et al. and CoNeTTE).
        positional: ``sinusoidal`` (sec. 3.5) or ``learned`` (an embedding per position).
        max_len: positions of ``learned`` (inputs per caption, start token included); not used
            by ``sinusoidal``.
        tie_embeddings: the output layer's weight is the input embedding (sec. 3.4; Press and
            Wolf 2017); it keeps its own bias.

    Raises:
        ValueError: ``num_layers < 1``, ``d_model`` not divisible by ``nhead``, unknown
            ``activation`` or ``positional``, ``max_len < 1``; at decoding time, a learned
            position beyond ``max_len``.
    """

    uses_memory = True

    def __init__(
        self,
        vocab_size: int,
        memory_size: int = 256,
        num_layers: int = 6,
        d_model: int = 256,
        nhead: int = 8,
        dim_feedforward: int = 2048,
        dropout: float = 0.2,
        attention_dropout: float = 0.0,
        activation: str = "gelu",
        norm_first: bool = False,
        positional: str = "sinusoidal",
        max_len: int = 128,
        tie_embeddings: bool = False,
    ):
        super().__init__()
        self.check_values(dict(num_layers=num_layers, d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward,
                               dropout=dropout, attention_dropout=attention_dropout, activation=activation,
                               positional=positional, max_len=max_len))
        self.vocab_size = vocab_size
        self.d_model = self.hidden_size = d_model  # hidden_size: of step_hidden()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.positions = nn.Embedding(max_len, d_model) if positional == "learned" else None
        for emb in (self.embed, self.positions):
            if emb is not None:
                nn.init.normal_(emb.weight, 0.0, d_model ** -0.5)
        with torch.no_grad():
            self.embed.weight[0].zero_()
        self.dropout = Dropout(dropout)
        self.memory_proj = nn.Linear(memory_size, d_model) if memory_size != d_model else nn.Identity()
        self.layers = nn.ModuleList(
            CachedDecoderLayer(d_model, nhead, dim_feedforward, dropout, attention_dropout, activation, norm_first)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output = nn.Linear(d_model, vocab_size)
        if tie_embeddings:
            self.output.weight = self.embed.weight

    @staticmethod
    def check_values(conf: Mapping[str, Any], prefix: str = "decoder_conf.") -> None:
        """Check the decoder's sizes and choices (``conf``: keyword arguments of the decoder).

        Raises:
            ValueError: as :func:`check_sizes`, an ``attention_dropout`` outside [0, 1], a
                ``positional`` not in :data:`POSITIONALS`, a ``max_len`` that is no positive
                integer; naming ``prefix`` + the key.
        """
        check_sizes(conf["num_layers"], conf["d_model"], conf["nhead"], conf["activation"], prefix,
                    conf["dim_feedforward"], conf["dropout"])
        _check_fraction(conf["attention_dropout"], f"{prefix}attention_dropout")
        if conf["positional"] not in POSITIONALS:
            raise ValueError(f"{prefix}positional must be one of {POSITIONALS}, got {conf['positional']!r}")
        if not _positive_int(conf["max_len"]):
            raise ValueError(f"{prefix}max_len must be a positive integer, got {conf['max_len']!r}")

    def _embed(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Input embeddings (batch, T, d_model) of ``tokens`` (batch, T) at positions start.."""
        positions = torch.arange(start, start + tokens.size(1), device=tokens.device)
        if self.positions is None:
            pe = sinusoidal_positions(positions, self.d_model)
        elif start + tokens.size(1) > self.max_len:
            raise ValueError(f"position {start + tokens.size(1) - 1} is beyond the learned positions "
                             f"(max_len {self.max_len})")
        else:
            pe = self.positions(positions)
        x = self.embed(tokens) * math.sqrt(self.d_model)
        return self.dropout(x + pe.to(x.dtype))

    def _start(self, encoding) -> Tuple[torch.Tensor, List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Memory mask (batch, 1, 1, frames) and each layer's memory keys/values."""
        if isinstance(encoding, BatchParts):
            _, memory, lens = encoding
        else:  # a pooled (batch, embed) clip vector: one memory slot
            memory, lens = encoding[:, None], encoding.new_ones(encoding.size(0), dtype=torch.long)
        mask = (torch.arange(memory.size(1), device=memory.device)[None, :] < lens[:, None])[:, None, None, :]
        memory = self.memory_proj(memory)
        return mask, [layer.memory_keys_values(memory) for layer in self.layers]

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """Output layer; the padding token (id 0) can never be emitted."""
        logits = self.output(out)
        logits[..., 0] = float("-inf")  # in place: the linear layer's backward does not need its output
        return logits

    def _bos(self, like: torch.Tensor) -> torch.Tensor:
        """(batch, 1) start tokens (eos)."""
        return torch.full((like.size(0), 1), self.vocab_size - 1, dtype=torch.long, device=like.device)

    def forward_teacher(self, encoding, ys_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits in one causal pass.

        Args:
            encoding: see the class.
            ys_in: (batch, length) previous words, 0-padded after each caption (a padded
                position is only attended by later ones, whose targets are padding).

        Returns:
            logits (batch, length + 1, vocab): position t predicts word t+1 (the last valid
            position predicts eos), as :class:`~captionlib.models.decoders.GRUDecoder`.
        """
        mask, memory_kv = self._start(encoding)
        x = self._embed(torch.cat([self._bos(ys_in), ys_in], dim=1), 0)
        for layer, kv in zip(self.layers, memory_kv):
            x, _ = layer(x, None, kv, mask)
        return self._logits(self.norm(x))

    def _advance(self, tokens: torch.Tensor, state: TransformerState) -> Tuple[torch.Tensor, TransformerState]:
        """Feed ``tokens`` (rows,) at the next position; returns logits (rows, vocab), new state."""
        x = self._embed(tokens[:, None], state.caches[0][0].size(2))
        groups = None if state.clip is None else (state.clip, *row_slots(state.clip, state.memory_mask.size(0)))
        caches = []
        for layer, cache, memory_kv in zip(self.layers, state.caches, state.memory):
            x, kv = layer(x, cache, memory_kv, state.memory_mask, groups)
            caches.append(kv)
        hidden = self.norm(x[:, 0])
        # built field by field: the state a compiled step returned through _replace was an empty
        # TransformerState under torch 2.11's dynamo (tests/captionlib/decode/test_compiled.py on an H100)
        state = TransformerState(hidden, tuple(caches), state.memory, state.memory_mask, state.clip)
        return self._logits(hidden), state

    def first_step(self, encoding) -> Tuple[torch.Tensor, TransformerState]:
        """Feed the start token; returns (log-probs of the first word (batch, vocab), state)."""
        mask, memory_kv = self._start(encoding)
        empty = memory_kv[0][0][:, :, :0]  # (batch, nhead, 0, d_model / nhead)
        start = TransformerState(None, ((empty, empty),) * len(self.layers), tuple(memory_kv), mask, None)
        logits, state = self._advance(self._bos(mask)[:, 0], start)
        return torch.log_softmax(logits, dim=-1), state

    def step(self, tokens: torch.Tensor, state: TransformerState) -> Tuple[torch.Tensor, TransformerState]:
        """Feed the previous tokens (rows,); returns (log-probs (rows, vocab), new state)."""
        logits, state = self._advance(tokens, state)
        return torch.log_softmax(logits, dim=-1), state

    @staticmethod
    def step_hidden(state: TransformerState) -> torch.Tensor:
        """The top layer's output (rows, d_model) at the current position, e.g. for critics/baselines."""
        return state.hidden

    @staticmethod
    def reorder_state(state: TransformerState, index: torch.Tensor) -> TransformerState:
        """Select/repeat rows of the state by ``index`` (rows',): the word caches and hidden
        vectors are indexed, the memory is kept and each new row points to its clip."""
        return state._replace(
            hidden=state.hidden.index_select(0, index),
            caches=tuple((k.index_select(0, index), v.index_select(0, index)) for k, v in state.caches),
            clip=index if state.clip is None else state.clip.index_select(0, index),
        )


class TransformerEncoderStack(nn.Module):
    """Transformer encoder layers over a CNN encoder's frame outputs (``encoder_conf:
    {transformer: {...}}``): SJTU's "CNN + Transformer" audio encoder (Xu et al., "Investigating
    local and global information for automated audio captioning with transfer learning",
    ICASSP 2021: PANNs CNN14 frames, then Transformer encoder layers), on any encoder.

    The frame outputs (batch, frames', input_size) are projected to ``d_model`` (a linear map
    when the sizes differ), given sinusoidal positions (Vaswani et
    al. 2017, sec. 3.5) and dropout, then go through ``num_layers`` encoder layers with each
    clip's padding masked (so a clip's outputs do not depend on its batch in eval mode). The
    new frame outputs are zero past each clip's length; the clip vector ``v`` is their mean
    over the valid frames. The dropouts are :class:`captionlib.utils.distributed.Dropout`
    (data-parallel training equals one process), the attention weights are not dropped.

    Args:
        input_size: the CNN's output size (set by the Captioner).
        num_layers, d_model, nhead, dim_feedforward, dropout, activation (``gelu`` | ``relu``),
        norm_first: as :class:`torch.nn.TransformerEncoderLayer` (a pre-norm stack ends
            with a LayerNorm).

    Raises:
        ValueError: ``num_layers < 1``, ``d_model`` not divisible by ``nhead``, or an unknown
            ``activation``.
    """

    def __init__(self, input_size: int, num_layers: int = 2, d_model: int = 256, nhead: int = 4,
                 dim_feedforward: int = 1024, dropout: float = 0.1, activation: str = "gelu",
                 norm_first: bool = False):
        super().__init__()
        self.check_values(dict(num_layers=num_layers, d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward,
                               dropout=dropout, activation=activation))
        self.d_model = self.output_size = d_model
        self.proj = nn.Linear(input_size, d_model) if input_size != d_model else nn.Identity()
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation,
                                               batch_first=True, norm_first=norm_first)
            layer.dropout, layer.dropout1, layer.dropout2 = (Dropout(dropout) for _ in range(3))
            layer.self_attn.dropout = 0.0
            self.layers.append(layer)
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    @staticmethod
    def check_values(conf: Mapping[str, Any], prefix: str = "encoder_conf.transformer.") -> None:
        """Check the stack's sizes and choices (``conf``: its keyword arguments).

        Raises:
            ValueError: as :func:`check_sizes`, naming ``prefix`` + the key.
        """
        check_sizes(conf["num_layers"], conf["d_model"], conf["nhead"], conf["activation"], prefix,
                    conf["dim_feedforward"], conf["dropout"])

    def forward(self, frames: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Args: frames (batch, frames', input_size), lengths (batch,) valid frames (>= 1).
        Returns ``v`` (batch, d_model) and the frame outputs (batch, frames', d_model)."""
        pad = torch.arange(frames.size(1), device=frames.device)[None, :] >= lengths[:, None]  # (B, T')
        pe = sinusoidal_positions(torch.arange(frames.size(1), device=frames.device), self.d_model)
        x = self.dropout(self.proj(frames) + pe.to(frames.dtype))
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        x = self.norm(x).masked_fill(pad[..., None], 0.0)
        valid = (~pad).to(x.dtype)
        return (x * valid[..., None]).sum(1) / valid.sum(1, keepdim=True).clamp(min=1.0), x
