"""Cross-entropy (teacher forcing) training, seed 000 sec. 3.4 ("XE training")."""

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
import yaml

from captionlib.data.datasets import (
    AudioRefsDataset,
    CaptionDataset,
    ClipCaptionsDataset,
    collate_captions,
    collate_clip_captions,
)
from captionlib.io.datadir import feats_dim
from captionlib.models.captioner import ENCODERS, build_model, check_model_conf, xe_loss, xe_targets
from captionlib.models.encoders import check_gradient_checkpointing
from captionlib.models.pretrained_feats import PRETRAINED_LOADERS, check_pretrained_loader
from captionlib.text.tokenizer import load_tokenizer
from captionlib.train.fit import fingerprint, fit, load_feats_stats, log_model, run_inputs, write_config
from captionlib.train.options import XEOptions
from captionlib.train.trainer import set_seed
from captionlib.train.validation import best_criteria, clip_validation
from captionlib.utils.cli import check_options
from captionlib.utils.distributed import init_distributed
from captionlib.utils.fileio import load_checkpoint, load_numeric_arrays, read_yaml_mapping

#: The features config that stage 2 (``scripts/dump_feats.sh``) writes into each dump dir.
FEATS_CONFIG = "feats_config.yaml"


@dataclass(frozen=True)
class EncoderTraining:
    """How XE trains the encoder: the ``encoder_conf`` keys the trainer reads (see
    :func:`split_encoder_conf`), which are no encoder options and stay out of the model files,
    and ``freeze_encoder`` (:func:`frozen_epochs`).

    Attributes:
        pretrained: checkpoint loaded into the encoder before training, or ``None``.
        frozen_epochs: epochs 1 .. ``frozen_epochs`` train with the encoder frozen (0: none,
            ``math.inf``: all).
        lr_factor: the encoder's learning rate over ``lr``.
    """

    pretrained: Optional[str] = None
    frozen_epochs: float = 0
    lr_factor: float = 1.0

    def frozen(self, epoch: int) -> bool:
        """Whether the encoder is frozen in ``epoch`` (1-based)."""
        return epoch <= self.frozen_epochs


def frozen_epochs(freeze_encoder: Union[bool, int]) -> float:
    """The epochs the option ``freeze_encoder`` (XE and RL) keeps the encoder frozen: ``true``:
    all (``math.inf``), N: the first N, ``false`` or 0: none.

    Raises:
        ValueError: anything else (a negative number), naming ``freeze_encoder``.
    """
    if isinstance(freeze_encoder, bool):
        return math.inf if freeze_encoder else 0
    if isinstance(freeze_encoder, int) and freeze_encoder >= 0:
        return freeze_encoder
    raise ValueError(f"freeze_encoder must be true (for good), false or 0 (never) or a number of epochs >= 1, "
                     f"got {freeze_encoder!r}")


def split_encoder_conf(encoder_conf: Optional[Dict[str, Any]],
                       freeze: Union[bool, int] = False) -> Tuple[Dict[str, Any], EncoderTraining]:
    """Split ``encoder_conf`` into the encoder's own options and the trainer's keys:

    - ``pretrained``: a checkpoint path (see :func:`load_pretrained_encoder`);
    - ``lr_factor``: a number > 0 (default 1), the encoder's learning rate over ``lr``;

    with the epochs of ``freeze``, the option ``freeze_encoder`` (:func:`frozen_epochs`).

    Returns:
        (the encoder's keyword arguments, :class:`EncoderTraining`).

    Raises:
        ValueError: a bad value, naming the key (``encoder_conf.lr_factor``, ...), or
            ``encoder_conf.freeze``, which is the option ``freeze_encoder`` now.
    """
    conf = dict(encoder_conf or {})
    if "freeze" in conf:
        raise ValueError(f"encoder_conf.freeze moved to the option freeze_encoder (the same in XE and RL): write "
                         f"'freeze_encoder: {yaml.safe_dump(conf['freeze']).splitlines()[0]}' instead")
    pretrained, factor = conf.pop("pretrained", None), conf.pop("lr_factor", 1.0)
    if pretrained is not None and (not isinstance(pretrained, str) or not pretrained):
        raise ValueError(f"encoder_conf.pretrained must be the path of a checkpoint, got {pretrained!r}")
    epochs = frozen_epochs(freeze)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
        raise ValueError(f"encoder_conf.lr_factor must be a number > 0, got {factor!r}")
    return conf, EncoderTraining(pretrained, epochs, float(factor))


