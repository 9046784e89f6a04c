#!/usr/bin/env bash

# Stage 1 of the MSCOCO recipes: data/<split>/{text,utt2spk,spk2utt,clip2id[,image.scp]} for the
# Karpathy splits (Karpathy & Fei-Fei 2015) from dataset_coco.json:
#   train = train + restval (113,287 images), val (5,000), test (5,000); every reference kept (5-7 per image).
# image.scp (absolute paths) is written only with --image_root (the CNN route, feats_type=cnn);
# without it the features are imported from precomputed files (feats_type=import).
# Clip ids: coco-<cocoid, 12 digits>; caption ids: <clip-id>-<k, 2 digits>.
# Run from the recipe directory (egs/mscoco or egs/mini_mscoco).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

coco_root=                # Directory holding dataset_coco.json (Karpathy's split file).
image_root=               # Directory holding <filepath>/<filename> of every image (train2014/, val2014/); empty: no image.scp.
splits="train val test"   # Splits to prepare.
skip_bad=false            # Warn about and skip bad images/captions instead of failing.
python=${python:-python3} # Python command.

help_message=$(cat << EOF
Usage: $0 --coco_root <dir> [options]
e.g.
  $0 --coco_root downloads/coco --image_root downloads/coco

Options:
  --coco_root   # Directory with dataset_coco.json (default="${coco_root}").
  --image_root  # Directory with train2014/ and val2014/; empty: no image.scp, import features instead (default="${image_root}").
  --splits      # Splits to prepare (default="${splits}").
  --skip_bad    # true: skip bad images/captions with a warning instead of failing (default="${skip_bad}").
  --python      # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${coco_root}" ]; then
    log "${help_message}"
    log "Error: --coco_root is required and no positional argument is allowed."
    exit 2
fi
if [ ! -f "${coco_root}/dataset_coco.json" ]; then
    log "Error: ${coco_root}/dataset_coco.json not found (local/download.sh says what to bring)"
    exit 1
fi

media=()
validate=(--no-feats --no-media)
if [ -n "${image_root}" ]; then
    [ -d "${image_root}" ] || { log "Error: --image_root ${image_root} is not a directory"; exit 1; }
    media=(--image_root "$(cd "${image_root}" && pwd)")  # absolute: image.scp holds absolute paths
    validate=(--no-feats)
fi
for split in ${splits}; do
    log "Preparing data/${split} from ${coco_root}/dataset_coco.json"
    ${python} -m captionbin.caption_prepare_coco --dataset_json "${coco_root}/dataset_coco.json" \
        --split "${split}" --output_dir "data/${split}" --skip_bad "${skip_bad}" ${media[@]+"${media[@]}"}
    utils/validate_data_dir.sh "${validate[@]}" "data/${split}"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
