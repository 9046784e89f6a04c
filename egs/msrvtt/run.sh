#!/usr/bin/env bash
# MSR-VTT video captioning (seed 004, Li & Gong 2019). Options: ./run.sh --help
# Default: the S2VT-style model of seed 004 (frame features -> FC 500 -> LSTM 1000 -> LSTM 1000
# decoder) on precomputed frame features imported from one HDF5 file (conf/feats_import_hdf5.yaml),
# XE then REINFORCE+, beam 3.
#   ./run.sh --msrvtt_root /data/msrvtt     # import route: the features are read from "source:" of conf/feats_import_hdf5.yaml
#   ./run.sh --msrvtt_root /data/msrvtt --video_root ${msrvtt_root} \
#       --feats_type cnn --feats_config conf/feats_inception_v3_frames.yaml   # raw videos through a CNN
# Seed 004's staged system (XE -> REINFORCE+ with the encoder frozen -> multitask):
# ./run_preset.sh seed004_multitask. All objectives: --rl_algo "scst reinforce_plus sle ac mc_pg multitask".
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# shellcheck disable=SC1091
. ./db.sh
msrvtt_root=${MSRVTT}  # Directory with the annotation files; --msrvtt_root DIR overrides it.
video_root=      # Directory with the videos (needed by --feats_type cnn); --video_root DIR.
# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="MSR-VTT video captioning (seed 004): S2VT-style model, XE then REINFORCE+"
recipe_options="Options of this recipe (run.sh):
    --msrvtt_root # Directory with the annotation files (default=\"${msrvtt_root}\").
    --video_root  # Directory with the videos (needed by --feats_type cnn) (default=\"${video_root}\")."
# q <value>: the value single-quoted, for caption.sh's splitting of --local_data_opts (utils/split_words.py)
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --msrvtt_root|--msrvtt-root) msrvtt_root=${2?"$1 needs a value"}; shift 2 ;;
        --video_root|--video-root) video_root=${2?"$1 needs a value"}; shift 2 ;;
        --help|-h) recipe_usage "${recipe_summary}" "${recipe_options}"; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
data_opts="--msrvtt_root $(q "${msrvtt_root}")"
[ -z "${video_root}" ] || data_opts+=" --video_root $(q "${video_root}")"

exec ./caption.sh \
    --local_data_opts "${data_opts}" \
    --train_sets train --valid_set val --test_sets test \
    --feats_type import \
    --feats_config conf/feats_import_hdf5.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo reinforce_plus \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models "" \
    ${args[@]+"${args[@]}"}
