#!/usr/bin/env bash
# shellcheck disable=SC2034  # the data.sh options are accepted (shared local_data_opts) and unused here

# Stage 0 of the TGIF recipes: check that <tgif_root> holds what the recipe needs; downloads
# nothing (fetch the corpus once, by hand, on a machine with network). Exits 0 when the
# annotation files and the GIF folder are there, 1 with the list below if not.
#
# What to bring (under <tgif_root>, TGIF-Release's data/ folder: github.com/raingo/TGIF-Release):
#   tgif-v1.0.tsv      <GIF URL><TAB><sentence> rows (Li et al. 2016): one sentence per GIF in
#                      train and validation, three per GIF in test
#   splits/train.txt, splits/val.txt, splits/test.txt   the official split, one GIF URL per line
#                      (80,000 / 10,708 / 11,360 GIFs)
#   gifs/              the GIFs, each saved under the file name of its URL (tumblr_<id>_<size>.gif),
#                      e.g. with: cut -f1 tgif-v1.0.tsv | sort -u | wget -nc -P gifs -i -
#                      (or give another folder with --gif_root). Some are gone from Tumblr: the
#                      missing ones are listed in data/<split>/missing (--max_missing_fraction).
# and a CNN for the features: torchvision's ResNet-152 weights in a local file (cnn_weights: in
# conf/feats_resnet152_mean.yaml, default downloads/resnet152.pth), or a backbone exported
# with captionbin.caption_export_cnn (.pt2, cnn: exported).
# Licences: TGIF is for non-commercial research (its LICENSE); the GIFs are Tumblr posts.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}

tgif_root=                # TGIF-Release's data/: tgif-v1.0.tsv and splits/.
gif_root=                 # The GIF folder; empty: <tgif_root>/gifs.
splits="train val test"   # Splits whose lists must be there.
max_missing_fraction=     # Accepted (local_data_opts are shared with local/data.sh); unused here.
skip_bad=false            # Accepted for the same reason.
python=${python:-python3} # Accepted for the same reason.

. utils/parse_options.sh

[ -n "${gif_root}" ] || gif_root=${tgif_root:-<tgif_root>}/gifs
lacking=()
[ -n "${tgif_root}" ] && [ -f "${tgif_root}/tgif-v1.0.tsv" ] || lacking+=("tgif-v1.0.tsv")
for split in ${splits}; do
    [ -n "${tgif_root}" ] && [ -f "${tgif_root}/splits/${split}.txt" ] || lacking+=("splits/${split}.txt")
done
[ -d "${gif_root}" ] || lacking+=("${gif_root}/")
if [ ${#lacking[@]} -gt 0 ]; then
    log "Error: ${tgif_root:-<tgif_root>} lacks ${lacking[*]}; this recipe downloads nothing. What to bring:"
    sed -n '/^# What to bring/,/^# Licences/p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
fi
log "${tgif_root} holds the TGIF annotation files and ${gif_root}: nothing to download"
