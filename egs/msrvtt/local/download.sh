#!/usr/bin/env bash
# shellcheck disable=SC2034  # the data.sh options are accepted (shared local_data_opts) and unused here

# Stage 0 of the MSR-VTT recipes: check that <msrvtt_root> holds what the recipe needs; downloads
# nothing (fetch the corpus once, by hand, on a machine with network). Exits 0 when the
# annotation files are there, 1 with the list below if not.
#
# What to bring (under <msrvtt_root>):
#   train_val_videodatainfo.json, test_videodatainfo.json  the MSR-VTT annotations (Xu et al. 2016)
# and, for one of the two routes:
#   feats_type=cnn     the videos TrainValVideo/videoN.mp4 and TestVideo/videoN.mp4 (give --video_root)
#                      and a CNN: torchvision weights or a backbone exported with
#                      captionbin.caption_export_cnn (.pt2), named by cnn/cnn_weights in conf/feats_*.yaml.
#   feats_type=import  frame features in one HDF5 file with one dataset (frames, dim) per video id
#                      (videoN), named by source in conf/feats_import_hdf5.yaml.
# Licences: MSR-VTT is Microsoft Research's (research use); the videos are web videos.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}

msrvtt_root=              # Directory with the two annotation files.
video_root=               # Accepted (local_data_opts are shared with local/data.sh); unused here.
splits=                   # Accepted for the same reason.
skip_bad=false            # Accepted for the same reason.
python=${python:-python3} # Accepted for the same reason.

. utils/parse_options.sh

if [ -z "${msrvtt_root}" ] || [ ! -f "${msrvtt_root}/train_val_videodatainfo.json" ] \
        || [ ! -f "${msrvtt_root}/test_videodatainfo.json" ]; then
    log "Error: ${msrvtt_root:-<msrvtt_root>} lacks the MSR-VTT annotation files; this recipe downloads nothing. What to bring:"
    sed -n '/^# What to bring/,/^# Licences/p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
fi
log "${msrvtt_root} holds the MSR-VTT annotation files: nothing to download"
