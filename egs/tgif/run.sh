#!/usr/bin/env bash
# TGIF animated GIF captioning (seed 001, Chen & Jin 2020, sec. 5.3). Options: ./run.sh --help
# Default: seed 001's system: the GIFs through ResNet-152 (frames sampled uniformly in time, each
# lasting its own delay; conf/feats_resnet152_mean.yaml), mean-pooled, FC 512 -> LSTM 512, XE
# then SLL-SLE, beam 5 (the same as ./run_preset.sh seed001_sle_tgif).
#   ./run.sh --tgif_root /data/TGIF-Release/data --gif_root /data/tgif_gifs
# All objectives: --rl_algo "scst sle reinforce_plus ac mc_pg multitask"; SLL-ME: ./run_preset.sh seed001_sll_me.
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# shellcheck disable=SC1091
. ./db.sh
tgif_root=${TGIF}  # TGIF-Release's data/ (tgif-v1.0.tsv, splits/); --tgif_root DIR overrides it.
gif_root=          # The downloaded GIFs (empty: <tgif_root>/gifs); --gif_root DIR.
# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="TGIF animated GIF captioning (seed 001): ResNet-152 features, XE then SLL-SLE"
recipe_options="Options of this recipe (run.sh):
    --tgif_root # TGIF-Release's data/ (tgif-v1.0.tsv, splits/) (default=\"${tgif_root}\").
    --gif_root  # The downloaded GIFs; empty: <tgif_root>/gifs (default=\"${gif_root}\")."
# q <value>: the value single-quoted, for caption.sh's splitting of --local_data_opts (utils/split_words.py)
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --tgif_root|--tgif-root) tgif_root=${2?"$1 needs a value"}; shift 2 ;;
        --gif_root|--gif-root) gif_root=${2?"$1 needs a value"}; shift 2 ;;
        --help|-h) recipe_usage "${recipe_summary}" "${recipe_options}"; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
data_opts="--tgif_root $(q "${tgif_root}")"
[ -z "${gif_root}" ] || data_opts+=" --gif_root $(q "${gif_root}")"

exec ./caption.sh \
    --local_data_opts "${data_opts}" \
    --train_sets train --valid_set val --test_sets test \
    --feats_type cnn \
    --feats_config conf/feats_resnet152_mean.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo sle \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models "" \
    ${args[@]+"${args[@]}"}
