#!/usr/bin/env bash
# The Transformer decoder on egs/soundscapes (issue 24; the Transformer rows of RESULTS.md).
# Run ./run.sh first: it makes the data, features and statistics, and the CRNN-GRU XE and SCST
# models of the mixed ensemble. Then, 3 seeds each, with the CRNN encoder of conf/train_xe.yaml:
#   1. CRNN + Transformer decoder, XE with label smoothing 0.1 and mixup (alpha 0.4), as the
#      DCASE 2024 baseline trains it (conf/train_xe_transformer.yaml ->
#      tuning/train_xe_transformer_small.yaml), then SCST from it;
#   2. a control of the decoder: CRNN + Top-Down attention LSTM (conf/train_xe_att.yaml), which
#      attends over the same frame outputs as the Transformer, trained like the CRNN-GRU;
#   3. CRNN + Transformer decoder, XE without label smoothing and mixup
#      (conf/train_xe_transformer_plain.yaml), then every RL objective from it, and per seed
#      the word-level ensemble of its XE and SCST models with the CRNN-GRU's XE and SCST models
#      (exp/ensemble_gru_transformer_seed<N>).
# RL uses the RL configs of ./run.sh at lr 1e-4 (theirs: 5e-4, under which SCST made the
# Transformer's validation CIDEr-D fall from 1.97 to 1.23 in one epoch; README "Transformer").
# Options are passed to every call of ./run.sh (e.g. --stage 8, --seeds 0).
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

rl_algo="scst reinforce_plus sle ac mc_pg multitask"
rl_args="--lr 0.0001"
members="exp/xe_train_xe_logmel_word{seed_suffix}/valid.cider_d.best.pth"
members+=" exp/xe_train_xe_logmel_word{seed_suffix}/scst_train_scst{seed_suffix}/valid.cider_d.best.pth"
members+=" exp/xe_train_xe_transformer_plain_logmel_word{seed_suffix}/valid.cider_d.best.pth"
members+=" exp/xe_train_xe_transformer_plain_logmel_word{seed_suffix}/scst_train_scst_lr0.0001{seed_suffix}/valid.cider_d.best.pth"

./run.sh --stage 5 --xe_config conf/train_xe_transformer.yaml --rl_algo scst --rl_args "${rl_args}" \
    --ensemble_models "" "$@"
./run.sh --stage 5 --xe_config conf/train_xe_att.yaml --rl_algo "" --ensemble_models "" "$@"
./run.sh --stage 5 --xe_config conf/train_xe_transformer_plain.yaml --rl_algo "${rl_algo}" --rl_args "${rl_args}" \
    --ensemble_models "${members}" --ensemble_tag ensemble_gru_transformer "$@"
