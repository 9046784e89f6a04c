#!/usr/bin/env bash
# CI recipe of egs/audiocaps: stages 1-9 on a 10-clip stand-in for AudioCaps (audiocaps_fixture:
# the official CSV columns, audio made from real recordings of the event library, captions we
# wrote; see its README.md). One clip of train.csv has no audio on purpose: stage 1 lists it in
# data/train/missing and logs the summary line (1 of 7 clips missing), within
# --max_missing_fraction 0.2. Tiny XE (CRNN-GRU) then SCST; scored without the Java metrics.
# Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="CI recipe of egs/audiocaps: stages 1-9 on a 10-clip stand-in for AudioCaps"
recipe_help "${recipe_summary}" "" "$@"

exec ./caption.sh \
    --local_data_opts "--audiocaps_root audiocaps_fixture --audio_dir audiocaps_fixture/audio --max_missing_fraction 0.2" \
    --train_sets train --valid_set val --test_sets test \
    --nj 2 --inference_nj 2 \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo scst \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 0 \
    --ensemble_models "" \
    --metrics bleu,rouge_l,cider_d \
    "$@"
