#!/usr/bin/env bash
# CI / demo recipe: the whole pipeline on 4 real 2-s Clotho clips with tiny debug configs
# (conf/train_xe.yaml, conf/train_scst.yaml -> conf/tuning/*_debug.yaml; conf/decode.yaml -> decode_debug.yaml).
# Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

clotho_root=clotho_fixture  # Clotho-layout root; --clotho_root DIR overrides it.
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --clotho_root|--clotho-root) clotho_root=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

./caption.sh \
    --local_data_opts "--clotho_root ${clotho_root}" \
    --train_sets "development validation" --valid_set evaluation --test_sets "validation evaluation" \
    --nj 2 --inference_nj 2 \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo scst \
    --decode_config conf/decode.yaml \
    ${args[@]+"${args[@]}"}
