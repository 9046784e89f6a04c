#!/usr/bin/env bash
# CI recipe of egs/tgif: every stage on 12 small animated GIFs of moving shapes (tgif_fixture: the
# TGIF-Release layout, made by tgif_fixture/make_fixture.py; one listed GIF has no file), 4 frames
# per GIF sampled uniformly in time through a randomly initialised CNN (conf/feats_cnn.yaml), a tiny
# seed 001 model, XE then SLE. Scored without the Java metrics to stay fast.
# Seed 001's system on it: ./run_preset.sh seed001_sle_tgif. Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="CI recipe of egs/tgif: every stage on 12 small animated GIFs"
recipe_help "${recipe_summary}" "" "$@"

exec ./caption.sh \
    --local_data_opts "--tgif_root tgif_fixture/release --gif_root tgif_fixture/gifs --max_missing_fraction 0.2" \
    --train_sets train --valid_set val --test_sets test \
    --nj 2 --inference_nj 2 \
    --feats_type cnn \
    --feats_config conf/feats_cnn.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo sle \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 3 \
    --ensemble_models "" \
    --metrics bleu,rouge_l,cider_d \
    "$@"
