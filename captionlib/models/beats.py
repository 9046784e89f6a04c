"""The BEATs audio Transformer (``encoder: beats``), loadable from the authors' published checkpoints.

Reference: S. Chen, Y. Wu, C. Wang, S. Liu, D. Tompkins, Z. Chen, F. Wei, "BEATs: Audio
Pre-Training with Acoustic Tokenizers", ICML 2023 (arXiv:2212.09058); code
github.com/microsoft/unilm, ``beats/BEATs.py`` and ``beats/backbone.py`` (``BEATs``,
``TransformerEncoder``, ``TransformerSentenceEncoderLayer``, ``MultiheadAttention``), itself
built on fairseq's wav2vec 2.0 and WavLM encoders. The checkpoints (``BEATs_iter3_plus_AS2M.pt``,
self-supervised only, no head; ``BEATs_iter3_plus_AS2M_finetuned_on_AS2M_cpt2.pt``, fine-tuned on
AudioSet-2M, 527 classes) are linked from that directory's README; users download them, nothing is fetched at run time.
They are ``{"cfg": {...}, "model": state_dict}``: the modules and parameter names here are the
authors', so :func:`load_pretrained` loads them strictly, after checking the ``cfg`` against
the encoder's options:

- input: Kaldi fbank, 128 bands at 16 kHz, 25 ms frames every 10 ms (stage 2 with
  ``egs/clotho/conf/feats_beats.yaml``, ``frontend: kaldi``:
  :class:`~captionlib.audio.features.KaldiFbank`), normalised as the authors do,
  ``(fbank - 15.41663) / (2 * 6.55582)``;
- ``patch_embedding``: ``Conv2d(1, 512, 16, stride 16, no bias)`` over (time, mel): 16 x 16
  patches, T frames -> T // 16 time steps of 128 // 16 = 8 patches, flattened time-major into
  ``8 * (T // 16)`` tokens; ``layer_norm``; ``post_extract_proj`` (512 -> 768);
- ``encoder``: ``pos_conv`` (a weight-normalised grouped ``Conv1d`` over the tokens, kernel 128,
  16 groups, its last output dropped, GELU) added to the tokens, ``layer_norm``, then 12
  post-LayerNorm Transformer layers with DeepNorm residuals (``x * (2 * 12) ** 0.25`` plus the
  sub-layer) and a gated relative position bias: T5 buckets of the token distance (320 buckets,
  distances to 800) from one ``relative_attention_bias`` table, shared by all layers (every
  layer's state dict names it, as the authors'), scaled per query and head by a gate computed
  from the query (``grep_linear``, ``grep_a``; WavLM's gated relative position bias);
- ``predictor``: the 527-class AudioSet head of a fine-tuned checkpoint, loaded and not used.

The encoder's frame outputs are the last layer's tokens averaged over the 8 frequency patches
of each time step: (batch, T // 16, 768), one frame per 160 ms; ``v`` is their mean over the
clip's valid frames (the mean over tokens that the authors' predictor takes).
"""

import logging
import math
from typing import Any, Dict, Mapping, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from captionlib.models.encoders import checkpointed, masked_mean
from captionlib.models.panns import FrontEndMismatchError
from captionlib.models.pretrained_load import check_keys, check_state_dict, require_checkpoint
from captionlib.utils.distributed import Dropout
from captionlib.utils.fileio import load_checkpoint

#: where users get the published checkpoints (named when one is missing: nothing is downloaded)
CHECKPOINT_SOURCE = ("BEATs_iter3_plus_AS2M_finetuned_on_AS2M_cpt2.pt (fine-tuned on AudioSet-2M: "
                     "encoder_conf.classes_num 527) or BEATs_iter3_plus_AS2M.pt (self-supervised only: classes_num 0), "
                     "linked from https://github.com/microsoft/unilm/tree/master/beats (README.md)")
