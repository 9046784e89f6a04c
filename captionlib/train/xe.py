"""Cross-entropy (teacher forcing) training, seed 000 sec. 3.4 ("XE training")."""

import logging
from typing import Any, Dict, Tuple

import numpy as np
import torch

from captionlib.data.datasets import (
    AudioRefsDataset,
    CaptionDataset,
    ClipCaptionsDataset,
    collate_captions,
    collate_clip_captions,
)
from captionlib.models.captioner import build_model, xe_loss, xe_targets
from captionlib.text.tokenizer import load_tokenizer
from captionlib.io.datadir import feats_dim
from captionlib.train.common import (
    best_criteria,
    clip_validation,
    fit,
    load_feats_stats,
    log_model,
    run_inputs,
    write_config,
)
from captionlib.train.options import XEOptions
from captionlib.train.trainer import set_seed
from captionlib.utils.cli import check_options
from captionlib.utils.distributed import init_distributed
from captionlib.utils.fileio import load_checkpoint


def load_embedding(model, path: str, freeze: bool = False) -> None:
    """Copy pre-trained word vectors (vocab_size, embed_size) into the decoder embedding.

    Raises:
        ValueError: if the array's shape differs from the embedding's.
    """
    vectors = np.load(path)
    weight = model.decoder.embed.weight
    if tuple(vectors.shape) != tuple(weight.shape):
        raise ValueError(f"{path}: word vectors of shape {vectors.shape}, the decoder embedding is {tuple(weight.shape)}")
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
            caption's own. Captions only (``xe_unit: caption``).

    With mixup the draws depend on each rank's batch block, so under ``torchrun`` the ranks
    mix within their blocks and train data-parallel without equalling one process.

    Raises:
        ValueError: ``label_smoothing`` outside [0, 1) or a negative ``mixup_alpha``; at
            call time, mixup of a ``collate_clip_captions`` batch.
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
        if len(batch) == 5:
            if self.mixup_alpha > 0:
                raise ValueError("mixup mixes captions: use xe_unit caption")
            logits = model.decoder.forward_teacher(model.encode(feats, lens)[batch[4].to(dev)], ys)
        elif self.mixup_alpha > 0 and len(ys) > 1:
            lam, perm = mixup_draw(len(ys), self.mixup_alpha)
            feats, lens = mix_features(model, feats, lens, lam, perm)
            hook = model.decoder.embed.register_forward_hook(
                lambda module, inputs, out: lam * out + (1.0 - lam) * out[perm.to(out.device)])
            try:
                logits = model(feats, lens, ys)
            finally:
                hook.remove()
        else:
            logits = model(feats, lens, ys)
        targets = xe_targets(ys, ys_lens, model.eos_id)
        loss = xe_loss(logits, targets, self.label_smoothing)
        with torch.no_grad():
            mask = targets != 0
            acc = ((logits.argmax(-1) == targets) & mask).sum().float() / mask.sum()
        return loss, {"loss": loss.item(), "acc": acc.item(), "num_units": int(mask.sum())}


#: plain cross-entropy (seed 000)
xe_objective = XEObjective(label_smoothing=0.0, mixup_alpha=0.0)


def xe_model(opts: XEOptions, tokenizer) -> Tuple[torch.nn.Module, Dict[str, Any]]:
    """Build the captioner of ``opts`` (the registry's ``encoder``/``decoder`` with their
    ``*_conf``, SpecAugment), then set its feature normalisation (``feats_stats``), load
    ``init_param`` and the word vectors of ``init_embedding``; returns (model, model_conf).

    Raises:
        FileNotFoundError: the train dump dir has no ``feats_dim``.
        ValueError: bad model options, or word vectors of another shape.
    """
    model_conf = {
        "vocab_size": tokenizer.vocab_size,
        "feats_dim": feats_dim(opts.train_data_dir),
        "encoder": opts.encoder,
        "encoder_conf": opts.encoder_conf,
        "decoder": opts.decoder,
        "decoder_conf": opts.decoder_conf,
        "specaug_conf": opts.specaug_conf if opts.specaug else None,
    }
    try:
        model = build_model(model_conf)
    except TypeError as e:  # an unknown key of encoder_conf / decoder_conf / specaug_conf
        raise ValueError(f"encoder {opts.encoder!r} / decoder {opts.decoder!r}: {e}") from None
    if opts.feats_stats:
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
            ``batch_type``, ``bucket_pool`` (see :func:`captionlib.train.common.epoch_batches`);
            ``init_embedding``: ``.npy`` (vocab_size, embed_size) word vectors aligned with the
            token list (``caption_train_word2vec``, seed 000's CRNN-W), ``freeze_embedding``
            keeps them fixed; ``ngpu`` 0 (CPU) or > 0 (CUDA), under ``torchrun`` one process
            per GPU or per CPU rank with gloo (see :mod:`captionlib.utils.distributed`;
            ``batch_size`` is then the global batch); ``amp`` (see :class:`Trainer`);
            ``best_model_criterion``: ``cider_d`` (greedy CIDEr-D), ``bleu_4`` (greedy
            BLEU-4, seed 000's XE selection) or ``loss`` decides which ``keep_nbest`` epoch
            files stay; ``dry_run`` builds the model, logs it and returns.

    Best model files: ``valid.cider_d.best.pth``, ``valid.bleu_4.best.pth`` and
    ``valid.loss.best.pth``, whatever ``best_model_criterion``.

    Raises:
        ValueError: an option outside its choices or range (one line naming it), or mixup
            with ``xe_unit: clip``.
    """
    check_options(opts)
    if opts.mixup_alpha > 0 and opts.xe_unit == "clip":
        raise ValueError("mixup_alpha > 0 mixes captions: it needs xe_unit caption")
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
    inputs = run_inputs(opts.train_data_dir, model_conf, token_list=opts.token_list, feats_stats=opts.feats_stats,
                        init_param=opts.init_param, init_embedding=opts.init_embedding)
    fit(opts, model, XEObjective(opts.label_smoothing, opts.mixup_alpha), train_set, collate, validate, criteria, device,
        {"model_conf": model_conf, "token_list": tokenizer.token_list, "bpe_proto": tokenizer.bpe_proto},
        inputs=inputs)
