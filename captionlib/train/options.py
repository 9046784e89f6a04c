"""The options of the training entry points, each written once.

One dataclass per trainer: :class:`TrainOptions` holds what XE (stage 5) and RL (stage 6)
share, :class:`XEOptions` and :class:`captionlib.rl.options.RLOptions` add their own. Each
field carries its default, its help text and its argparse group; the binaries generate
their parsers from the fields (:func:`captionlib.utils.cli.add_options`), so a default is
written in one place only. This is icefall's ``get_params()`` and ESPnet2's
``add_arguments`` in one object. The module imports no torch, so ``--help`` stays fast.
"""

from dataclasses import dataclass, field
from typing import Any, Collection, Dict, Optional, Union

from captionlib.data import UNITS
from captionlib.decode.options import COMPILE_MODES
from captionlib.train import SELECTION_MODES

#: ``--batch_type`` values: shuffled batches, or length-bucketed ones (see ``epoch_batches``).
BATCH_TYPES = ("random", "bucket")
#: ``--amp`` values (see :data:`captionlib.train.trainer.AMP_MODES`).
AMP_CHOICES = ("none", "bf16", "fp16")
#: ``--optim`` values (see :func:`captionlib.train.schedule.make_optimizer`).
OPTIMIZERS = ("adam", "adamw")
#: ``--scheduler`` values (see :func:`captionlib.train.schedule.lr_factor`).
SCHEDULERS = ("none", "warmup_cosine", "noam", "warmup_step")


def option(default: Any, help: str, group: str, choices: Optional[Collection] = None, required: bool = False,
           valid: Optional[str] = None) -> Any:
    """A dataclass field that is also a command-line option.

    Args:
        default: the default value (a dict default is copied per instance).
        help: the ``--help`` text.
        group: the argparse group it is listed under.
        choices: the allowed values, checked by argparse and by
            :func:`captionlib.utils.cli.check_options`.
        required: the binary refuses to run without it (checked after ``--print_config``).
        valid: the allowed range of a number, checked by
            :func:`captionlib.utils.cli.check_options`: ``">= 1"``,
            ``"> 0"``, or an interval such as ``"[0, 1)"`` (``None`` values are not checked).
    """
    meta = {"help": help, "group": group, "choices": choices, "required": required, "valid": valid}
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


DATA, OPTIM, RUNTIME, MODEL = "data and output", "optimisation", "runtime", "model"


def freeze_encoder_option() -> Any:
    """The ``freeze_encoder`` field of XE and RL training (one name in both): ``true`` (for good),
    N >= 1 (the first N epochs) or ``false`` / 0 (never); a frozen encoder keeps its weights,
    BatchNorm statistics and dropout fixed (:func:`captionlib.train.xe.frozen_epochs`)."""
    return option(False, "keep the encoder fixed (weights, BatchNorm statistics, dropout): true (for good), N (the "
                         "first N epochs) or false", MODEL, valid=">= 0")


