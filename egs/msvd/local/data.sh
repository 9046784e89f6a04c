#!/usr/bin/env bash

# Stage 1 of the MSVD recipes: data/<split>/{text,utt2spk,spk2utt,clip2id[,video.scp]} from the
# Microsoft Research Video Description Corpus (Chen & Dolan 2011): the English rows of
# "MSR Video Description Corpus.csv", and the standard split of youtube_mapping.txt (Venugopalan
# et al. 2015): vid1-1200 train, vid1201-1300 val, vid1301-1970 test (--split_sizes).
# video.scp (absolute paths) is written only with --video_root (the CNN route, feats_type=cnn);
# without it the features are imported from precomputed files (feats_type=import).
# Clip ids: msvd-vid<N, 4 digits>; caption ids: <clip-id>-<k, 2 digits>.
# Run from the recipe directory (egs/msvd or egs/mini_msvd).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

msvd_root=                # Directory holding "MSR Video Description Corpus.csv" and youtube_mapping.txt.
video_root=               # Directory holding <VideoID>_<Start>_<End>.avi (YouTubeClips/); empty: no video.scp.
split_sizes=1200,100,670  # Clips of train, val, test, taken in vid-number order (vid1-1200 train, ...).
splits="train val test"   # Splits to prepare.
skip_bad=false            # Warn about and skip bad rows and videos instead of failing.
python=${python:-python3} # Python command.

help_message=$(cat << EOF
Usage: $0 --msvd_root <dir> [options]
e.g.
  $0 --msvd_root downloads/msvd --video_root downloads/msvd/YouTubeClips

Options:
  --msvd_root   # Directory with "MSR Video Description Corpus.csv" and youtube_mapping.txt (default="${msvd_root}").
  --video_root  # Directory with the .avi clips; empty: no video.scp, import features instead (default="${video_root}").
  --split_sizes # Clips of train,val,test, taken in vid-number order of youtube_mapping.txt (default="${split_sizes}").
  --splits      # Splits to prepare (default="${splits}").
  --skip_bad    # true: skip bad videos/captions with a warning instead of failing (default="${skip_bad}").
  --python      # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${msvd_root}" ]; then
    log "${help_message}"
    log "Error: --msvd_root is required and no positional argument is allowed."
    exit 2
fi
corpus_csv="${msvd_root}/MSR Video Description Corpus.csv"
for f in "${corpus_csv}" "${msvd_root}/youtube_mapping.txt"; do
    [ -f "${f}" ] || { log "Error: ${f} not found (local/download.sh says what to bring)"; exit 1; }
done

media=()
validate=(--no-feats --no-media)
if [ -n "${video_root}" ]; then
    [ -d "${video_root}" ] || { log "Error: --video_root ${video_root} is not a directory"; exit 1; }
    media=(--video_root "$(cd "${video_root}" && pwd)")  # absolute: video.scp holds absolute paths
    validate=(--no-feats)
fi
for split in ${splits}; do
    log "Preparing data/${split} from ${corpus_csv}"
    ${python} -m captionbin.caption_prepare_msvd --corpus_csv "${corpus_csv}" \
        --mapping "${msvd_root}/youtube_mapping.txt" --split_sizes "${split_sizes}" \
        --split "${split}" --output_dir "data/${split}" --skip_bad "${skip_bad}" ${media[@]+"${media[@]}"}
    utils/validate_data_dir.sh "${validate[@]}" "data/${split}"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