def read_feats_config(data_dir: str) -> Dict[str, Any]:
    """The features config a dump dir was made with: ``<data_dir>/feats_config.yaml``, the
    resolved options of the feature binary, written by stage 2 (``scripts/dump_feats.sh``).

    Raises:
        FileNotFoundError: no such file (a dump dir of an older captionlib: re-run stage 2,
            which writes it without redoing an unchanged dump).
        ValueError: the file cannot be read as YAML or is not a mapping (naming the file).
    """
    path = Path(data_dir) / FEATS_CONFIG
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: encoder_conf.pretrained checks the checkpoint's front end against the features "
            f"config the dump dir was made with, which stage 2 (scripts/dump_feats.sh) writes there; re-run stage 2 "
            f"for {data_dir}")
    return read_yaml_mapping(path, "the feature options of the dump dir")


def load_pretrained_encoder(model, encoder: str, path: str, data_dir: str) -> None:
    """Load a published checkpoint into ``model.encoder`` with the loader of ``encoder``
    (:data:`PRETRAINED_LOADERS`), strictly, checking its front end against
    ``<data_dir>/feats_config.yaml`` (:func:`read_feats_config`).

    Raises:
        ValueError: ``encoder`` has no loader (listing those that have one); the loader's
            errors (a :class:`~captionlib.models.pretrained_load.CheckpointMismatchError`
            naming the keys, a front-end mismatch, an unsafe file).
        FileNotFoundError: no checkpoint (saying where to download it) or no features config.
    """
    check_pretrained_loader(encoder, "encoder_conf.pretrained")
    PRETRAINED_LOADERS[encoder](model.encoder, path, read_feats_config(data_dir))
    logging.info("encoder (%s) initialised from %s", encoder, path)


def encoder_freezer(model, training: EncoderTraining) -> Optional[Callable[[int], None]]:
    """The trainer's ``epoch_start`` that freezes ``model.encoder`` in the epochs
    ``training.frozen`` says, and unfreezes it after; ``None`` when it is never frozen.

    Frozen: the encoder's parameters get no gradient (``requires_grad`` off) and
    ``model.freeze_encoder`` keeps the encoder in eval mode, so its BatchNorm running
    statistics and dropout are fixed too. Set from the epoch number alone, so a run resumed
    in the middle is in the state of an uninterrupted one.
    """
    if training.frozen_epochs == 0:
        return None

    def set_epoch(epoch: int) -> None:
        frozen = training.frozen(epoch)
        if frozen != model.freeze_encoder:
            logging.info("epoch %d: encoder %s", epoch, "frozen (weights and BatchNorm statistics)" if frozen
                         else "unfrozen")
        model.set_encoder_frozen(frozen)

    return set_epoch


def load_embedding(model, path: str, freeze: bool = False) -> None:
    """Copy pre-trained word vectors (vocab_size, embed_size) into the decoder embedding.

    Raises:
        FileNotFoundError: no such file.
        ValueError: naming the file and ``--init_embedding``: not an ``.npy`` array of numbers
            (an object array is refused: loading it would unpickle), or its shape differs
            from the embedding's.
    """
    fix = ("save the vectors as a float array (np.save(path, vectors.astype(np.float32)), as "
           "caption_train_word2vec does)")
    vectors = load_numeric_arrays(path, "--init_embedding (word vectors)", fix)
    if isinstance(vectors, dict):
        raise ValueError(f"{path}: --init_embedding must be one .npy array (vocab_size, embed_size), got an .npz "
                         f"archive of {', '.join(sorted(vectors))}: {fix}")
    weight = model.decoder.embed.weight
    if tuple(vectors.shape) != tuple(weight.shape):
        raise ValueError(f"{path}: word vectors of shape {vectors.shape}, the decoder embedding is "
                         f"{tuple(weight.shape)}")
    with torch.no_grad():
        weight.copy_(torch.as_tensor(vectors, dtype=weight.dtype))
    weight.requires_grad_(not freeze)
    logging.info("decoder embedding initialised from %s%s", path, " (frozen)" if freeze else "")


