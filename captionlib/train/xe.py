"""Cross-entropy (teacher forcing) training, seed 000 sec. 3.4 ("XE training")."""

import logging
from typing import Any, Dict, Optional

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
from captionlib.train.common import (
    best_criteria,
    clip_validation,
    epoch_loader,
    feats_dim,
    load_feats_stats,
    log_model,
    write_config,
)
from captionlib.train import UNITS
from captionlib.train.checkpoint import load_checkpoint
from captionlib.train.trainer import Trainer, set_seed
from captionlib.utils.distributed import init_distributed


def load_embedding(model, path: str, freeze: bool = False) -> None:
    """Copy pre-trained word vectors (vocab_size, embed_size) into the decoder embedding.

    Raises:
        ValueError: if the array's shape differs from the embedding's.
    """
    import numpy as np

    vectors = np.load(path)
    weight = model.decoder.embed.weight
    if tuple(vectors.shape) != tuple(weight.shape):
        raise ValueError(f"{path}: word vectors of shape {vectors.shape}, the decoder embedding is {tuple(weight.shape)}")
    with torch.no_grad():
        weight.copy_(torch.as_tensor(vectors, dtype=weight.dtype))
    weight.requires_grad_(not freeze)
    logging.info("decoder embedding initialised from %s%s", path, " (frozen)" if freeze else "")


def xe_objective(model, batch):
    """Teacher-forced cross-entropy of a ``collate_captions`` batch, or of a
    ``collate_clip_captions`` batch (one encoder pass per clip, its embedding shared by all
    the clip's captions); returns (loss, stats): the mean over target tokens (eos
    included), stats ``loss``, ``acc`` and ``num_units`` (the target tokens)."""
    dev = next(model.parameters()).device
    feats, lens, ys, ys_lens = (t.to(dev) for t in batch[:4])
    if len(batch) == 5:
        logits = model.decoder.forward_teacher(model.encode(feats, lens)[batch[4].to(dev)], ys)
    else:
        logits = model(feats, lens, ys)
    targets = xe_targets(ys, ys_lens, model.eos_id)
    loss = xe_loss(logits, targets)
    with torch.no_grad():
        mask = targets != 0
        acc = ((logits.argmax(-1) == targets) & mask).sum().float() / mask.sum()
    return loss, {"loss": loss.item(), "acc": acc.item(), "num_units": int(mask.sum())}


#: the same random draws on every data-parallel rank (see captionlib.utils.distributed)
xe_objective.row_sharded_randomness = True


