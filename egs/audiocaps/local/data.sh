#!/usr/bin/env bash

# Stage 1 of the AudioCaps recipes: data/<split>/{wav.scp,text,utt2spk,spk2utt,clip2id,aud2name,reco2dur,missing}
# for each split, from the official caption CSVs (Kim et al. 2019, github.com/cdjkim/audiocaps, dataset/)
#   <audiocaps_root>/{train,val,test}.csv   audiocap_id,youtube_id,start_time,caption
# and the audio the user downloaded (local/download.sh), in <audio_dir> or <audio_dir>/<split>/, named
#   <youtube_id>_<start_time>.<ext>  or  Y<youtube_id>.<ext>   (ext: wav flac ogg mp3 m4a)
# Clip ids: audiocaps-<youtube_id>-<start_time>, caption ids: <clip-id>-<kk>. Train has 1 caption
# per clip, val and test 5. Clips without audio are listed in data/<split>/missing with one summary
# line each; more than --max_missing_fraction of a split is an error.
# Run from the recipe directory (egs/audiocaps or egs/mini_audiocaps).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

audiocaps_root=           # Directory with train.csv, val.csv, test.csv.
audio_dir=                # Audio folder; empty: <audiocaps_root>/audio.
splits="train val test"   # Splits to prepare.
max_missing_fraction=0.1  # Fail if more than this fraction of a split's clips has no audio file.
skip_bad=false            # Warn about and skip malformed rows and unreadable audio instead of failing.
python=${python:-python3} # Python command.
# shellcheck disable=SC2034
download=false            # Accepted (local_data_opts are shared with download.sh); unused here.

help_message=$(cat << EOF2
Usage: $0 --audiocaps_root <dir> [options]
e.g.
  $0 --audiocaps_root downloads/audiocaps --audio_dir /data/audiocaps_wav --max_missing_fraction 0.2

Options:
  --audiocaps_root        # Directory with train.csv, val.csv, test.csv (default="${audiocaps_root}").
  --audio_dir             # Audio folder (empty: <audiocaps_root>/audio) (default="${audio_dir}").
  --splits                # Splits to prepare (default="${splits}").
  --max_missing_fraction  # Largest tolerated fraction of clips without audio (default="${max_missing_fraction}").
  --skip_bad              # true: skip malformed rows and unreadable audio with a warning (default="${skip_bad}").
  --python                # Python command (default="${python}").
EOF2
)

log "$0 $*"
# shellcheck disable=SC1091
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${audiocaps_root}" ]; then
    log "${help_message}"
    log "Error: --audiocaps_root is required and no positional argument is allowed."
    exit 2
fi
for split in ${splits}; do
    [ -f "${audiocaps_root}/${split}.csv" ] \
        || { log "Error: ${audiocaps_root}/${split}.csv not found (local/download.sh says what to bring)"; exit 1; }
done
[ -n "${audio_dir}" ] || audio_dir=${audiocaps_root}/audio
if [ ! -d "${audio_dir}" ]; then
    log "Error: audio folder ${audio_dir} not found (local/download.sh --audiocaps_root ${audiocaps_root} says how to fetch it)"
    exit 1
fi

for split in ${splits}; do
    log "Preparing data/${split} from ${audiocaps_root}/${split}.csv and ${audio_dir}"
    ${python} -m captionbin.caption_prepare_audiocaps \
        --csv_dir "${audiocaps_root}" --audio_dir "${audio_dir}" --split "${split}" --output_dir "data/${split}" \
        --max_missing_fraction "${max_missing_fraction}" --skip_bad "${skip_bad}"
    log "data/${split}: $(wc -l < "data/${split}/wav.scp") clips, $(wc -l < "data/${split}/text") captions," \
        "clips without audio: $(wc -l < "data/${split}/missing") (data/${split}/missing)"
    utils/validate_data_dir.sh --no-feats "data/${split}"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
