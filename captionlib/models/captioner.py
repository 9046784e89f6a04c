"""The captioning model: global feature normalisation, optional SpecAugment, encoder, decoder.

Checkpoints are self-describing: :func:`save_model_file` writes the model's state dict
together with its construction arguments (``model_conf``) and token list, so decoding,
averaging, RL and ensembles need no other file.
"""

import copy
import inspect
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from captionlib.models.batch_parts import BatchParts, cat_encodings
from captionlib.models.beats import BEATsEncoder
from captionlib.models.convnext import ConvNeXtEncoder
from captionlib.models.decoders import GRUDecoder, LSTMDecoder, TopDownDecoder
from captionlib.models.encoders import CRNNEncoder, LinearEncoder, RNNEncoder
from captionlib.models.panns import Cnn10Encoder, Cnn14Encoder
from captionlib.models.transformer import TransformerDecoder, TransformerEncoderStack, check_conf
from captionlib.utils.fileio import load_checkpoint

ENCODERS = {"crnn": CRNNEncoder, "linear": LinearEncoder, "rnn": RNNEncoder, "cnn14": Cnn14Encoder,
            "cnn10": Cnn10Encoder, "convnext": ConvNeXtEncoder, "beats": BEATsEncoder}
#: Clips per encoder call in eval mode, by device type (see :meth:`Captioner.encode`). A device
#: type not listed encodes the whole batch in one call: on an H100, 32 clips of 15-30 s encode
#: 2.2-2.3x faster in one call than in chunks of 8, while on 2 CPU cores chunks are 1.1-1.2x faster
#: (``bench/bench_train.py``, bench/README.md, "Speed").
EVAL_CHUNK = {"cpu": 8}
DECODERS = {"gru": GRUDecoder, "lstm": LSTMDecoder, "att_lstm": TopDownDecoder, "transformer": TransformerDecoder}