def mixup_draw(batch: int, alpha: float) -> Tuple[float, torch.Tensor]:
    """Draw the mixup weight and partners of a batch (CoNeTTE, Labbé et al. 2023).

    Returns:
        ``lam``: ``max(l, 1 - l)`` with ``l ~ Beta(alpha, alpha)``, so each item stays the
        dominant one of its mix; ``perm``: (batch,) a permutation without a fixed point (every
        item is mixed with another one), from the torch generator.
    """
    lam = float(torch.distributions.Beta(alpha, alpha).sample())
    order = torch.randperm(batch)
    perm = torch.empty(batch, dtype=torch.long)
    perm[order] = order.roll(-1)
    return max(lam, 1.0 - lam), perm


def mix_features(model, feats: torch.Tensor, lens: torch.Tensor, lam: float,
                 perm: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mix padded features of different lengths: ``lam * x + (1 - lam) * x[perm]``.

    Padded frames are first set to the model's feature mean (``feats_mean``), i.e. to 0 after
    its normalisation, so the mix is that of the normalised features with zero padding (the
    normalisation is affine); a mix lasts as long as the longer of its two clips.

    Args:
        feats: (batch, frames, feats_dim); lens: (batch,) valid frames.

    Returns:
        (mixed features (batch, frames, feats_dim), their lengths (batch,)).
    """
    valid = (torch.arange(feats.size(1), device=feats.device)[None, :] < lens[:, None]).unsqueeze(-1)
    x = torch.where(valid, feats, model.feats_mean.to(feats.dtype))
    perm = perm.to(feats.device)
    return lam * x + (1.0 - lam) * x[perm], torch.maximum(lens, lens[perm])


def caption_partners(caption2clip: torch.Tensor, clip_perm: torch.Tensor) -> torch.Tensor:
    """The mixup partner of each caption of a ``collate_clip_captions`` batch whose clips are
    mixed with ``clip_perm``: the k-th caption of clip i is mixed with caption
    ``k mod n_j`` of clip ``j = clip_perm[i]`` (``n_j``: the captions of clip j).

    Args:
        caption2clip: (captions,) each caption's clip, in clip order (as collated).
        clip_perm: (clips,) each clip's partner clip.

    Returns:
        (captions,) the partner caption of each caption.
    """
    counts = torch.bincount(caption2clip, minlength=len(clip_perm))
    starts = counts.cumsum(0) - counts
    k = torch.arange(len(caption2clip), device=caption2clip.device) - starts[caption2clip]
    partner = clip_perm.to(caption2clip.device)[caption2clip]
    return starts[partner] + k % counts[partner]


def _mixed_previous_words(model, lam: float, perm: torch.Tensor):
    """A forward hook on ``decoder.embed`` that mixes each row's word embeddings with those of
    row ``perm`` (weight ``lam``); remove it after the forward pass."""
    return model.decoder.embed.register_forward_hook(
        lambda module, inputs, out: lam * out + (1.0 - lam) * out[perm.to(out.device)])


class XEObjective:
    """Teacher-forced cross-entropy ``(model, batch) -> (loss, stats)`` of a
    ``collate_captions`` batch, or of a ``collate_clip_captions`` batch (one encoder pass per
    clip, its embedding shared by all the clip's captions): the mean over target tokens (eos
    included), stats ``loss``, ``acc`` and ``num_units`` (the target tokens).

    Args:
        label_smoothing: weight of the uniform distribution mixed into the targets
            (Szegedy et al. 2016; DCASE 2024 baseline 0.2, CoNeTTE 0.1); ``acc`` and the
            validation loss stay those of the plain targets.
        mixup_alpha: mixup as CoNeTTE does it (> 0; 0: off): each caption's features
            (:func:`mix_features`) and the embeddings of its previous words (every decoder
            embeds them with ``decoder.embed``) are mixed with those of another item of the
            batch, weight ``lam >= 0.5`` (:func:`mixup_draw`), while the targets stay the
            caption's own. With ``xe_unit: clip`` the clips are mixed (one draw per batch of
            clips) and each caption with its partner in the partner clip
            (:func:`caption_partners`): the same mix as of (clip, caption) items, with one
            encoder pass per mixed clip.

    With mixup the draws depend on each rank's batch block, so under ``torchrun`` the ranks
    mix within their blocks and train data-parallel without equalling one process.

    Raises:
        ValueError: ``label_smoothing`` outside [0, 1) or a negative ``mixup_alpha``.
    """

    def __init__(self, label_smoothing: float, mixup_alpha: float):
        if not 0.0 <= label_smoothing < 1.0 or mixup_alpha < 0:
            raise ValueError(f"label_smoothing must be in [0, 1) and mixup_alpha >= 0, got {label_smoothing} "
                             f"and {mixup_alpha}")
        self.label_smoothing, self.mixup_alpha = label_smoothing, mixup_alpha
        #: the same random draws on every data-parallel rank (see captionlib.utils.distributed)
        self.row_sharded_randomness = mixup_alpha == 0

    def __call__(self, model, batch):
        dev = next(model.parameters()).device
        feats, lens, ys, ys_lens = (t.to(dev) for t in batch[:4])
        caption2clip = batch[4].to(dev) if len(batch) == 5 else None
        hook = None
        if self.mixup_alpha > 0 and len(feats) > 1:
            lam, perm = mixup_draw(len(feats), self.mixup_alpha)
            feats, lens = mix_features(model, feats, lens, lam, perm)
            hook = _mixed_previous_words(model, lam, perm if caption2clip is None
                                         else caption_partners(caption2clip, perm))
        try:
            if caption2clip is None:
                logits = model(feats, lens, ys)
            else:
                logits = model.decoder.forward_teacher(model.encode(feats, lens)[caption2clip], ys)
        finally:
            if hook is not None:
                hook.remove()
        targets = xe_targets(ys, ys_lens, model.eos_id)
        loss = xe_loss(logits, targets, self.label_smoothing)
        with torch.no_grad():
            mask = targets != 0
            acc = ((logits.argmax(-1) == targets) & mask).sum().float() / mask.sum()
        return loss, {"loss": loss.item(), "acc": acc.item(), "num_units": int(mask.sum())}


#: plain cross-entropy (seed 000)
xe_objective = XEObjective(label_smoothing=0.0, mixup_alpha=0.0)


def check_xe_options(opts: XEOptions) -> Tuple[Dict[str, Any], EncoderTraining]:
    """Check the options of an XE run before anything is loaded: ranges and choices
    (:func:`captionlib.utils.cli.check_options`), the trainer's keys of ``encoder_conf``
    (:func:`split_encoder_conf`; ``pretrained`` needs an encoder with a checkpoint loader and
    excludes ``init_param``), the names and keys of the model's configs
    (:func:`~captionlib.models.captioner.check_model_conf`), and that the encoder takes
    ``gradient_checkpointing`` where it is on. ``caption_train`` runs it when it
    parses (so ``--check_only`` does, which the recipes run before stage 1).

    Returns:
        (the encoder's own options, :class:`EncoderTraining`), as :func:`split_encoder_conf`.

    Raises:
        ValueError: one line naming the option or key.
    """
    check_options(opts)
    encoder_conf, training = split_encoder_conf(opts.encoder_conf, opts.freeze_encoder)
    if training.pretrained:
        check_pretrained_loader(opts.encoder, "encoder_conf.pretrained")
        if opts.init_param:
            raise ValueError("encoder_conf.pretrained and init_param both initialise the encoder: give one of them")
    check_model_conf(opts.encoder, encoder_conf, opts.decoder, opts.decoder_conf,
                     opts.specaug_conf if opts.specaug else None)
    if opts.gradient_checkpointing:
        check_gradient_checkpointing(ENCODERS[opts.encoder])
    return encoder_conf, training


def xe_model(opts: XEOptions, tokenizer) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    """Build the captioner of ``opts`` (the registry's ``encoder``/``decoder`` with their
    ``*_conf``, SpecAugment), then set its feature normalisation (``feats_stats``), load
    ``init_param`` and the word vectors of ``init_embedding``; returns (model, model_conf).

    The trainer's keys of ``encoder_conf`` (:func:`split_encoder_conf`) are left out of
    ``model_conf``, so the model files never need the checkpoint. With
    ``encoder_conf.pretrained`` the encoder is loaded from it (:func:`load_pretrained_encoder`)
    and the captioner's feature normalisation stays the identity (mean 0, std 1;
    ``feats_stats`` is not used, one log line says so): a pretrained encoder takes the raw
    features of its authors' front end and normalises them itself (PANNs' ``bn0`` per mel bin).

    Raises:
        FileNotFoundError: the train dump dir has no ``feats_dim`` (or, with ``pretrained``,
            no ``feats_config.yaml``), or no checkpoint file.
        ValueError: bad model options (``encoder_conf.freeze`` ... named), ``pretrained`` with
            an encoder that has no loader or with ``init_param``, a checkpoint that does not
            match, or word vectors of another shape.
    """
    encoder_conf, training = check_xe_options(opts)
    model_conf = {
        "vocab_size": tokenizer.vocab_size,
        "feats_dim": feats_dim(opts.train_data_dir),
        "encoder": opts.encoder,
        "encoder_conf": encoder_conf,
        "decoder": opts.decoder,
        "decoder_conf": opts.decoder_conf,
        "specaug_conf": opts.specaug_conf if opts.specaug else None,
    }
    try:
        model = build_model(model_conf)
    except TypeError as e:  # a value of the wrong type in encoder_conf / decoder_conf / specaug_conf
        raise ValueError(f"encoder {opts.encoder!r} / decoder {opts.decoder!r}: {e}") from None
    if training.pretrained:
        load_pretrained_encoder(model, opts.encoder, training.pretrained, opts.train_data_dir)
        logging.info("feature normalisation: the identity, as the pretrained encoder takes its front end's raw "
                     "features%s", f" (feats_stats {opts.feats_stats} not used)" if opts.feats_stats else "")
    elif opts.feats_stats:
        stats = load_feats_stats(opts.feats_stats)
        model.set_normalization(stats["mean"], stats["std"])
    if opts.init_param:
        obj = load_checkpoint(opts.init_param)
        model.load_state_dict(obj["model"] if "model" in obj else obj)
        logging.info("initialised from %s", opts.init_param)
    if opts.init_embedding:
        load_embedding(model, opts.init_embedding, opts.freeze_embedding)
    return model, model_conf


def train_xe(opts: XEOptions) -> None:
    """Train a captioner with cross-entropy (Adam), validating every epoch.

    Args:
        opts: the options (:class:`captionlib.train.options.XEOptions`), among them:
            ``train_data_dir``, ``valid_data_dir`` (dump directories: feats.scp, text,
            spk2utt, feats_dim); ``token_list`` (``tokens.txt``, ``bpe.model`` beside it for
            BPE); ``output_dir`` (config.yaml, checkpoints, tensorboard/); ``feats_stats``
            (global mean/std of the train set); ``encoder``/``decoder`` and their ``*_conf``
            (defaults: seed 000); ``specaug`` (seed 000 post-challenge: T=50, F=10);
            ``xe_unit``: ``caption`` iterates captions (seed 000, ESPnet: a clip is encoded
            once per caption), ``clip`` iterates clips, encodes each once and averages the
            cross-entropy over all its captions (5x fewer encoder passes per epoch on
            Clotho-style data, fewer but less noisy updates); ``num_iters_per_epoch``,
            ``batch_type``, ``bucket_pool`` (see :func:`captionlib.train.batching.epoch_batches`);
            ``init_embedding``: ``.npy`` (vocab_size, embed_size) word vectors aligned with the
            token list (``caption_train_word2vec``, seed 000's CRNN-W), ``freeze_embedding``
            keeps them fixed; ``ngpu`` 0 (CPU) or > 0 (CUDA), under ``torchrun`` one process
            per GPU or per CPU rank with gloo (see :mod:`captionlib.utils.distributed`;
            ``batch_size`` is then the global batch); ``amp`` (see :class:`Trainer`);
            ``best_model_criterion``: ``cider_d`` (greedy CIDEr-D), ``bleu_4`` (greedy
            BLEU-4, seed 000's XE selection) or ``loss`` decides which ``keep_nbest`` epoch
            files stay; ``dry_run`` builds the model, logs it and returns; ``check_only``
            checks the options (:func:`check_xe_options`) and returns, loading nothing.
            ``encoder_conf`` also holds the trainer's keys (:func:`split_encoder_conf`; kept
            in ``config.yaml``, left out of the model files): ``pretrained`` loads a
            published checkpoint into the encoder (:func:`xe_model`: the feature
            normalisation is then the identity), ``lr_factor`` scales its learning rate;
            ``freeze_encoder`` keeps the encoder fixed (weights, BatchNorm statistics,
            dropout) for good or for the first N epochs (:func:`encoder_freezer`).

    Best model files: ``valid.cider_d.best.pth``, ``valid.bleu_4.best.pth`` and
    ``valid.loss.best.pth``, whatever ``best_model_criterion``.

    Raises:
        ValueError: an option outside its choices or range (one line naming it), or a bad
            ``encoder_conf`` key or checkpoint (see :func:`xe_model`).
        FileNotFoundError: a missing input (see :func:`xe_model`).
    """
    _, training = check_xe_options(opts)
    if opts.check_only:
        return
    criteria = best_criteria(opts.best_model_criterion, ("cider_d", "bleu_4", "loss"))
    set_seed(opts.seed)
    device = init_distributed(opts.ngpu)
    tokenizer = load_tokenizer(opts.token_list)
    model, model_conf = xe_model(opts, tokenizer)
    model.to(device)
    log_model(model)
    write_config(opts)
    if opts.dry_run:
        return
    if opts.xe_unit == "clip":
        train_set, collate = ClipCaptionsDataset(opts.train_data_dir, tokenizer), collate_clip_captions
    else:
        train_set, collate = CaptionDataset(opts.train_data_dir, tokenizer), collate_captions
    validate = clip_validation(
        AudioRefsDataset(opts.valid_data_dir), tokenizer, device, opts.batch_size, opts.max_len,
        captions=dict(ClipCaptionsDataset(opts.valid_data_dir, tokenizer).items),
    )
    inputs = run_inputs(opts.train_data_dir, model_conf, token_list=opts.token_list,
                        feats_stats=None if training.pretrained else opts.feats_stats, init_param=opts.init_param,
                        init_embedding=opts.init_embedding, pretrained=training.pretrained,
                        feats_config=str(Path(opts.train_data_dir) / FEATS_CONFIG) if training.pretrained else None)
    if training != EncoderTraining(training.pretrained):  # freeze or lr_factor: a resumed run must keep them
        inputs["encoder_training"] = fingerprint([training.frozen_epochs, training.lr_factor])
    fit(opts, model, XEObjective(opts.label_smoothing, opts.mixup_alpha), train_set, collate, validate, criteria,
        device, {"model_conf": model_conf, "token_list": tokenizer.token_list, "bpe_proto": tokenizer.bpe_proto},
        inputs=inputs, epoch_start=encoder_freezer(model, training), encoder_lr_factor=training.lr_factor)
