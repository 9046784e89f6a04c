#!/usr/bin/env bash
# CI recipe of egs/msvd: every stage on 8 short videos made from real photos (msvd_fixture: the
# description corpus CSV and youtube_mapping.txt in the official formats, captions we wrote),
# 4 frames per video through a randomly initialised CNN (conf/feats_cnn.yaml), a tiny S2VT-style
# model (seed 004), every RL objective. Scored without the Java metrics to stay fast.
# Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="CI recipe of egs/msvd: every stage on 8 short videos made from real photos"
recipe_help "${recipe_summary}" "" "$@"

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
