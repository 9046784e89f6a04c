#!/usr/bin/env bash
# CI recipe of egs/msvd: every stage on 8 short videos made from real photos (msvd_fixture: the
# description corpus CSV and youtube_mapping.txt in the official formats, captions we wrote),
# 4 frames per video through a randomly initialised CNN (conf/feats_cnn.yaml), a tiny S2VT-style
# model (seed 004), every RL objective. Scored without the Java metrics to stay fast.
# Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
recipe_help="Usage: ./run.sh [options]   (egs/mini_msvd: CI recipe of egs/msvd: every stage on 8 short videos made from real photos)

This run.sh has no options of its own.

Every option of the pipeline (caption.sh, below) works too, e.g. --ngpu 1, --stage N --stop_stage M,
--rl_algo \"scst sle\"; its defaults below are the values this run.sh sets."
for _arg in "$@"; do
    case "${_arg}" in --help|-h) printf '%s\n\n' "${recipe_help}" 1>&2; break ;; esac
done

exec ./caption.sh \
    --local_data_opts "--msvd_root msvd_fixture --video_root msvd_fixture/YouTubeClips --split_sizes 5,1,2" \
    --train_sets train --valid_set val --test_sets test \
    --nj 2 --inference_nj 2 \
    --feats_type cnn \
    --feats_config conf/feats_cnn.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo "scst reinforce_plus sle ac mc_pg multitask" \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 3 \
    --ensemble_models "" \
    --metrics bleu,rouge_l,cider_d \
    "$@"
