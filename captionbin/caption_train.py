#!/usr/bin/env python3
"""Cross-entropy (teacher forcing) training of a captioner (stage 5).

Usage:
    python -m captionbin.caption_train --config conf/train_xe.yaml \
        --train_data_dir dump/logmel/development --valid_data_dir dump/logmel/validation \
        --token_list data/token_list/word/tokens.txt --feats_stats exp/stats_logmel/feats_stats.npz \
        --output_dir exp/xe_train_xe_logmel_word --ngpu 0
    python -m captionbin.caption_train --print_config   # a complete config to start from

Re-running the same command resumes from ``<output_dir>/latest.pth`` (or returns at once
when all epochs are done). Data-parallel over N processes (gloo on CPU, NCCL with --ngpu):
    torchrun --nproc_per_node N -m captionbin.caption_train ... (see captionlib.utils.distributed)
"""

from typing import Optional, Sequence

from captionlib.train import SELECTION_MODES, UNITS
from captionlib.utils.cli import config_dict, get_base_parser, int_or_none, parse_args, str2bool, str_or_none, yaml_dict


def add_common_train_arguments(parser) -> None:
    """Options shared by caption_train and caption_rl_train."""
    g = parser.add_argument_group("data and output")
    g.add_argument("--train_data_dir", help="dump dir of the train set (feats.scp, text, spk2utt)")
    g.add_argument("--valid_data_dir", help="dump dir of the validation set")
    g.add_argument("--output_dir", help="experiment directory")
    g = parser.add_argument_group("optimisation")
    g.add_argument("--batch_size", type=int, default=32,
                   help="items per batch (XE: captions, or clips with --xe_unit clip; RL: clips)")
    g.add_argument("--max_epoch", type=int, default=25)
    g.add_argument("--lr", type=float, default=5e-4, help="Adam learning rate")
    g.add_argument("--weight_decay", type=float, default=0.0)
    g.add_argument("--grad_clip", type=float, default=0.0, help="max gradient norm (0 = off)")
    g.add_argument(
        "--num_iters_per_epoch", type=int_or_none, default=None,
        help="batches per epoch, taken from reshuffled passes over the train set (ESPnet2); none: one pass",
    )
    g.add_argument("--batch_type", default="random", choices=("random", "bucket"),
                   help="random: shuffled batches; bucket: length-bucketed batches (little padding)")
    g.add_argument("--bucket_pool", type=int, default=32,
                   help="batch_type bucket: batches per sorting pool (0: sort the whole set, ESPnet2's 'sorted')")
    g.add_argument("--keep_nbest", type=int, default=5, help="epoch model files kept (the best by --best_model_criterion)")
    g.add_argument("--best_model_criterion", default="cider_d", choices=tuple(SELECTION_MODES),
                   help="validation metric of greedy captions (or XE loss) that ranks the epochs; "
                        "every metric still gets its valid.<metric>.best.pth (seed 000 XE: bleu_4)")
    g.add_argument("--log_interval", type=int, default=50, help="steps between progress lines")
    g.add_argument("--max_len", type=int, default=30, help="max caption tokens when decoding (eos included)")
    g = parser.add_argument_group("runtime")
    g.add_argument("--num_workers", type=int, default=0)
    g.add_argument("--ngpu", type=int, default=0,
                   help="0: CPU; >0: CUDA (one GPU per rank when launched by torchrun)")
    g.add_argument("--amp", default="none", choices=("none", "bf16", "fp16"),
                   help="mixed precision on CUDA (bf16 autocast, or fp16 with a gradient scaler); ignored on CPU")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--dry_run", type=str2bool, default=False, help="build the model and exit")


def get_parser():
    """Return the argument parser of caption_train."""
    parser = get_base_parser("Train a captioner with cross-entropy (teacher forcing)")
    add_common_train_arguments(parser)
    parser.add_argument("--token_list", help="tokens.txt (bpe.model beside it for BPE)")
    parser.add_argument("--feats_stats", type=str_or_none, default=None, help="feats_stats.npz (global mean/std)")
    parser.add_argument("--init_param", type=str_or_none, default=None, help="model file to start from")
    parser.add_argument("--init_embedding", type=str_or_none, default=None,
                        help=".npy word vectors (vocab, embed) aligned with the token list (Word2Vec init)")
    parser.add_argument("--freeze_embedding", type=str2bool, default=False, help="keep --init_embedding fixed")
    parser.add_argument("--xe_unit", default="caption", choices=UNITS,
                        help="caption: one item per caption (seed 000); clip: one encoder pass per clip, "
                             "cross-entropy averaged over all its captions")
    g = parser.add_argument_group("model")
    # the registry of captionlib.models.captioner (ENCODERS, DECODERS); spelled here so that
    # --help stays fast (no torch import)
    g.add_argument("--encoder", default="crnn", choices=("crnn", "linear", "rnn"),
                   help="crnn: seed 000's audio CRNN; linear: per-frame/region projection (Show-and-Tell, "
                        "Top-Down); rnn: projection + LSTM/GRU over frames (S2VT, seed 004)")
    g.add_argument("--encoder_conf", type=yaml_dict, default={}, help="encoder options (YAML mapping)")
    g.add_argument("--decoder", default="gru", choices=("gru", "lstm", "att_lstm"),
                   help="gru / lstm: fed the clip vector first, then the words (seed 000, Show-and-Tell); "
                        "att_lstm: Top-Down attention over the encoder's frame outputs (seed 001)")
    g.add_argument("--decoder_conf", type=yaml_dict, default={}, help="decoder options (YAML mapping)")
    g.add_argument("--specaug", type=str2bool, default=False, help="SpecAugment during training")
    g.add_argument("--specaug_conf", type=yaml_dict, default={}, help="SpecAugment options (YAML mapping)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_train."""
    parser = get_parser()
    args = parse_args(parser, cmd, ("train_data_dir", "valid_data_dir", "output_dir", "token_list"))
    from captionlib.train.xe import train_xe

    from captionlib.utils.distributed import destroy

    kw = config_dict(args)
    kw.pop("log_level")
    train_xe(**kw, config=config_dict(args))
    destroy()


if __name__ == "__main__":
    main()
