#!/usr/bin/env bash
# The Transformer decoder on egs/soundscapes (issue 24; the Transformer rows of RESULTS.md).
# Run ./run.sh first: it makes the data, features and statistics, and the CRNN-GRU models of
# the mixed ensemble. Then, with the CRNN encoder of conf/train_xe.yaml and a small Transformer
# decoder (conf/train_xe_transformer.yaml -> tuning/train_xe_transformer_small.yaml):
#   1. XE without label smoothing and mixup (conf/train_xe_transformer_plain.yaml), 3 seeds:
#      the control of the training recipe;
#   2. a control of the decoder: XE of the CRNN with the Top-Down attention LSTM
#      (conf/train_xe_att.yaml), which attends over the same frame outputs as the Transformer,
#      trained like the CRNN-GRU;
#   3. XE with label smoothing 0.1 and mixup (alpha 0.4), then every RL objective from it (the
#      RL configs of ./run.sh), 3 seeds, and per seed the word-level ensemble of its 7 models
#      with the 7 CRNN-GRU models of ./run.sh (exp/ensemble_gru_transformer_seed<N>).
# Options are passed to every call of ./run.sh (e.g. --stage 8, --seeds 0).
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

rl_algo="scst reinforce_plus sle ac mc_pg multitask"
members=()
for tag in xe_train_xe_logmel_word xe_train_xe_transformer_logmel_word; do
    members+=("exp/${tag}{seed_suffix}/valid.cider_d.best.pth")
    for algo in ${rl_algo}; do
        members+=("exp/${tag}{seed_suffix}/${algo}_train_${algo}{seed_suffix}/valid.cider_d.best.pth")
    done
done

./run.sh --stage 5 --xe_config conf/train_xe_transformer_plain.yaml --rl_algo "" --ensemble_models "" "$@"
./run.sh --stage 5 --xe_config conf/train_xe_att.yaml --rl_algo "" --ensemble_models "" "$@"
./run.sh --stage 5 --xe_config conf/train_xe_transformer.yaml --rl_algo "${rl_algo}" \
    --ensemble_models "${members[*]}" --ensemble_tag ensemble_gru_transformer "$@"
