#!/usr/bin/env bash
# shellcheck disable=SC2034  # the data.sh options are accepted (shared local_data_opts) and unused here

# Stage 0 of the MSVD recipes: check that <msvd_root> holds what the recipe needs; downloads
# nothing (fetch the corpus once, by hand, on a machine with network). Exits 0 when the
# annotation files are there, 1 with the list below if not.
#
# What to bring (under <msvd_root>):
#   "MSR Video Description Corpus.csv"  the description corpus (Chen & Dolan 2011; Microsoft
#                      Research download "MSR Video Description Corpus")
#   youtube_mapping.txt  clip name -> vid<N> (the standard split of Venugopalan et al. 2015, S2VT release)
# and, for one of the two routes:
#   feats_type=cnn     the clips YouTubeClips/<VideoID>_<Start>_<End>.avi (give --video_root) and a
#                      CNN: torchvision weights or a backbone exported with captionbin.caption_export_cnn
#                      (.pt2), named by cnn/cnn_weights in conf/feats_*.yaml.
#   feats_type=import  frame features in one HDF5 file with one dataset (frames, dim) per clip name,
#                      named by source in conf/feats_import_hdf5.yaml.
# Licences: the description corpus is Microsoft Research's (research use); the clips are YouTube videos.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}

msvd_root=                # Directory with the corpus CSV and youtube_mapping.txt.
video_root=               # Accepted (local_data_opts are shared with local/data.sh); unused here.
split_sizes=              # Accepted for the same reason.
splits=                   # Accepted for the same reason.
skip_bad=false            # Accepted for the same reason.
python=${python:-python3} # Accepted for the same reason.

. utils/parse_options.sh

if [ -z "${msvd_root}" ] || [ ! -f "${msvd_root}/MSR Video Description Corpus.csv" ] \
        || [ ! -f "${msvd_root}/youtube_mapping.txt" ]; then
    log "Error: ${msvd_root:-<msvd_root>} lacks the MSVD annotation files; this recipe downloads nothing. What to bring:"
    sed -n '/^# What to bring/,/^# Licences/p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
fi
log "${msvd_root} holds the MSVD annotation files: nothing to download"
