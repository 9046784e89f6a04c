#!/usr/bin/env bash
# Pretrained against scratch CNN10 encoders on egs/soundscapes (issue 26 item 8; the "CNN10"
# rows of RESULTS.md). Run ./run.sh first (data, features, statistics). Then, 3 seeds each:
#   1. CNN10 + Transformer decoder from scratch (conf/train_xe_cnn10.yaml), then SCST;
#   2. CNN10 pretrained by audio tagging on the corpus's event labels (stage 5 runs
#      caption_pretrain_tagging with conf/pretrain_tagging_cnn10.yaml into
#      exp/pretrain_tagging_cnn10/pretrained.pth, written in the PANNs authors' layout), loaded
#      strictly by the XE config (conf/train_xe_cnn10_pretrained.yaml), then SCST.
# Stage 2 first writes each dump dir's feats_config.yaml (the front end the tagging checkpoint
# is checked against), redoing an older dump once. SCST at lr 1e-4, as the Transformer rows.
# Options are passed to every call of ./run.sh (e.g. --seeds 0).
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

./run.sh --stage 2 --stop_stage 4 "$@"
./run.sh --stage 5 --xe_config conf/train_xe_cnn10.yaml --rl_algo scst --rl_args "--lr 0.0001" \
    --ensemble_models "" "$@"
./run.sh --stage 5 --tagging_config conf/pretrain_tagging_cnn10.yaml --xe_config conf/train_xe_cnn10_pretrained.yaml \
    --rl_algo scst --rl_args "--lr 0.0001" --ensemble_models "" "$@"
