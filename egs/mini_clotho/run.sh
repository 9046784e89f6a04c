#!/usr/bin/env bash
# CI / demo recipe: the whole pipeline on 4 real 2-s Clotho clips with tiny debug configs
# (conf/train_xe.yaml, conf/train_scst.yaml -> conf/tuning/*_debug.yaml; conf/decode.yaml -> decode_debug.yaml).
# Trains seed 000's CRNN-W (Word2Vec-initialised XE), then the six RL objectives of the seeds from it (scst,
# reinforce_plus, sle, ac, mc_pg, multitask; --rl_algo "ppo grpo dpo" adds the newer ones), and decodes each model and a word-level ensemble of
# all seven (CRNN-E style, --ensemble_models all) with 5 sampled captions per clip for the
# diversity columns (Div-1, Div-2, mBLEU-4) of RESULTS.md; stage 10 packs each trained model
# (exp/xe_train_xe_logmel_word_w2v/packed/, exp/xe_train_xe_logmel_word_w2v/<algo>_train_<algo>/packed/).
# Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

clotho_root=clotho_fixture  # Clotho-layout root; --clotho_root DIR overrides it.
# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="CI / demo recipe: the whole pipeline on 4 real 2-s Clotho clips with tiny debug configs"
recipe_options="Options of this recipe (run.sh):
    --clotho_root # Clotho-layout root (default=\"${clotho_root}\")."
# q <value>: the value single-quoted, for caption.sh's splitting of --local_data_opts (utils/split_words.py)
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --clotho_root|--clotho-root) clotho_root=${2?"$1 needs a value"}; shift 2 ;;
        --help|-h) recipe_usage "${recipe_summary}" "${recipe_options}"; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done

exec ./caption.sh \
    --local_data_opts "--clotho_root $(q "${clotho_root}")" \
    --train_sets "development validation" --valid_set evaluation --test_sets "validation evaluation" \
    --nj 2 --inference_nj 2 \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --word2vec true \
    --rl_algo "scst reinforce_plus sle ac mc_pg multitask" \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models all \
    ${args[@]+"${args[@]}"}
