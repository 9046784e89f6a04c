#!/usr/bin/env bash
# shellcheck disable=SC2034  # the data.sh options are accepted (shared local_data_opts) and unused here

# Stage 0 of the MSCOCO recipes: check that <coco_root> holds what the recipe needs; downloads
# nothing (the images are 19 GB, the precomputed features larger: fetch them once, by hand, on a
# machine with network). Exits 0 when dataset_coco.json is there, 1 with the list below if not.
#
# What to bring (under <coco_root>):
#   dataset_coco.json  Karpathy's split file (caption_datasets.zip of "Deep visual-semantic
#                      alignments", cs.stanford.edu/people/karpathy/deepimagesent)
# and, for one of the two routes:
#   feats_type=cnn     the images train2014/ and val2014/ (cocodataset.org, 2014 train + val; give
#                      --image_root) and a CNN: torchvision weights (e.g. resnet152-*.pth) or a
#                      backbone exported with captionbin.caption_export_cnn (.pt2), named by
#                      cnn/cnn_weights in conf/feats_*.yaml.
#   feats_type=import  the self-critical.pytorch features: cocobu_att/<cocoid>.npz (bottom-up
#                      regions, Anderson et al. 2018) or cocotalk_fc/<cocoid>.npy and
#                      cocotalk_att/<cocoid>.npz (ResNet-101), named by source in conf/feats_import_*.yaml.
# Licences: COCO annotations CC BY 4.0; the images keep their Flickr licences (cocodataset.org/#termsofuse).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}

coco_root=                # Directory with dataset_coco.json (and the images or features).
image_root=               # Accepted (local_data_opts are shared with local/data.sh); unused here.
splits=                   # Accepted for the same reason.
skip_bad=false            # Accepted for the same reason.
python=${python:-python3} # Accepted for the same reason.

. utils/parse_options.sh

if [ -z "${coco_root}" ] || [ ! -f "${coco_root}/dataset_coco.json" ]; then
    log "Error: ${coco_root:-<coco_root>}/dataset_coco.json not found; this recipe downloads nothing. What to bring:"
    sed -n '/^# What to bring/,/^# Licences/p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
fi
log "${coco_root}/dataset_coco.json is there: nothing to download"