@dataclass
class TrainOptions:
    """Options shared by XE training (``caption_train``) and RL fine-tuning (``caption_rl_train``).

    Units: ``lr`` and ``weight_decay`` are Adam's; ``grad_clip`` is an L2 norm (0: off);
    ``max_len`` counts tokens (eos included); ``batch_size`` counts items (XE: captions or
    clips, RL: clips) of the global batch under ``torchrun``.
    """

    train_data_dir: Optional[str] = option(None, "dump dir of the train set (feats.scp, text, spk2utt)", DATA,
                                           required=True)
    valid_data_dir: Optional[str] = option(None, "dump dir of the validation set", DATA, required=True)
    output_dir: Optional[str] = option(None, "experiment directory", DATA, required=True)
    batch_size: int = option(32, "items per batch (XE: captions, or clips with --xe_unit clip; RL: clips)", OPTIM,
                             valid=">= 1")
    max_epoch: int = option(25, "epochs", OPTIM, valid=">= 1")
    lr: float = option(5e-4, "peak learning rate", OPTIM, valid="> 0")
    optim: str = option("adam", "adam (weight_decay: L2 on every parameter) or adamw (decoupled weight decay, "
                                "biases, norm gains and embeddings exempt)", OPTIM, OPTIMIZERS)
    weight_decay: float = option(0.0, "weight decay (Adam: L2; AdamW: decoupled)", OPTIM, valid=">= 0")
    scheduler: str = option("none", "learning-rate schedule, updated every optimizer step: none, warmup_cosine "
                                    "(DCASE 2024 baseline), noam (ESPnet WarmupLR: peak lr at warmup_steps), "
                                    "warmup_step", OPTIM, SCHEDULERS)
    warmup_steps: int = option(0, "optimizer steps of linear warm-up from 0 to lr", OPTIM, valid=">= 0")
    min_lr_ratio: float = option(0.0, "warmup_cosine: final lr / lr", OPTIM, valid="[0, 1]")
    decay_steps: int = option(1000, "warmup_step: optimizer steps between decays", OPTIM, valid=">= 1")
    decay_rate: float = option(0.1, "warmup_step: lr factor of each decay", OPTIM, valid="(0, 1]")
    accum_grad: int = option(1, "batches whose gradients are summed into one optimizer step (ESPnet2)", OPTIM,
                             valid=">= 1")
    grad_clip: float = option(0.0, "max gradient norm (0 = off)", OPTIM, valid=">= 0")
    num_iters_per_epoch: Optional[int] = option(
        None, "batches per epoch, taken from reshuffled passes over the train set (ESPnet2); none: one pass", OPTIM,
        valid=">= 1")
    batch_type: str = option("random", "random: shuffled batches; bucket: length-bucketed batches (little padding)",
                             OPTIM, BATCH_TYPES)
    bucket_pool: int = option(32, "batch_type bucket: batches per sorting pool (0: sort the whole set, ESPnet2's "
                                  "'sorted')", OPTIM, valid=">= 0")
    keep_nbest: int = option(5, "epoch model files kept (the best by --best_model_criterion)", OPTIM, valid=">= 1")
    best_model_criterion: str = option(
        "cider_d", "validation metric of greedy captions (or XE loss) that ranks the epochs; every metric still "
                   "gets its valid.<metric>.best.pth (seed 000 XE: bleu_4)", OPTIM, tuple(SELECTION_MODES))
    log_interval: int = option(50, "steps between progress lines", OPTIM, valid=">= 1")
    max_len: int = option(30, "max caption tokens when decoding (eos included; 1 leaves room for eos alone)", OPTIM,
                          valid=">= 2")
    num_workers: int = option(0, "DataLoader worker processes", RUNTIME, valid=">= 0")
    ngpu: int = option(0, "0: CPU; >0: CUDA (one GPU per rank when launched by torchrun)", RUNTIME, valid=">= 0")
    amp: str = option("none", "mixed precision on CUDA (bf16 autocast, or fp16 with a gradient scaler); ignored on "
                              "CPU", RUNTIME, AMP_CHOICES)
    decode_compile: str = option(
        "none", "sampling and greedy decoding (RL samples and baselines, validation captions) with each step (the "
                "decoder step and the draw) compiled as one graph by torch.compile: reduce-overhead replays it as a "
                "CUDA graph; for RL use it with --sample_logprobs recompute. cuda-graph: on a GPU, the whole loop "
                "captured as one CUDA graph, for the passes without gradients (greedy baselines, validation, samples "
                "of --sample_logprobs recompute). none: eager; the CPU gains nothing", RUNTIME, COMPILE_MODES)
    gradient_checkpointing: bool = option(
        False, "when the encoder trains (BEATs, the audio ConvNeXt): keep each layer's input only and run the layer "
               "again in the backward pass, with its dropout draws; the same gradients for less memory and one more "
               "forward pass of the encoder", RUNTIME)
    seed: int = option(0, "random seed (python, numpy, torch; batch order)", RUNTIME)
    dry_run: bool = option(False, "build the model and exit", RUNTIME)
    check_only: bool = option(False, "check the options (ranges, choices, combinations) and exit 0 if they are valid, "
                                     "loading and writing nothing", RUNTIME)


