#!/usr/bin/env bash

# Stage 1 of the TGIF recipes: data/<split>/{text,utt2spk,spk2utt,clip2id,video.scp,missing} from
# TGIF-Release's data/ (Li et al. 2016, github.com/raingo/TGIF-Release):
#   <tgif_root>/tgif-v1.0.tsv              <GIF URL><TAB><sentence>, 1 sentence per GIF (train,
#                                          val), 3 per GIF (test)
#   <tgif_root>/splits/{train,val,test}.txt  the official split: one GIF URL per line
# and the GIFs the user downloaded into <gif_root> (or <gif_root>/gifs/), named as in the URLs
# (tumblr_<id>_<size>.gif). GIFs without a file are listed in data/<split>/missing, counted and
# named in one summary line; more than --max_missing_fraction of a split is an error.
# Clip ids: tgif-<file name without .gif>; caption ids: <clip-id>-<kk>.
# Run from the recipe directory (egs/tgif or egs/mini_tgif).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

tgif_root=                # TGIF-Release's data/: tgif-v1.0.tsv and splits/.
gif_root=                 # The downloaded GIFs; empty: <tgif_root>/gifs.
splits="train val test"   # Splits to prepare.
max_missing_fraction=0.1  # Fail if more than this fraction of a split's GIFs has no file.
skip_bad=false            # Warn about and skip bad rows, URLs and GIF files instead of failing.
python=${python:-python3} # Python command.

help_message=$(cat << EOF2
Usage: $0 --tgif_root <dir> [options]
e.g.
  $0 --tgif_root downloads/tgif --gif_root /data/tgif_gifs --max_missing_fraction 0.2

Options:
  --tgif_root             # TGIF-Release's data/ with tgif-v1.0.tsv and splits/ (default="${tgif_root}").
  --gif_root              # Folder of the GIFs (empty: <tgif_root>/gifs) (default="${gif_root}").
  --splits                # Splits to prepare (default="${splits}").
  --max_missing_fraction  # Largest tolerated fraction of GIFs without a file (default="${max_missing_fraction}").
  --skip_bad              # true: skip bad rows/URLs and empty or non-GIF files with a warning (default="${skip_bad}").
  --python                # Python command (default="${python}").
EOF2
)

log "$0 $*"
# shellcheck disable=SC1091
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${tgif_root}" ]; then
    log "${help_message}"
    log "Error: --tgif_root is required and no positional argument is allowed."
    exit 2
fi
files=("${tgif_root}/tgif-v1.0.tsv")
for split in ${splits}; do files+=("${tgif_root}/splits/${split}.txt"); done
for f in "${files[@]}"; do
    [ -f "${f}" ] || { log "Error: ${f} not found (local/download.sh says what to bring)"; exit 1; }
done
[ -n "${gif_root}" ] || gif_root=${tgif_root}/gifs
if [ ! -d "${gif_root}" ]; then
    log "Error: GIF folder ${gif_root} not found (local/download.sh --tgif_root ${tgif_root} says what to bring)"
    exit 1
fi

for split in ${splits}; do
    log "Preparing data/${split} from ${tgif_root}/splits/${split}.txt and ${gif_root}"
    ${python} -m captionbin.caption_prepare_tgif --tsv "${tgif_root}/tgif-v1.0.tsv" \
        --split_list "${tgif_root}/splits/${split}.txt" --split "${split}" --output_dir "data/${split}" \
        --gif_root "$(cd "${gif_root}" && pwd)" --max_missing_fraction "${max_missing_fraction}" \
        --skip_bad "${skip_bad}"
    log "data/${split}: $(wc -l < "data/${split}/video.scp") GIFs, $(wc -l < "data/${split}/text") captions," \
        "GIFs without a file: $(wc -l < "data/${split}/missing") (data/${split}/missing)"
    utils/validate_data_dir.sh --no-feats "data/${split}"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
