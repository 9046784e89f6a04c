#!/usr/bin/env python3
"""RL fine-tuning of an XE captioner (stage 6): ``--rl_algo scst|reinforce_plus|sle|ac|mc_pg|multitask``.

Usage:
    python -m captionbin.caption_rl_train --rl_algo scst --config conf/train_scst.yaml \
        --init_param exp/xe_train_xe_logmel_word/valid.cider_d.best.pth \
        --train_data_dir dump/logmel/development --valid_data_dir dump/logmel/validation \
        --cider_df exp/stats_logmel/cider_df.pkl \
        --output_dir exp/xe_train_xe_logmel_word/scst_train_scst --ngpu 0

Re-running the same command resumes from ``<output_dir>/latest.pth``.
"""

from typing import Optional, Sequence

from captionbin.caption_train import add_common_train_arguments
from captionlib.rl import (
    AC_REWARDS,
    AC_VALUE_ENCODERS,
    ATTRIBUTE_INPUTS,
    ATTRIBUTE_SELECTIONS,
    RL_ALGOS,
    SLE_DISTANCES,
    SLE_DIVERSITY_BASELINES,
)
from captionlib.train import UNITS
from captionlib.utils.cli import config_dict, get_base_parser, parse_args, str2bool, str_or_none


def get_parser():
    """Return the argument parser of caption_rl_train."""
    parser = get_base_parser("Fine-tune a captioner with reinforcement learning (see captionlib.rl.train)")
    add_common_train_arguments(parser)
    parser.set_defaults(lr=5e-5)
    parser.add_argument("--rl_algo", default="scst", choices=RL_ALGOS)
    parser.add_argument("--init_param", help="XE model file to start from")
    parser.add_argument("--cider_df", help="CIDEr-D document frequencies of the train refs (stage 4)")
    parser.add_argument("--token_list", type=str_or_none, default=None,
                        help="ignored if given: the token list comes from the model file")
    g = parser.add_argument_group("policy gradient")
    g.add_argument("--reward", default="cider_d:1.0", help="metric:weight[,metric:weight] (cider_d, cider_d_batch, bleu_1..4, rouge_l, spice, spider)")
    g.add_argument("--spice_lib_dir", type=str_or_none, default=None, help="CoreNLP jars for spice/spider rewards")
    g.add_argument("--num_samples", type=int, default=1, help="samples per clip (reinforce_plus, sle, multitask)")
    g.add_argument("--baseline", default="greedy", choices=("greedy", "mean"), help="reinforce_plus, multitask")
    g.add_argument("--baseline_encoding", default="shared", choices=("shared", "separate"),
                   help="greedy baseline: decode from the sampling pass's encoding (shared, the seed "
                        "authors' code) or re-encode in eval mode (separate)")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    g.add_argument("--alpha", type=float, default=None, help="weight of the RL term (sle 0.75, multitask 0.95)")
    g.add_argument("--num_rollouts", type=int, default=3, help="mc_pg: Monte-Carlo rollouts per step")
    g.add_argument("--critic_warmup_steps", type=int, default=100, help="ac: steps training the critic only")
    g.add_argument("--ac_reward", default="metric", choices=AC_REWARDS,
                   help="ac: the --reward metrics (metric: A2C with a CIDEr-D reward by default) or seed 002's "
                        "reward, the cosine of clip and caption in a jointly trained embedding (embedding)")
    g.add_argument("--value_encoder", default="shared", choices=AC_VALUE_ENCODERS,
                   help="ac: the critic reads the captioner's detached audio embedding (shared) or has its "
                        "own audio encoder (separate, seed 002)")
    g.add_argument("--embedding_size", type=int, default=256, help="ac --ac_reward embedding: embedding space size")
    g.add_argument("--embedding_margin", type=float, default=0.2,
                   help="ac --ac_reward embedding: margin of the bidirectional hinge ranking loss (seed 002 eq. 5)")
    g.add_argument("--critic_lr", type=float, default=1e-3, help="lr of the critic/baseline/attribute networks")
    g.add_argument("--sle_distance", default="bleu34_sum", choices=SLE_DISTANCES,
                   help="sle: d(y, y') = 2 - BLEU-3 - BLEU-4 (bleu34_sum, seed 001 sec. 4.3) or "
                        "1 - (BLEU-3 + BLEU-4) / 2 (bleu34_mean: half the diversity weight)")
    g.add_argument("--sle_diversity_baseline", default="leave_one_out", choices=SLE_DIVERSITY_BASELINES,
                   help="sle: diversity baseline = mean distance between the other samples (leave_one_out, "
                        "unbiased) or of all pairs (all_pairs, seed 001 sec. 4.3: scales the diversity "
                        "gradient by (s-1)(s-2)/s^2, 0.48 at s=5)")
    g.add_argument("--num_attributes", type=int, default=400, help="multitask: attribute words")
    g.add_argument("--attribute_selection", default="pos", choices=ATTRIBUTE_SELECTIONS,
                   help="multitask: attributes are the most frequent nouns, verbs and adjectives (pos, "
                        "seed 004) or words outside a stop-word list (stopwords)")
    g.add_argument("--attribute_input", default="cnn", choices=ATTRIBUTE_INPUTS,
                   help="multitask: the attribute head reads the time-pooled CNN features (cnn, seed 004) "
                        "or the audio embedding (embedding)")
    g.add_argument("--rl_unit", default="clip", choices=UNITS,
                   help="an epoch iterates clips, or (clip, caption) pairs like the seed 000 authors' code "
                        "(each clip once per reference: 5x the updates on Clotho)")
    g.add_argument("--freeze_encoder", type=str2bool, default=False, help="keep the audio encoder fixed")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_rl_train."""
    parser = get_parser()
    args = parse_args(parser, cmd, ("train_data_dir", "valid_data_dir", "output_dir", "init_param", "cider_df"))
    from captionlib.rl.train import train_rl
    from captionlib.utils.distributed import destroy

    kw = config_dict(args)
    for k in ("log_level", "token_list"):
        kw.pop(k)
    train_rl(**kw, config=config_dict(args))
    destroy()


if __name__ == "__main__":
    main()
