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
from captionlib.rl import RL_ALGOS
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
    g.add_argument("--reward", default="cider_d:1.0", help="metric:weight[,metric:weight] (cider_d, bleu_1..4, rouge_l, spice, spider)")
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
    g.add_argument("--critic_lr", type=float, default=1e-3, help="lr of the critic/baseline/attribute networks")
    g.add_argument("--num_attributes", type=int, default=400, help="multitask: attribute words")
    g.add_argument("--freeze_encoder", type=str2bool, default=False, help="keep the audio encoder fixed")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_rl_train."""
    parser = get_parser()
    args = parse_args(parser, cmd, ("train_data_dir", "valid_data_dir", "output_dir", "init_param", "cider_df"))
    from captionlib.rl.train import train_rl

    kw = config_dict(args)
    for k in ("log_level", "token_list"):
        kw.pop(k)
    train_rl(**kw, config=config_dict(args))


if __name__ == "__main__":
    main()