class Captioner(nn.Module):
    """Encoder-decoder captioner, built from the encoder and decoder registries.

    Seed 000 is ``crnn`` + ``gru`` on log-mel; Show-and-Tell (seeds 002, 003) is ``linear`` +
    ``lstm`` on a pooled CNN vector; Top-Down attention (seed 001) is ``linear`` + ``att_lstm``
    on regions or grid cells; S2VT (seed 004) is ``rnn`` + ``lstm`` on frame features.

    Args:
        vocab_size: number of tokens; ``eos_id = vocab_size - 1``, padding is 0.
        feats_dim: input feature dimension D (n_mels for log-mel, the CNN's channels for
            images and videos). ``n_mels`` is accepted for it (model files written before
            the visual front end).
        encoder: name in :data:`ENCODERS`; ``encoder_conf`` its keyword arguments, but for
            ``transformer``: the keyword arguments of a
            :class:`~captionlib.models.transformer.TransformerEncoderStack` run over the
            encoder's frame outputs (SJTU's CNN + Transformer), module ``encoder_stack``
            (apart from ``encoder``, so that a pretrained encoder's keys, its freezing and its
            learning-rate factor stay its own).
        decoder: name in :data:`DECODERS`; ``decoder_conf`` its keyword arguments. A decoder
            fed ``v`` as its first input gets ``embed_size`` = the encoder's output size; an
            attention decoder gets ``memory_size`` = that size.
        specaug_conf: keyword arguments of :class:`captionlib.audio.specaug.SpecAugment`
            (applied in training mode only), or ``None`` for no augmentation.

    Buffers ``feats_mean``/``feats_std`` (feats_dim,) hold the global mean/std of the
    train features (seed 000 sec. 3.2); identity until :meth:`set_normalization`.

    Raises:
        ValueError: unknown encoder or decoder, or both ``feats_dim`` and ``n_mels`` given.
    """

    #: :func:`captionlib.decode.search.sample`'s default compile mode for this model (a
    #: training option, not saved: see ``--decode_compile``)
    decode_compile = "none"

    def __init__(
        self,
        vocab_size: int,
        feats_dim: Optional[int] = None,
        encoder: str = "crnn",
        encoder_conf: Optional[Dict[str, Any]] = None,
        decoder: str = "gru",
        decoder_conf: Optional[Dict[str, Any]] = None,
        specaug_conf: Optional[Dict[str, Any]] = None,
        n_mels: Optional[int] = None,
    ):
        super().__init__()
        check_model_conf(encoder, encoder_conf, decoder, decoder_conf, specaug_conf)
        if feats_dim is not None and n_mels is not None:
            raise ValueError("give feats_dim or its old name n_mels, not both")
        feats_dim = feats_dim if feats_dim is not None else (n_mels if n_mels is not None else 64)
        self.vocab_size = vocab_size
        self.eos_id = vocab_size - 1
        self.register_buffer("feats_mean", torch.zeros(feats_dim))
        self.register_buffer("feats_std", torch.ones(feats_dim))
        enc_conf = dict(encoder_conf or {})
        stack_conf = enc_conf.pop("transformer", None)
        self.encoder = ENCODERS[encoder](feats_dim, **enc_conf)
        self.encoder_stack = None
        if stack_conf is not None:
            self.encoder_stack = TransformerEncoderStack(self.encoder.output_size, **stack_conf)
        #: size of the clip vector ``v`` and of the frame outputs (the stack's when there is one)
        self.embed_size = (self.encoder_stack or self.encoder).output_size
        dec_conf = dict(decoder_conf or {})
        self.uses_memory = bool(getattr(DECODERS[decoder], "uses_memory", False))
        dec_conf.setdefault("memory_size" if self.uses_memory else "embed_size", self.embed_size)
        self.decoder = DECODERS[decoder](vocab_size, **dec_conf)
        self.freeze_encoder = False  # training option (not saved): see train()
        self.specaug = None
        if specaug_conf:
            from captionlib.audio.specaug import SpecAugment

            self.specaug = SpecAugment(**specaug_conf)

    def train(self, mode: bool = True) -> "Captioner":
        """Set training mode; a frozen encoder (``freeze_encoder = True``, with its
        parameters' ``requires_grad`` off) stays in eval mode, so its BatchNorm statistics
        and dropout stay fixed too."""
        super().train(mode)
        if self.freeze_encoder:
            self.encoder.eval()
        return self

    def set_encoder_frozen(self, frozen: bool) -> None:
        """Freeze (or unfreeze) the encoder: its parameters' ``requires_grad`` off (on) and
        ``freeze_encoder`` set, so that :meth:`train` keeps it in eval mode (BatchNorm
        statistics and dropout fixed) while it is frozen."""
        for param in self.encoder.parameters():
            param.requires_grad_(not frozen)
        self.freeze_encoder = frozen

    def set_normalization(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Set the global mean/std, each (feats_dim,), from ``feats_stats.npz``."""
        self.feats_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.feats_std.copy_(torch.as_tensor(std, dtype=torch.float32).clamp(min=1e-5))

    def encode(self, feats: torch.Tensor, feat_lens: torch.Tensor, return_cnn: bool = False):
        """Normalise (and augment in training) then encode.

        A batch shorter than the encoder's time pooling (4 frames for the CRNN) is
        zero-padded to it, so even a clip of 1 frame gets an embedding (from its valid
        frames; ``feat_lens`` are not changed).

        With an attention decoder (``uses_memory``) the encoding is
        :class:`~captionlib.models.batch_parts.BatchParts` ``(v, memory, memory_lens)``: the
        clip vector (batch, embed), the encoder's frame outputs (batch, frames', embed) and
        their valid lengths (batch,); decoding and RL handle it like a tensor.

        In eval mode on CPU the batch is encoded in chunks of ``EVAL_CHUNK["cpu"]`` clips
        (:data:`EVAL_CHUNK`), each cut to its own longest clip: the encoder is
        batch-independent, so the result is the same (to float rounding), and on CPU it is
        faster than one large batch. On a GPU one call is faster.

        Args:
            feats: (batch, frames, feats_dim) features (log-mel frames, regions, video frames).
            feat_lens: (batch,) frames per clip.
            return_cnn: also return the encoder's time-pooled CNN features
                (:meth:`CRNNEncoder.forward_with_cnn`), from the same encoder pass.

        Returns:
            v: (batch, embed) clip embedding (or the parts above); with ``return_cnn``, the pair ``(v, cnn)``
            with ``cnn`` (batch, ``encoder.cnn_output_size``), the CNN output averaged over
            each clip's valid frames (seed 004's attribute-branch input).

        Raises:
            NotImplementedError: ``return_cnn`` with an encoder without ``forward_with_cnn``.
        """
        if return_cnn and not hasattr(self.encoder, "forward_with_cnn"):
            raise NotImplementedError(f"{type(self.encoder).__name__} has no time-pooled CNN output")
        short = self.encoder.time_subsampling - feats.size(1)
        if short > 0:  # fewer frames than the encoder's time pooling: zero-pad (lengths unchanged)
            feats = nn.functional.pad(feats, (0, 0, 0, short))
        chunk = EVAL_CHUNK.get(feats.device.type, 0)
        if not self.training and 0 < chunk < feats.size(0):
            chunks = []
            for i in range(0, feats.size(0), chunk):
                lens = feat_lens[i: i + chunk]
                chunks.append(self.encode(feats[i: i + chunk, : int(lens.max())], lens, return_cnn))
            if return_cnn:
                return cat_encodings([c[0] for c in chunks]), torch.cat([c[1] for c in chunks])
            return cat_encodings(chunks)
        x = (feats - self.feats_mean) / self.feats_std
        # padded frames are zero after normalisation too (the mean of the normalised features)
        valid = torch.arange(x.size(1), device=x.device)[None, :] < feat_lens[:, None]
        x = x * valid.unsqueeze(-1).to(x.dtype)
        if self.specaug is not None and self.training:
            x = self.specaug(x, feat_lens)
        if return_cnn:
            v, frames, cnn = self.encoder.forward_with_cnn(x, feat_lens)
        else:
            v, frames = self.encoder(x, feat_lens)
        frame_lens = self.encoder.output_lengths(feat_lens, x.size(1))
        if self.encoder_stack is not None:
            v, frames = self.encoder_stack(frames, frame_lens)
        if self.uses_memory:
            v = BatchParts((v, frames, frame_lens))
        return (v, cnn) if return_cnn else v

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits.

        Args:
            feats: (batch, frames, feats_dim); feat_lens: (batch,).
            ys: (batch, length) caption token ids, 0-padded, without eos.

        Returns:
            (batch, length + 1, vocab) logits; targets are ``ys`` followed by eos.
        """
        return self.decoder.forward_teacher(self.encode(feats, feat_lens), ys)

    def first_step(self, v: torch.Tensor) -> Tuple[torch.Tensor, Any]:
        """Step-wise decoding: log-probs (batch, vocab) of the first token and the state."""
        return self.decoder.first_step(v)

    def step(self, tokens: torch.Tensor, state: Any) -> Tuple[torch.Tensor, Any]:
        """Step-wise decoding: feed tokens (batch,), get log-probs (batch, vocab) and state."""
        return self.decoder.step(tokens, state)

    def reorder_state(self, state: Any, index: torch.Tensor) -> Any:
        """Reorder the decoder state along the batch by ``index`` (beam search)."""
        return self.decoder.reorder_state(state, index)


