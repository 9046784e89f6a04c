#!/usr/bin/env bash
# Clotho v2.1 audio captioning: CRNN-GRU, XE then SCST (seed 000). Options: ./run.sh --help
# Every model is also decoded with 5 sampled captions per clip (diversity columns of RESULTS.md),
# and the models of the run (XE + each --rl_algo) are decoded as one word-level ensemble
# (exp/ensemble_*). XE models are selected by validation BLEU-4 (seed 000), SCST by CIDEr-D.
# Each seed paper's own system, e.g. CRNN-W/CRNN-E/CRNN-R of seed 000: ./run_preset.sh <preset>
# (README.md: the presets, with a table per paper).
# Several RL objectives in one go: --rl_algo "scst reinforce_plus sle ac mc_pg multitask".
# Stage 0 checks --clotho_root and downloads Clotho where it is absent (./run.sh --stage 1 skips it).
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# shellcheck disable=SC1091
. ./db.sh
clotho_root=${CLOTHO}  # Clotho root (official layout); --clotho_root DIR overrides it.
# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="Clotho v2.1 audio captioning: CRNN-GRU, XE then SCST (seed 000)"
recipe_options="Options of this recipe (run.sh):
    --clotho_root # Clotho v2.1 root, official layout (clotho_captions_<split>.csv, <split>/*.wav); stage 0 downloads
                  # the corpus there from Zenodo when it is absent and there is network (default=\"${clotho_root}\")."
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
    --stage 0 \
    --local_data_opts "--clotho_root $(q "${clotho_root}")" \
    --train_sets "development" --valid_set validation --test_sets "evaluation" \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --xe_inference_model valid.bleu_4.best.pth \
    --rl_algo scst \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models all \
    ${args[@]+"${args[@]}"}
