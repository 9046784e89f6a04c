#!/usr/bin/env bash
# AudioCaps audio captioning (Kim et al. 2019): CRNN-GRU, XE then SCST, with the seed-000 configs
# of egs/clotho (conf/*.yaml link to them; features: conf/feats_logmel.yaml at 32 kHz). Options: ./run.sh --help
# Bring the official train.csv/val.csv/test.csv and the audio you downloaded (README.md;
# ./local/download.sh --audiocaps_root DIR says how). Clips missing from the audio folder are
# listed in data/<set>/missing; more than --max_missing_fraction (default 0.1) of a split is an error.
# Training captions are single references (1 caption per clip; val/test have 5): the vocabulary
# (stage 3) and the CIDEr-D document frequencies of the SCST reward (stage 4) come from the train
# captions as they are, so CIDEr-D's idf is computed over 1-reference "documents".
# Each seed paper's own system: ./run_preset.sh <preset> --audiocaps_root DIR (egs/clotho/README.md).
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# shellcheck disable=SC1091
. ./db.sh
audiocaps_root=${AUDIOCAPS}   # Directory with train.csv, val.csv, test.csv; --audiocaps_root DIR overrides it.
audio_dir=                    # Audio folder; empty: <audiocaps_root>/audio. --audio_dir DIR overrides it.
max_missing_fraction=0.1      # Fail if more of a split's clips have no audio file. --max_missing_fraction F.
skip_bad=false                # true: skip malformed CSV rows and unreadable audio with a warning. --skip_bad true.
# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="AudioCaps audio captioning: CRNN-GRU, XE then SCST"
recipe_options="Options of this recipe (run.sh):
    --audiocaps_root       # Directory with train.csv, val.csv, test.csv (default=\"${audiocaps_root}\").
    --audio_dir            # Audio folder; empty: <audiocaps_root>/audio (default=\"${audio_dir}\").
    --max_missing_fraction # Fail if more of a split's clips have no audio file (default=\"${max_missing_fraction}\").
    --skip_bad             # true: skip malformed CSV rows and unreadable audio with a warning (default=\"${skip_bad}\")."
# q <value>: the value single-quoted, for caption.sh's splitting of --local_data_opts (utils/split_words.py)
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --audiocaps_root|--audiocaps-root) audiocaps_root=${2?"$1 needs a value"}; shift 2 ;;
        --audio_dir|--audio-dir) audio_dir=${2?"$1 needs a value"}; shift 2 ;;
        --max_missing_fraction|--max-missing-fraction) max_missing_fraction=${2?"$1 needs a value"}; shift 2 ;;
        --skip_bad|--skip-bad) skip_bad=${2?"$1 needs a value"}; shift 2 ;;
        --help|-h) recipe_usage "${recipe_summary}" "${recipe_options}"; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
opts="--audiocaps_root $(q "${audiocaps_root}") --max_missing_fraction ${max_missing_fraction} --skip_bad ${skip_bad}"
[ -z "${audio_dir}" ] || opts+=" --audio_dir $(q "${audio_dir}")"

exec ./caption.sh \
    --local_data_opts "${opts}" \
    --train_sets train --valid_set val --test_sets test \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --xe_inference_model valid.bleu_4.best.pth \
    --rl_algo scst \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models all \
    ${args[@]+"${args[@]}"}