def xe_targets(ys: torch.Tensor, ys_lens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Append eos to each caption: (batch, length) -> (batch, length + 1), 0-padded."""
    tgt = torch.cat([ys, ys.new_zeros(ys.size(0), 1)], dim=1)
    tgt[torch.arange(ys.size(0), device=ys.device), ys_lens] = eos_id
    return tgt


def xe_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Token-averaged cross-entropy (seed 000 eq. 2), ignoring padding (id 0).

    Args:
        logits: (batch, length, vocab); targets: (batch, length).
        label_smoothing: weight ``e`` of the uniform distribution mixed into the one-hot
            targets (Szegedy et al. 2016): the loss is ``(1 - e) * NLL + e * mean_j -log p_j``
            over the tokens the decoders can emit (every id but the padding 0, whose logit
            is -inf).
    """
    nll = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)
    if label_smoothing == 0:
        return nll
    mask = targets != 0
    uniform = -logits[mask].log_softmax(-1)[:, 1:].mean(-1).mean()
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def check_keys(cls: type, conf_name: str, positional: int, conf: Dict[str, Any]) -> None:
    """Check that ``cls`` takes every key of ``conf`` (the mapping a config gave as ``conf_name``)
    as a keyword, after its first ``positional`` arguments.

    Raises:
        ValueError: a key ``cls`` does not take, naming ``conf_name`` and listing the keys it
            takes (Python's TypeError named neither).
    """
    params = inspect.signature(cls).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        taken = [n for n, p in list(params.items())[positional:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [k for k in conf if k not in taken]
        if unknown:
            raise ValueError(f"{conf_name}: unknown key(s) {', '.join(map(repr, unknown))} of {cls.__name__}; "
                             f"its keys: {', '.join(taken)}")


def check_model_conf(encoder: str, encoder_conf: Optional[Dict[str, Any]], decoder: str,
                     decoder_conf: Optional[Dict[str, Any]], specaug_conf: Optional[Dict[str, Any]] = None) -> None:
    """Check the names of a :class:`Captioner`'s parts and the keys of their configs, before
    anything is built (it needs no vocabulary and no feature dimension: ``caption_train
    --check_only`` runs it before stages 2-3 have made them), and the values of the Transformer
    decoder's and encoder stack's configs (:func:`~captionlib.models.transformer.check_conf`);
    the other parts' values are checked when they are built.

    Args:
        encoder, decoder: keys of :data:`ENCODERS`, :data:`DECODERS`.
        encoder_conf: the encoder's keyword arguments, with ``transformer`` (the options of a
            :class:`~captionlib.models.transformer.TransformerEncoderStack` on top); decoder_conf,
            specaug_conf: the decoder's and SpecAugment's.

    Raises:
        ValueError: an unknown encoder or decoder, ``encoder_conf.transformer`` that is not a
            mapping, a key a part does not take (naming the config and the keys it takes), or a
            bad size of a Transformer (naming it, e.g. ``decoder_conf.d_model``).
    """
    if encoder not in ENCODERS:
        raise ValueError(f"unknown encoder {encoder!r}; choose from {sorted(ENCODERS)}")
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}; choose from {sorted(DECODERS)}")
    enc_conf = dict(encoder_conf or {})
    stack_conf = enc_conf.pop("transformer", None)
    check_keys(ENCODERS[encoder], f"encoder_conf (encoder {encoder!r})", 1, enc_conf)  # after feats_dim
    if stack_conf is not None:
        if not isinstance(stack_conf, dict):
            raise ValueError(f"encoder_conf.transformer must be a mapping of options, got {stack_conf!r}")
        check_keys(TransformerEncoderStack, "encoder_conf.transformer", 1, stack_conf)
        check_conf(TransformerEncoderStack, stack_conf, "encoder_conf.transformer.")
    check_keys(DECODERS[decoder], f"decoder_conf (decoder {decoder!r})", 1, dict(decoder_conf or {}))
    if DECODERS[decoder] is TransformerDecoder:
        check_conf(TransformerDecoder, dict(decoder_conf or {}), "decoder_conf.")
    if specaug_conf:
        from captionlib.audio.specaug import SpecAugment

        check_keys(SpecAugment, "specaug_conf", 0, specaug_conf)


def build_model(model_conf: Dict[str, Any]) -> Captioner:
    """Build a :class:`Captioner` from its ``model_conf`` (constructor keyword arguments).

    Raises:
        ValueError: as :class:`Captioner`.
    """
    return Captioner(**model_conf)


def model_file_dict(model: Captioner, model_conf: Dict[str, Any], token_list: Sequence[str], **extra) -> dict:
    """The self-describing content of a model file: weights, ``model_conf``, token list."""
    return {
        "model": copy.deepcopy(model.state_dict()),
        "model_conf": model_conf,
        "token_list": list(token_list),
        **extra,
    }


def load_model_file(path: str, map_location: str = "cpu", data: Optional[bytes] = None,
                    member: Optional[str] = None) -> Tuple[Captioner, dict]:
    """Load a model file written by the trainers, without running code (see
    :func:`captionlib.utils.fileio.load_checkpoint`, whose ``data``/``member`` read it from
    an archive's member).

    Returns:
        (model in eval mode, the file's dict).

    Raises:
        FileNotFoundError: no such file.
        UnsafeFileError: (a ValueError) the file needs unsafe unpickling (naming it, the types
            refused and the converter command).
        ValueError: a truncated or foreign file, one that lacks
            ``model``/``model_conf``/``token_list``, whose token list's length is not its
            ``vocab_size``, or whose ``model_conf`` or weights do not build the model (naming
            the path).
    """
    obj = load_checkpoint(path, map_location, data=data, member=member)
    keys = obj if isinstance(obj, dict) else {}
    missing = [k for k in ("model", "model_conf", "token_list") if k not in keys]
    name = f"{path} (member {member})" if member is not None else path
    if missing:
        raise ValueError(f"{name}: not a captionlib model file (missing {missing})")
    conf, tokens = obj["model_conf"], obj["token_list"]
    if not isinstance(conf, dict) or not isinstance(tokens, (list, tuple)):
        raise ValueError(f"{name}: model_conf must be a mapping and token_list a list, got "
                         f"{type(conf).__name__} and {type(tokens).__name__}")
    if conf.get("vocab_size") != len(tokens):  # a mismatch decoded wrong words silently
        raise ValueError(f"{name}: its token_list has {len(tokens)} tokens, its model_conf vocab_size is "
                         f"{conf.get('vocab_size')}")
    try:
        model = build_model(conf)
        model.load_state_dict(obj["model"])
    except (ValueError, TypeError, RuntimeError) as e:  # RuntimeError: a missing or extra weight
        raise ValueError(f"{name}: {e}") from None
    model.eval()
    return model, obj


def model_feats_dim(model_conf: Dict[str, Any]) -> int:
    """The input feature dimension of a ``model_conf`` (``feats_dim``, or ``n_mels`` in model
    files written before the visual front end; 64 if neither, the constructor's default)."""
    for key in ("feats_dim", "n_mels"):
        if model_conf.get(key) is not None:
            return int(model_conf[key])
    return 64
