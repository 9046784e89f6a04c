#!/usr/bin/env python3
"""Decode clips (feats.scp) with a model file into ``<output_dir>/text`` (stage 8).

Several ``--model_file`` options decode with a word-level ensemble (seed 000 CRNN-E: log of
the mean of the models' word probabilities at each step; greedy and beam search); the models
must share one token list. ``--num_diversity_samples N`` also writes ``<output_dir>/text_samples``
with N multinomial samples per clip, ids ``<clip-id>#<k>`` (k = 1..N), for the diversity
metrics of ``caption_score --hyp_samples`` (seed 001: Div-1, Div-2, mBLEU-4, and the mean
CIDEr-D of the samples). ``--nbest N`` also writes ``<output_dir>/text_nbest``: the N best
hypotheses of a beam search of width max(beam_size, N), ids ``<clip-id>#<rank>``, for the
diversity of the beams (``caption_score --hyp_nbest``; seed 001 table 4 "bs").
``--sample_top_p P`` < 1 draws the samples by nucleus sampling. ``--rerank N`` writes as ``text``
the minimum-Bayes-risk choice among N samples and the beam/greedy caption (the candidate of
highest mean CIDEr-D against the others, plus ``--rerank_lm_weight`` times its length-normalised
log-likelihood), and the beam/greedy caption as ``text_unranked``
(:func:`captionlib.decode.rerank.mbr_select`); ``--rerank 0``, the default, writes today's ``text``.

Usage:
    python -m captionbin.caption_decode --config conf/decode.yaml \
        --model_file exp/xe_train_xe_logmel_word/valid.cider_d.best.pth \
        --feats_scp dump/logmel/evaluation/feats.scp --output_dir exp/.../decode_x/evaluation --beam_size 3
    # ensemble of two models, plus 5 samples per clip
    python -m captionbin.caption_decode --config conf/decode.yaml \
        --model_file exp/a/valid.cider_d.best.pth --model_file exp/b/valid.cider_d.best.pth \
        --num_diversity_samples 5 --feats_scp ... --output_dir ...
    # the 5 best beam hypotheses per clip too (text_nbest)
    python -m captionbin.caption_decode --model_file ... --beam_size 5 --nbest 5 --feats_scp ... --output_dir ...
    # the consensus of 16 nucleus samples and the beam caption as text (the beam caption: text_unranked)
    python -m captionbin.caption_decode --model_file ... --beam_size 3 --rerank 16 --sample_top_p 0.9 \
        --feats_scp ... --output_dir ...
"""

import logging
import sys
from typing import Optional, Sequence

from captionlib.decode.options import check_decode_options
from captionlib.utils.cli import get_base_parser, parse_args, str_or_none


def get_parser():
    """Return the argument parser of caption_decode."""
    parser = get_base_parser("Caption the clips of a feats.scp")
    parser.add_argument("--model_file", action="append", default=None,
                        help="model file (.pth) written by training; repeat it to decode with a "
                             "word-level ensemble of several models (same token list)")
    parser.add_argument("--feats_scp", required=True, help="<clip-id> <features> lines")
    parser.add_argument("--output_dir", required=True, help="writes text (<clip-id> <caption>)")
    parser.add_argument("--beam_size", type=int, default=1, help="1 = greedy")
    parser.add_argument("--batch_size", type=int, default=32, help="clips per batch")
    parser.add_argument("--max_len", type=int, default=30, help="max tokens (eos included)")
    parser.add_argument("--length_penalty", type=float, default=0.0, help="beam: score / length**p")
    parser.add_argument("--num_diversity_samples", type=int, default=0,
                        help="N > 0: also write text_samples, N multinomial samples per clip "
                             "(ids <clip-id>#<k>, k=1..N) for Div-1/Div-2/mBLEU-4")
    parser.add_argument("--nbest", type=int, default=0,
                        help="N > 0: also write text_nbest, the N best hypotheses of a beam of width "
                             "max(beam_size, N) per clip (ids <clip-id>#<rank>) for Div-1/Div-2/mBLEU-4 of the beams")
    parser.add_argument("--sample_temperature", type=float, default=1.0,
                        help="temperature of the diversity samples (1 = the model's distribution)")
    parser.add_argument("--sample_top_k", type=int, default=0,
                        help="K > 0: draw each token of the diversity samples among the K most probable "
                             "(top-k sampling); 0: among all")
    parser.add_argument("--sample_top_p", type=float, default=1.0,
                        help="P < 1: draw each token of the samples among the smallest set of most probable "
                             "tokens whose probability reaches P (nucleus sampling); 1: among all")
    parser.add_argument("--rerank", type=int, default=0,
                        help="N > 0: write as text the minimum-Bayes-risk choice (highest mean CIDEr-D against "
                             "the other candidates) among N samples and the beam/greedy caption, and the "
                             "beam/greedy caption as text_unranked; 0: the beam/greedy caption")
    parser.add_argument("--rerank_lm_weight", type=float, default=0.0,
                        help="with --rerank: add this weight times a candidate's length-normalised "
                             "log-likelihood to its CIDEr-D consensus")
    parser.add_argument("--rerank_fluency_weight", type=float, default=0.5,
                        help="with --rerank: subtract this from the score of a candidate flagged as disfluent "
                             "(by --fluency_model, else by the rule checks); 0.5 was the best of those tried on "
                             "the egs/soundscapes validation clips (its README, Re-ranking)")
    parser.add_argument("--fluency_model", type=str_or_none, default=None,
                        help="--rerank_fluency_weight: the fluency error detector (caption_train_fluency)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the samples (diversity and --rerank)")
    parser.add_argument("--ngpu", type=int, default=0)
    parser.add_argument("--num_threads", type=int, default=1,
                        help="torch threads per job (1: one core per job; 0: torch default)")
    return parser


def main(cmd: Optional[Sequence[str]] = None) -> None:
    """Run caption_decode."""
    parser = get_parser()
    args = parse_args(parser, cmd)
    if not args.model_file:
        parser.error("the following arguments are required: --model_file")
    try:
        check_decode_options(args.beam_size, args.batch_size, args.max_len, args.length_penalty, args.nbest,
                             args.num_diversity_samples, args.sample_temperature, args.sample_top_k,
                             args.sample_top_p, args.rerank, args.rerank_lm_weight, args.rerank_fluency_weight)
    except ValueError as e:
        parser.error(f"--{e}")
    from captionlib.decode.inference import decode_feats_scp

    try:
        decode_feats_scp(
            args.model_file, args.feats_scp, args.output_dir, args.beam_size, args.batch_size,
            args.max_len, args.length_penalty, args.ngpu,
            num_diversity_samples=args.num_diversity_samples,
            sample_temperature=args.sample_temperature, seed=args.seed, num_threads=args.num_threads,
            nbest=args.nbest, sample_top_k=args.sample_top_k, sample_top_p=args.sample_top_p,
            rerank=args.rerank, rerank_lm_weight=args.rerank_lm_weight,
            rerank_fluency_weight=args.rerank_fluency_weight, fluency_model=args.fluency_model,
        )
    except (ValueError, OSError) as e:  # OSError: a missing model file or feats.scp, an output that cannot be written
        logging.error("%s", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
