#!/usr/bin/env bash

# Stage 1 of the MSR-VTT recipes: data/<split>/{text,utt2spk,spk2utt,clip2id[,video.scp]} from
# MSR-VTT's train_val_videodatainfo.json and test_videodatainfo.json (Xu et al. 2016): train
# (6,513 videos), val ("validate", 497), test (2,990); 20 references per video.
# video.scp (absolute paths) is written only with --video_root (the CNN route, feats_type=cnn);
# without it the features are imported from precomputed files (feats_type=import).
# Clip ids: msrvtt-video<N, 5 digits>; caption ids: <clip-id>-<k, 2 digits>.
# Run from the recipe directory (egs/msrvtt or egs/mini_msrvtt).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

msrvtt_root=              # Directory holding train_val_videodatainfo.json and test_videodatainfo.json.
video_root=               # Directory holding TrainValVideo/ and TestVideo/ (or all videoN.mp4); empty: no video.scp.
splits="train val test"   # Splits to prepare.
skip_bad=false            # Warn about and skip bad videos/captions instead of failing.
python=${python:-python3} # Python command.

help_message=$(cat << EOF
Usage: $0 --msrvtt_root <dir> [options]
e.g.
  $0 --msrvtt_root downloads/msrvtt --video_root downloads/msrvtt

Options:
  --msrvtt_root # Directory with train_val_videodatainfo.json and test_videodatainfo.json (default="${msrvtt_root}").
  --video_root  # Directory with TrainValVideo/ and TestVideo/; empty: no video.scp, import features instead (default="${video_root}").
  --splits      # Splits to prepare (default="${splits}").
  --skip_bad    # true: skip bad videos/captions with a warning instead of failing (default="${skip_bad}").
  --python      # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${msrvtt_root}" ]; then
    log "${help_message}"
    log "Error: --msrvtt_root is required and no positional argument is allowed."
    exit 2
fi
for f in train_val_videodatainfo.json test_videodatainfo.json; do
    [ -f "${msrvtt_root}/${f}" ] || { log "Error: ${msrvtt_root}/${f} not found (local/download.sh says what to bring)"; exit 1; }
done

media=()
validate=(--no-feats --no-media)
if [ -n "${video_root}" ]; then
    [ -d "${video_root}" ] || { log "Error: --video_root ${video_root} is not a directory"; exit 1; }
    media=(--video_root "$(cd "${video_root}" && pwd)")  # absolute: video.scp holds absolute paths
    validate=(--no-feats)
fi
for split in ${splits}; do
    log "Preparing data/${split} from ${msrvtt_root}"
    ${python} -m captionbin.caption_prepare_msrvtt --train_val_json "${msrvtt_root}/train_val_videodatainfo.json" \
        --test_json "${msrvtt_root}/test_videodatainfo.json" \
        --split "${split}" --output_dir "data/${split}" --skip_bad "${skip_bad}" ${media[@]+"${media[@]}"}
    utils/validate_data_dir.sh "${validate[@]}" "data/${split}"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