@dataclass
class XEOptions(TrainOptions):
    """Options of cross-entropy training (stage 5, seed 000 sec. 3.4); see :func:`captionlib.train.xe.train_xe`."""

    token_list: Optional[str] = option(None, "tokens.txt (bpe.model beside it for BPE)", DATA, required=True)
    feats_stats: Optional[str] = option(None, "feats_stats.npz (global mean/std)", DATA)
    init_param: Optional[str] = option(None, "model file to start from", DATA)
    init_embedding: Optional[str] = option(
        None, ".npy word vectors (vocab, embed) aligned with the token list (Word2Vec init)", DATA)
    freeze_embedding: bool = option(False, "keep --init_embedding fixed", DATA)
    label_smoothing: float = option(0.0, "label smoothing of the cross-entropy targets (DCASE 2024 baseline: 0.2)",
                                    OPTIM, valid="[0, 1)")
    mixup_alpha: float = option(
        0.0, "mixup as CoNeTTE: features and previous-word embeddings mixed with another item of the batch with a "
             "Beta(alpha, alpha) weight lambda >= 0.5, targets unmixed (0: off; CoNeTTE: 0.4); "
             "xe_unit clip: clips mixed, "
             "each caption with a caption of the partner clip", OPTIM, valid=">= 0")
    xe_unit: str = option("caption", "caption: one item per caption (seed 000); clip: one encoder pass per clip, "
                                     "cross-entropy averaged over all its captions", DATA, UNITS)
    # the registry of captionlib.models.captioner (ENCODERS, DECODERS), spelled here so that
    # --help imports no torch; tests/captionlib/models/test_registry.py checks that they agree
    encoder: str = option("crnn", "crnn: seed 000's audio CRNN; linear: per-frame/region projection (Show-and-Tell, "
                                  "Top-Down); rnn: projection + LSTM/GRU over frames (S2VT, seed 004); cnn14 / cnn10: "
                                  "PANNs CNN14 / CNN10 (Kong et al. 2020) on feats_panns.yaml features; convnext: the "
                                  "audio ConvNeXt-Tiny (Pellegrini et al. 2023; CoNeTTE, DCASE 2024 baseline) on "
                                  "feats_convnext.yaml features; beats: BEATs (Chen et al. 2023) on feats_beats.yaml "
                                  "(Kaldi fbank) features", MODEL,
                          ("crnn", "linear", "rnn", "cnn14", "cnn10", "convnext", "beats"))
    encoder_conf: Dict[str, Any] = option(
        {}, "encoder options (YAML mapping); transformer: options of Transformer encoder layers over the encoder's "
            "frames (num_layers, d_model, nhead, dim_feedforward, dropout; SJTU's CNN + Transformer); and two keys "
            "the trainer reads (kept out of the model files): pretrained: a checkpoint loaded strictly into the "
            "encoder (cnn14 / cnn10: PANNs' Cnn14_mAP=0.431.pth / Cnn10_mAP=0.380.pth, zenodo.org/record/3987831; "
            "convnext: convnext_tiny_465mAP_BL_AC_70kit.pth, zenodo.org/record/8020843; beats: "
            "BEATs_iter3_plus_AS2M_finetuned_on_AS2M_cpt2.pt, github.com/microsoft/unilm/tree/master/beats, its cfg "
            "checked against encoder_conf; or caption_pretrain_tagging's pretrained.pth), its front end checked "
            "against <train_data_dir>/feats_config.yaml, the feature "
            "normalisation then the identity (freeze_encoder keeps it fixed); lr_factor: the encoder's lr / lr", MODEL)
    freeze_encoder: Union[bool, int] = freeze_encoder_option()
    decoder: str = option("gru", "gru / lstm: fed the clip vector first, then the words (seed 000, Show-and-Tell); "
                                 "att_lstm: Top-Down attention over the encoder's frame outputs (seed 001); "
                                 "transformer: Transformer decoder over the encoder's frame outputs (Vaswani et al. "
                                 "2017; CoNeTTE / DCASE 2024 baseline)", MODEL,
                          ("gru", "lstm", "att_lstm", "transformer"))
    decoder_conf: Dict[str, Any] = option({}, "decoder options (YAML mapping)", MODEL)
    specaug: bool = option(False, "SpecAugment during training", MODEL)
    specaug_conf: Dict[str, Any] = option({}, "SpecAugment options (YAML mapping)", MODEL)


@dataclass
class TaggingOptions(TrainOptions):
    """Options of audio tagging pretraining (``caption_pretrain_tagging``); see
    :func:`captionlib.train.tagging.train_tagging`. ``best_model_criterion`` and ``max_len``
    are not read: epochs are ranked by validation mAP."""

    train_labels: Optional[str] = option(
        None, "labels CSV of the train clips (Clotho's clotho_metadata_<split>.csv layout: a file_name and a "
              "keywords column, keywords ';'-separated)", DATA)
    valid_labels: Optional[str] = option(None, "labels CSV of the validation clips", DATA)
    key_column: str = option("file_name", "column naming the clip: file_name (the file names of <data_dir>/aud2name) "
                                          "or clip_id", DATA, ("file_name", "clip_id"))
    label_column: str = option("keywords", "column of the labels", DATA)
    label_separator: str = option(";", "separator of the labels within the label column", DATA)
    keywords_from_captions: int = option(
        0, "without labels CSVs: classes are this many caption keywords (words in >= keywords_min_captions of a "
           "clip's captions, stop words excluded; 0: off)", DATA, valid=">= 0")
    keywords_min_captions: int = option(2, "captions of a clip that must hold a word for it to be a label", DATA,
                                        valid=">= 1")
    encoder: str = option("cnn10", "encoder to pretrain: cnn14 / cnn10 (PANNs, Kong et al. 2020), convnext "
                                   "(Pellegrini et al. 2023)", MODEL, ("cnn14", "cnn10", "convnext"))
    encoder_conf: Dict[str, Any] = option({}, "encoder options (YAML mapping; classes_num is set from the labels)",
                                          MODEL)