#: the authors' fbank normalisation (``BEATs.preprocess``): ``(fbank - mean) / (2 * std)``
FBANK_MEAN, FBANK_STD = 15.41663, 6.55582
#: the patch size in frames and mel bands; a batch of fewer frames is padded to it
PATCH = 16
#: the front end the checkpoints were trained on (``torchaudio.compliance.kaldi.fbank`` with
#: ``num_mel_bins=128, sample_frequency=16000, frame_length=25, frame_shift=10``)
FRONT_END = {"frontend": "kaldi", "fs": 16000, "n_mels": 128, "win_length_s": 0.025, "hop_length_s": 0.01,
             "fmin": 20.0, "fmax": None}
#: checkpoint ``cfg`` keys with the one value this implementation has
FIXED_CFG = {"input_patch_size": PATCH, "conv_bias": False, "activation_fn": "gelu", "layer_norm_first": False,
             "deep_norm": True, "relative_position_embedding": True, "gru_rel_pos": True}
#: the authors' ``BEATsConfig`` defaults of the ``cfg`` keys compared (a key absent from a
#: checkpoint's ``cfg`` has its default there)
CFG_DEFAULTS = {"input_patch_size": -1, "embed_dim": 512, "conv_bias": False, "encoder_layers": 12,
                "encoder_embed_dim": 768, "encoder_ffn_embed_dim": 3072, "encoder_attention_heads": 12,
                "activation_fn": "gelu", "layer_norm_first": False, "deep_norm": False, "conv_pos": 128,
                "conv_pos_groups": 16, "relative_position_embedding": False, "num_buckets": 320,
                "max_distance": 1280, "gru_rel_pos": False, "finetuned_model": False, "predictor_class": 527}


