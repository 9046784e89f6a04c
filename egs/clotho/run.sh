#!/usr/bin/env bash
# Clotho v2.1 audio captioning: CRNN-GRU, XE then SCST (seed 000). Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# shellcheck disable=SC1091
. ./db.sh
clotho_root=${CLOTHO}  # Clotho root (official layout); --clotho_root DIR overrides it.
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --clotho_root|--clotho-root) clotho_root=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

./caption.sh \
    --local_data_opts "--clotho_root ${clotho_root}" \
    --train_sets "development" --valid_set validation --test_sets "evaluation" \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo scst \
    --decode_config conf/decode.yaml \
    ${args[@]+"${args[@]}"}