def train_xe(
    train_data_dir: str,
    valid_data_dir: str,
    token_list: str,
    output_dir: str,
    feats_stats: Optional[str] = None,
    encoder: str = "crnn",
    encoder_conf: Optional[Dict[str, Any]] = None,
    decoder: str = "gru",
    decoder_conf: Optional[Dict[str, Any]] = None,
    specaug: bool = False,
    specaug_conf: Optional[Dict[str, Any]] = None,
    batch_size: int = 32,
    xe_unit: str = "caption",
    max_epoch: int = 25,
    lr: float = 5e-4,
    weight_decay: float = 0.0,
    grad_clip: float = 0.0,
    num_iters_per_epoch: Optional[int] = None,
    batch_type: str = "random",
    bucket_pool: int = 32,
    keep_nbest: int = 5,
    best_model_criterion: str = "cider_d",
    log_interval: int = 50,
    max_len: int = 30,
    num_workers: int = 0,
    ngpu: int = 0,
    amp: str = "none",
    seed: int = 0,
    init_param: Optional[str] = None,
    init_embedding: Optional[str] = None,
    freeze_embedding: bool = False,
    dry_run: bool = False,
    config: Optional[Dict[str, Any]] = None,
) -> None:
    """Train a captioner with cross-entropy (Adam), validating every epoch.

    Args:
        train_data_dir, valid_data_dir: dump directories (feats.scp, text, spk2utt, feats_dim).
        token_list: ``tokens.txt`` (``bpe.model`` beside it for BPE).
        output_dir: experiment directory (config.yaml, checkpoints, tensorboard/).
        feats_stats: ``feats_stats.npz`` of the train set (global mean/std), or ``None``.
        encoder, encoder_conf, decoder, decoder_conf: model choice (defaults: seed 000).
        specaug, specaug_conf: SpecAugment in training (seed 000 post-challenge: T=50, F=10).
        batch_size: captions per batch (``xe_unit: caption``) or clips per batch (``clip``).
        xe_unit: ``caption`` iterates captions (seed 000, ESPnet: a clip is encoded once
            per caption); ``clip`` iterates clips, encodes each once and averages the
            cross-entropy over all its captions (5x fewer encoder passes per epoch on
            Clotho-style data, fewer but less noisy updates).
        max_epoch: epochs; lr: Adam learning rate.
        num_iters_per_epoch: batches per epoch, cycling through reshuffled passes (see
            :func:`captionlib.train.common.epoch_batches`); ``None``: one pass per epoch.
        batch_type, bucket_pool: ``random`` or length-``bucket``-ed batches (see
            :func:`captionlib.train.common.epoch_batches`).
        init_param: model file to initialise the weights from.
        init_embedding: ``.npy`` (vocab_size, embed_size) word vectors aligned with the
            token list (``caption_train_word2vec``), copied into the decoder's embedding
            (seed 000's CRNN-W); ``freeze_embedding`` keeps them fixed.
        ngpu: 0 (CPU) or > 0 (CUDA); under ``torchrun`` one process per GPU, or per CPU
            rank with gloo (see :mod:`captionlib.utils.distributed`); ``batch_size`` is
            then the global batch.
        amp: mixed precision on CUDA (``none``, ``bf16``, ``fp16``; see :class:`Trainer`).
        dry_run: build the model, log it, and return without training.
        config: resolved options written to ``config.yaml``.

        best_model_criterion: ``cider_d`` (greedy CIDEr-D), ``bleu_4`` (greedy BLEU-4,
            seed 000's XE selection) or ``loss``: decides which ``keep_nbest`` epoch files stay.

    Best model files: ``valid.cider_d.best.pth``, ``valid.bleu_4.best.pth`` and
    ``valid.loss.best.pth``, whatever ``best_model_criterion``.

    Raises:
        ValueError: bad ``xe_unit`` or ``best_model_criterion``.
    """
    if xe_unit not in UNITS:
        raise ValueError(f"xe_unit must be caption or clip, got {xe_unit!r}")
    criteria = best_criteria(best_model_criterion, ("cider_d", "bleu_4", "loss"))
    set_seed(seed)
    device = init_distributed(ngpu)
    tokenizer = load_tokenizer(token_list)
    model_conf = {
        "vocab_size": tokenizer.vocab_size,
        "feats_dim": feats_dim(train_data_dir),
        "encoder": encoder,
        "encoder_conf": encoder_conf or {},
        "decoder": decoder,
        "decoder_conf": decoder_conf or {},
        "specaug_conf": (specaug_conf or {}) if specaug else None,
    }
    model = build_model(model_conf)
    if feats_stats:
        stats = load_feats_stats(feats_stats)
        model.set_normalization(stats["mean"], stats["std"])
    if init_param:
        obj = load_checkpoint(init_param)
        model.load_state_dict(obj["model"] if "model" in obj else obj)
        logging.info("initialised from %s", init_param)
    if init_embedding:
        load_embedding(model, init_embedding, freeze_embedding)
    model.to(device)
    log_model(model)
    if config is not None:
        write_config(output_dir, config)
    if dry_run:
        return
    if xe_unit == "clip":
        train_set, collate = ClipCaptionsDataset(train_data_dir, tokenizer), collate_clip_captions
    else:
        train_set, collate = CaptionDataset(train_data_dir, tokenizer), collate_captions
    validate = clip_validation(
        AudioRefsDataset(valid_data_dir), tokenizer, device, batch_size, max_len,
        captions=dict(ClipCaptionsDataset(valid_data_dir, tokenizer).items),
    )
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay)
    Trainer(
        model,
        optimizer,
        xe_objective,
        epoch_loader(train_set, collate, batch_size, seed, num_workers, num_iters_per_epoch,
                     batch_type, bucket_pool),
        validate,
        output_dir,
        max_epoch,
        model_conf,
        tokenizer.token_list,
        best_criteria=criteria,
        keep_nbest=keep_nbest,
        grad_clip=grad_clip,
        log_interval=log_interval,
        device=device,
        extra_file_info={"bpe_proto": tokenizer.bpe_proto},
        amp=amp,
    ).run()
