#!/usr/bin/env bash
# MSCOCO image captioning, Karpathy splits (seeds 001, 002, 003). Options: ./run.sh --help
# Default: Top-Down attention (Anderson et al. 2018; seed 001's captioner) on the bottom-up region
# features of self-critical.pytorch (cocobu_att), XE then SCST, beam 3.
#   ./run.sh --coco_root /data/coco      # import route: the features are read from "source:" of
#                                        # conf/feats_import_cocobu_att.yaml (downloads/coco/cocobu_att)
#   ./run.sh --coco_root /data/coco --image_root /data/coco \
#       --feats_type cnn --feats_config conf/feats_resnet152_grid.yaml   # raw images through a CNN
# Show-and-Tell (seeds 002, 003): --xe_config conf/train_xe_showtell.yaml with a pooled feature
# (conf/feats_import_fc.yaml or conf/feats_resnet152_pooled.yaml). Each seed's own objective:
# ./run_preset.sh seed001_sle | seed002_ac | seed003_mc_pg (README.md: the tables per paper).
# All objectives in one go: --rl_algo "scst reinforce_plus sle ac mc_pg multitask".
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# shellcheck disable=SC1091
. ./db.sh
coco_root=${COCO}  # Directory with dataset_coco.json (+ features or images); --coco_root DIR overrides it.
image_root=        # Directory with train2014/ val2014/ (needed by --feats_type cnn); --image_root DIR.
# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="MSCOCO image captioning, Karpathy splits: Top-Down attention, XE then SCST"
recipe_options="Options of this recipe (run.sh):
    --coco_root  # Directory with dataset_coco.json (+ features or images) (default=\"${coco_root}\").
    --image_root # Directory with train2014/ val2014/ (needed by --feats_type cnn) (default=\"${image_root}\")."
# q <value>: the value single-quoted, for caption.sh's splitting of --local_data_opts (utils/split_words.py)
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --coco_root|--coco-root) coco_root=${2?"$1 needs a value"}; shift 2 ;;
        --image_root|--image-root) image_root=${2?"$1 needs a value"}; shift 2 ;;
        --help|-h) recipe_usage "${recipe_summary}" "${recipe_options}"; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
data_opts="--coco_root $(q "${coco_root}")"
[ -z "${image_root}" ] || data_opts+=" --image_root $(q "${image_root}")"

exec ./caption.sh \
    --local_data_opts "${data_opts}" \
    --train_sets train --valid_set val --test_sets test \
    --feats_type import \
    --feats_config conf/feats_import_cocobu_att.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo scst \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models "" \
    ${args[@]+"${args[@]}"}