class WeightNormConv1d(nn.Module):
    """A ``Conv1d`` whose weight is ``weight_v`` scaled to norm ``weight_g`` per kernel tap: the
    parameters ``torch.nn.utils.weight_norm(conv, dim=2)`` makes (``weight_g`` (1, 1, kernel),
    ``weight_v``, ``bias``), under the same names.

    Args:
        channels: input and output channels; kernel: kernel size; groups: channel groups.
    """

    def __init__(self, channels: int, kernel: int, groups: int):
        super().__init__()
        self.padding, self.groups = kernel // 2, groups
        v = torch.randn(channels, channels // groups, kernel) * math.sqrt(4.0 / (kernel * channels))
        self.weight_v = nn.Parameter(v)
        self.weight_g = nn.Parameter(v.norm(dim=(0, 1), keepdim=True))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, channels, tokens) -> (batch, channels, tokens + 1 - kernel % 2)."""
        weight = self.weight_v * (self.weight_g / self.weight_v.norm(dim=(0, 1), keepdim=True))
        return F.conv1d(x, weight, self.bias, padding=self.padding, groups=self.groups)


class PositionalConv(nn.Sequential):
    """The authors' ``pos_conv``: :class:`WeightNormConv1d` (module ``0``), its last output
    dropped when the kernel is even (``SamePad``), GELU; on (batch, tokens, channels)."""

    def __init__(self, channels: int, kernel: int, groups: int):
        super().__init__(WeightNormConv1d(channels, kernel, groups), nn.GELU())
        self.trim = 1 if kernel % 2 == 0 else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """(batch, tokens, channels) -> the same shape."""
        y = self[0](x.transpose(1, 2))
        return self[1](y[..., : y.size(-1) - self.trim]).transpose(1, 2)


def relative_buckets(length: int, num_buckets: int, max_distance: int, device=None) -> torch.Tensor:
    """T5's bidirectional relative-position buckets (the authors' ``_relative_positions_bucket``):
    (length, length) long, for key position minus query position.

    Half the buckets are for positive distances; within each half, distances below a quarter of
    the buckets have one bucket each, longer ones share logarithmically spaced buckets up to
    ``max_distance`` (and the last bucket beyond)."""
    pos = torch.arange(length, device=device)
    rel = pos[None, :] - pos[:, None]
    half = num_buckets // 2
    exact = half // 2
    dist = rel.abs()
    large = exact + (torch.log(dist.float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    large = large.clamp(max=half - 1)
    return (rel > 0).long() * half + torch.where(dist < exact, dist, large)


class GatedRelPosAttention(nn.Module):
    """The authors' ``MultiheadAttention`` as BEATs uses it: self-attention of ``num_heads``
    heads with a gated relative position bias.

    Scores are ``q . k / sqrt(head_dim)`` plus, per head and query, ``gate * bias``: ``bias``
    (heads, queries, keys) from the shared ``relative_attention_bias`` table
    (:func:`relative_buckets`), ``gate = a * (b * grep_a - 1) + 2`` with ``a``, ``b`` the
    sigmoids of the two sums of four outputs of ``grep_linear`` on the query's projection
    (before scaling). Keys past a clip's tokens are masked.

    Args:
        dim: model size; num_heads: heads (``dim`` divisible by it).
        relative_attention_bias: the (num_buckets, num_heads) table, shared by all layers.
        dropout: dropout on the attention weights (training only).
    """

    def __init__(self, dim: int, num_heads: int, relative_attention_bias: nn.Embedding, dropout: float = 0.0):
        super().__init__()
        self.num_heads, self.dropout = num_heads, dropout
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))
        self.relative_attention_bias = relative_attention_bias
        self.grep_linear = nn.Linear(dim // num_heads, 8)
        self.grep_a = nn.Parameter(torch.ones(1, num_heads, 1, 1))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, tokens, dim) -> (batch, heads, tokens, head_dim)."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def forward(self, x: torch.Tensor, position_bias: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """x (batch, tokens, dim); position_bias (heads, tokens, tokens); key_mask (batch, tokens),
        True for valid tokens -> (batch, tokens, dim)."""
        q = self._heads(self.q_proj(x))
        gates = torch.sigmoid(self.grep_linear(q).unflatten(-1, (2, 4)).sum(-1))  # (B, H, L, 2)
        gate = gates[..., :1] * (gates[..., 1:] * self.grep_a - 1.0) + 2.0  # (B, H, L, 1)
        bias = (gate * position_bias).masked_fill(~key_mask[:, None, None, :], float("-inf"))
        out = F.scaled_dot_product_attention(q, self._heads(self.k_proj(x)), self._heads(self.v_proj(x)),
                                             attn_mask=bias.to(q.dtype),
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).flatten(2))


class BEATsLayer(nn.Module):
    """The authors' ``TransformerSentenceEncoderLayer`` with ``layer_norm_first=False`` and
    ``deep_norm=True``: ``x = self_attn_layer_norm(alpha * x + attention(x))``, then
    ``x = final_layer_norm(alpha * x + fc2(gelu(fc1(x))))``, ``alpha = (2 * layers) ** 0.25``.

    Args:
        dim, ffn_dim, num_heads: sizes; relative_attention_bias: the shared table;
        encoder_layers: layers of the stack (for ``alpha``); dropout, attention_dropout,
        activation_dropout: the authors' three dropouts.
    """

    def __init__(self, dim: int, ffn_dim: int, num_heads: int, relative_attention_bias: nn.Embedding,
                 encoder_layers: int, dropout: float, attention_dropout: float, activation_dropout: float):
        super().__init__()
        self.self_attn = GatedRelPosAttention(dim, num_heads, relative_attention_bias, attention_dropout)
        self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn_dim), nn.Linear(ffn_dim, dim)
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(activation_dropout), Dropout(dropout)
        self.alpha = math.pow(2 * encoder_layers, 0.25)

    def forward(self, x: torch.Tensor, position_bias: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """x (batch, tokens, dim) -> the same shape (see :meth:`GatedRelPosAttention.forward`)."""
        x = self.self_attn_layer_norm(x * self.alpha + self.dropout1(self.self_attn(x, position_bias, key_mask)))
        y = self.dropout3(self.fc2(self.dropout2(F.gelu(self.fc1(x)))))
        return self.final_layer_norm(x * self.alpha + y)


class BEATsTransformer(nn.Module):
    """The authors' ``TransformerEncoder`` (module ``encoder``): ``pos_conv``, ``layer_norm``
    and the ``layers``, on (batch, tokens, dim); tokens past ``key_mask`` are zeroed before
    ``pos_conv``, as the authors zero padded tokens."""

    def __init__(self, dim: int, ffn_dim: int, layers: int, heads: int, conv_pos: int, conv_pos_groups: int,
                 num_buckets: int, max_distance: int, dropout: float, attention_dropout: float,
                 activation_dropout: float):
        super().__init__()
        self.gradient_checkpointing = False  # captionlib.models.encoders.set_gradient_checkpointing
        self.pos_conv = PositionalConv(dim, conv_pos, conv_pos_groups)
        table = nn.Embedding(num_buckets, heads)
        self.layers = nn.ModuleList(BEATsLayer(dim, ffn_dim, heads, table, layers, dropout, attention_dropout,
                                               activation_dropout) for _ in range(layers))
        self.layer_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(dropout)
        self.num_buckets, self.max_distance = num_buckets, max_distance

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """x (batch, tokens, dim), key_mask (batch, tokens) True for valid tokens -> the same shape as x."""
        x = x * key_mask[..., None].to(x.dtype)
        x = self.dropout(self.layer_norm(x + self.pos_conv(x)))
        table = self.layers[0].self_attn.relative_attention_bias
        buckets = relative_buckets(x.size(1), self.num_buckets, self.max_distance, x.device)
        position_bias = table(buckets).permute(2, 0, 1)  # (heads, tokens, tokens)
        for layer in self.layers:
            x = checkpointed(layer, x, position_bias, key_mask, enabled=self.gradient_checkpointing)
        return x


class BEATsEncoder(nn.Module):
    """BEATs over Kaldi fbank frames: clip vector and frame outputs (see the module docstring).

    Time: a clip of L frames gives ``L // 16`` output frames (at least 1: a batch of fewer than
    16 frames is zero-padded to 16), one per 160 ms at the 10 ms hop.

    Padding: a clip's outputs do not depend on the other clips of its batch: frames past its
    length are zeroed after the normalisation (a clip shorter than 16 frames alone is padded
    the same way), tokens of time steps past ``L // 16`` are zeroed before ``pos_conv`` (the
    clip alone: the convolution's zero padding) and masked as keys. The authors' padding mask
    masks tokens of a partly padded time step by pairs of frames; here a time step is valid
    when all its 16 frames are, so a batch of clips of unequal lengths differs from theirs at
    each clip's last time step (single clips are the same).

    Args:
        n_mels: mel bands of the input (128 for the published checkpoints; a multiple of 16).
        embed_dim: patch embedding size (512); encoder_embed_dim: Transformer size (768);
        encoder_ffn_embed_dim: feed-forward size (3072); encoder_layers: layers (12);
        encoder_attention_heads: heads (12); conv_pos, conv_pos_groups: ``pos_conv``'s kernel
        (128) and groups (16); num_buckets, max_distance: the relative position buckets (320,
        800): the published checkpoints' ``cfg``, which :func:`load_pretrained` compares.
        classes_num: classes of the unused ``predictor`` head (527: AudioSet; 0: none, for a
            checkpoint that was not fine-tuned).
        dropout, attention_dropout, activation_dropout: the authors' dropouts (their
            ``BEATsConfig`` defaults 0.1, 0.1, 0.0), in training only. ``dropout`` and
            ``activation_dropout`` are :class:`captionlib.utils.distributed.Dropout`, whose masks
            follow the data-parallel row-sharding rule; ``attention_dropout`` is drawn inside
            ``F.scaled_dot_product_attention`` and does not (several ranks equal one process in
            law only while BEATs trains).

    Fine-tuning: the training option ``gradient_checkpointing``
    (:func:`~captionlib.models.encoders.set_gradient_checkpointing`) keeps each layer's input
    only and runs the layer again in the backward pass: the same gradients for one more forward
    pass of the layers, without their activations (on a CPU each layer keeps three (batch,
    heads, tokens, tokens) attention tensors in training, 3.4 GB each in float32 for 32 clips
    of 30 s); on 2 clips of 30 s, 3.7x less memory at 1.06x the time of a step on a CPU
    (``bench/bench_gradient_checkpointing.py``).

    Parameters: 90,717,055 with the defaults (the paper's 90M; the authors' model has the same count),
    405,263 of them in ``predictor``.

    Raises:
        ValueError: ``n_mels`` not a positive multiple of 16, or sizes that do not divide.
    """

    time_subsampling = PATCH
    supports_gradient_checkpointing = True  # captionlib.models.encoders.set_gradient_checkpointing

    def __init__(self, n_mels: int = 128, embed_dim: int = 512, encoder_embed_dim: int = 768,
                 encoder_ffn_embed_dim: int = 3072, encoder_layers: int = 12, encoder_attention_heads: int = 12,
                 conv_pos: int = 128, conv_pos_groups: int = 16, num_buckets: int = 320, max_distance: int = 800,
                 classes_num: int = 527, dropout: float = 0.1, attention_dropout: float = 0.1,
                 activation_dropout: float = 0.0):
        super().__init__()
        if n_mels <= 0 or n_mels % PATCH:
            raise ValueError(f"BEATsEncoder takes {PATCH} x {PATCH} patches: n_mels must be a positive multiple of "
                             f"{PATCH}, got {n_mels}")
        if encoder_embed_dim % encoder_attention_heads or encoder_embed_dim % conv_pos_groups:
            raise ValueError(f"encoder_embed_dim {encoder_embed_dim} must divide by encoder_attention_heads "
                             f"{encoder_attention_heads} and conv_pos_groups {conv_pos_groups}")
        self.n_mels = n_mels
        self.arch = {"embed_dim": embed_dim, "encoder_embed_dim": encoder_embed_dim, "encoder_layers": encoder_layers,
                     "encoder_ffn_embed_dim": encoder_ffn_embed_dim, "encoder_attention_heads": encoder_attention_heads,
                     "conv_pos": conv_pos, "conv_pos_groups": conv_pos_groups, "num_buckets": num_buckets,
                     "max_distance": max_distance, "finetuned_model": classes_num > 0,
                     "predictor_class": classes_num if classes_num > 0 else None}
        self.patch_embedding = nn.Conv2d(1, embed_dim, kernel_size=PATCH, stride=PATCH, bias=False)
        self.layer_norm = nn.LayerNorm(embed_dim)
        self.post_extract_proj = nn.Linear(embed_dim, encoder_embed_dim) if embed_dim != encoder_embed_dim else None
        self.encoder = BEATsTransformer(encoder_embed_dim, encoder_ffn_embed_dim, encoder_layers,
                                        encoder_attention_heads, conv_pos, conv_pos_groups, num_buckets, max_distance,
                                        dropout, attention_dropout, activation_dropout)
        self.predictor = nn.Linear(encoder_embed_dim, classes_num) if classes_num > 0 else None
        self.output_size = self.cnn_output_size = encoder_embed_dim
        self._init_weights(encoder_layers)

    def _init_weights(self, layers: int) -> None:
        """The authors' initialisation of the Transformer (``encoder``): BERT's (normal, std 0.02,
        zero biases) for its linear layers and the bias table, then DeepNorm's Xavier-normal for the
        value, output and feed-forward projections (gain ``(8 * layers) ** -0.25``) and for keys and
        queries (gain 1); ``post_extract_proj``, ``predictor`` and the patch embedding keep
        PyTorch's defaults, as the authors'."""
        for m in self.encoder.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
        beta = math.pow(8 * layers, -0.25)
        for layer in self.encoder.layers:
            for m, gain in ((layer.self_attn.k_proj, 1.0), (layer.self_attn.q_proj, 1.0),
                            (layer.self_attn.v_proj, beta), (layer.self_attn.out_proj, beta), (layer.fc1, beta),
                            (layer.fc2, beta)):
                nn.init.xavier_normal_(m.weight, gain=gain)

    def output_lengths(self, lengths: torch.Tensor, frames: int) -> torch.Tensor:
        """Valid output frames (batch,) for input ``lengths`` (batch,) of a batch padded to
        ``frames``: ``L // 16``, at least 1."""
        return (lengths.clamp(min=1, max=max(frames, PATCH)) // PATCH).clamp(min=1)

    def tokens(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The last layer's tokens.

        Args:
            feats: (batch, frames, n_mels) Kaldi fbank (natural log); lengths: (batch,) valid frames.

        Returns:
            tokens (batch, steps, n_mels // 16, encoder_embed_dim), steps = max(frames, 16) // 16,
            and the valid steps (batch,) (:meth:`output_lengths`).
        """
        x = (feats - FBANK_MEAN) / (2 * FBANK_STD)
        if x.size(1) < PATCH:
            x = F.pad(x, (0, 0, 0, PATCH - x.size(1)))
        valid = torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]
        x = self.patch_embedding((x * valid[..., None].to(x.dtype)).unsqueeze(1))  # (B, E, steps, n_mels // 16)
        steps, bands = x.shape[2:]
        x = self.layer_norm(x.flatten(2).transpose(1, 2))  # (B, steps * bands, E), time-major
        if self.post_extract_proj is not None:
            x = self.post_extract_proj(x)
        lens = self.output_lengths(lengths, feats.size(1))
        key_mask = (torch.arange(steps, device=x.device)[None, :] < lens[:, None]).repeat_interleave(bands, dim=1)
        return self.encoder(x, key_mask).unflatten(1, (steps, bands)), lens

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Encode Kaldi fbank features.

        Args:
            feats: (batch, frames, n_mels); lengths: (batch,) valid frames per clip.

        Returns:
            ``v`` (batch, output_size) and the frame outputs (batch, frames // 16, output_size),
            zero beyond :meth:`output_lengths`.
        """
        return self.forward_with_cnn(feats, lengths)[:2]

    def forward_with_cnn(self, feats: torch.Tensor, lengths: torch.Tensor):
        """:meth:`forward` plus the frame outputs averaged over each clip's valid frames
        (batch, output_size) (here equal to ``v``): the attribute-branch input of seed 004."""
        tokens, lens = self.tokens(feats, lengths)
        x = tokens.mean(dim=2)
        valid = (torch.arange(x.size(1), device=x.device)[None, :] < lens[:, None])[..., None]
        v = masked_mean(x, lens)
        return v, x * valid.to(x.dtype), v


def check_front_end(feats_config: Mapping[str, Any], path: str) -> None:
    """Raise :class:`~captionlib.models.panns.FrontEndMismatchError` (naming ``path`` and each
    differing option) unless ``feats_config`` is BEATs' front end (:data:`FRONT_END`: the
    published checkpoints' weights fit any number of bands that divides by 16, but they were
    trained on 128, 8 patches per time step)."""
    required = FRONT_END
    given = {k: feats_config.get(k, "stft" if k == "frontend" else None) for k in required}
    bad = [f"{k}: {given[k]!r} (BEATs: {v!r})" for k, v in required.items()
           if not (given[k] == v or (isinstance(v, float) and isinstance(given[k], (int, float))
                                     and math.isclose(given[k], v)))]
    if bad:
        raise FrontEndMismatchError(
            f"{path}: BEATs checkpoints take Kaldi fbank features, and the features config differs: "
            f"{', '.join(bad)}; dump the features with egs/clotho/conf/feats_beats.yaml")


def _check_cfg(encoder: BEATsEncoder, cfg: Any, path: str) -> None:
    """Raise ValueError listing every ``cfg`` entry of the checkpoint that differs from the
    encoder's options (:data:`FIXED_CFG` and :attr:`BEATsEncoder.arch`)."""
    if not isinstance(cfg, Mapping):
        raise ValueError(f"{path}: not a BEATs checkpoint: no 'cfg' mapping beside 'model' (the authors' layout is "
                         "{'cfg': {...}, 'model': state_dict})")
    wanted: Dict[str, Any] = {**FIXED_CFG, **encoder.arch}
    if not wanted["finetuned_model"]:
        del wanted["predictor_class"]
    bad = [f"{k}: checkpoint {cfg.get(k, CFG_DEFAULTS[k])!r}, encoder {v!r}" for k, v in wanted.items()
           if cfg.get(k, CFG_DEFAULTS[k]) != v]
    if bad:
        raise ValueError(f"{path}: the checkpoint's cfg differs from the encoder (nothing was loaded): "
                         f"{'; '.join(bad)}; "
                         "set the encoder_conf keys of the same names (classes_num for predictor_class, 0 when "
                         "finetuned_model is false); keys fixed here: " + ", ".join(sorted(FIXED_CFG)))


def load_pretrained(encoder: BEATsEncoder, path: str, feats_config: Mapping[str, Any]) -> None:
    """Load a BEATs checkpoint (the authors' layout, ``{"cfg": dict, "model": state_dict}``) strictly.

    Checked before anything is loaded: the features config is BEATs' front end
    (:func:`check_front_end`); the file is read without running code from it
    (:func:`~captionlib.utils.fileio.load_checkpoint`); its ``cfg`` matches the encoder's
    architecture; its state dict has exactly the encoder's keys and shapes (``predictor``
    included; every layer's ``self_attn.relative_attention_bias.weight``), and the layers'
    copies of the shared bias table are equal.

    Args:
        encoder: a :class:`BEATsEncoder` (parameters are overwritten).
        path: the checkpoint, e.g. ``BEATs_iter3_plus_AS2M.pt``.
        feats_config: the features config the encoder's input is dumped with.

    Raises:
        FileNotFoundError: no such file (naming :data:`CHECKPOINT_SOURCE`).
        FrontEndMismatchError: (a ValueError) the features config is not BEATs' front end.
        CheckpointMismatchError: (a ValueError) missing, unexpected or mis-shaped keys, all listed.
        ValueError: an unreadable or unsafe file, no ``cfg``/``model``, a ``cfg`` that differs
            (each key listed), or layers whose bias tables differ.
    """
    require_checkpoint(path, CHECKPOINT_SOURCE)
    check_front_end(feats_config, path)
    obj = load_checkpoint(path, numpy_values=True)
    if not isinstance(obj, Mapping) or not isinstance(obj.get("model"), Mapping):
        raise ValueError(f"{path}: not a BEATs checkpoint: no 'model' state dict (the authors' layout is "
                         "{'cfg': {...}, 'model': state_dict})")
    _check_cfg(encoder, obj.get("cfg"), path)
    state = check_state_dict(obj["model"], path)
    check_keys(encoder, state, path)
    tables = sorted(k for k in state if k.endswith("self_attn.relative_attention_bias.weight"))
    differ = [k for k in tables if not torch.equal(state[k], state[tables[0]])]
    if differ:
        raise ValueError(f"{path}: the layers share one relative position bias table, but {differ} differ from "
                         f"{tables[0]} (nothing was loaded)")
    encoder.load_state_dict(state, strict=True)
    logging.info("%s: BEATs checkpoint loaded (%d tensors; cfg checked)", path, len(state))
