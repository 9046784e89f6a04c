#!/usr/bin/env bash

# Stage 0 of the AudioCaps recipes: says how to obtain AudioCaps (Kim et al. 2019), and checks what
# is there. AudioCaps releases captions only; the audio is 10 s of YouTube videos that the user
# fetches, and some videos are always gone (deleted or private): those clips are listed by
# local/data.sh in data/<split>/missing.
#
# 1. The caption CSVs (audiocap_id,youtube_id,start_time,caption), from the AudioCaps repository
#    https://github.com/cdjkim/audiocaps (folder dataset/), into <audiocaps_root>:
#      for s in train val test; do
#          wget -O <audiocaps_root>/$s.csv https://raw.githubusercontent.com/cdjkim/audiocaps/master/dataset/$s.csv
#      done
#    Without them this script exits 1 with these instructions.
# 2. The audio, one file per clip in <audio_dir> (default <audiocaps_root>/audio), named
#    <youtube_id>_<start_time>.wav (or .flac .ogg .mp3 .m4a; Y<youtube_id>.wav as written by
#    AudioSet downloaders works too). Where you have network access, yt-dlp and ffmpeg, this
#    script fetches the missing clips with --download true: for each clip, the best audio stream
#    of https://www.youtube.com/watch?v=<youtube_id>, of which ffmpeg keeps 10 s from start_time
#    as 32 kHz mono 16-bit WAV (--sample_rate). A clip that cannot be fetched is logged and left
#    missing. Respect YouTube's terms of service; this takes many hours for the ~50k clips.
#    Without --download true it only counts the clips present and prints how to fetch the rest.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

audiocaps_root=           # Directory with (or for) train.csv, val.csv, test.csv.
audio_dir=                # Audio folder; empty: <audiocaps_root>/audio.
splits="train val test"   # Splits needed.
download=false            # true: fetch the missing clips with yt-dlp + ffmpeg (needs network).
sample_rate=32000         # Sample rate of the WAV files written by --download true (Hz).
max_missing_fraction=0.1  # Accepted (local_data_opts are shared with data.sh); unused here.
# shellcheck disable=SC2034
skip_bad=false            # Accepted for the same reason; unused here.
python=${python:-python3} # Accepted for the same reason; unused here.

help_message=$(cat << EOF2
Usage: $0 --audiocaps_root <dir> [options]
e.g.
  $0 --audiocaps_root downloads/audiocaps                   # check, and say how to fetch what is missing
  $0 --audiocaps_root downloads/audiocaps --download true   # fetch the missing clips (yt-dlp + ffmpeg)

Options:
  --audiocaps_root  # Directory with train.csv, val.csv, test.csv (default="${audiocaps_root}").
  --audio_dir       # Audio folder (empty: <audiocaps_root>/audio) (default="${audio_dir}").
  --splits          # Splits needed (default="${splits}").
  --download        # true: fetch the missing clips with yt-dlp and ffmpeg (default="${download}").
  --sample_rate     # Sample rate of the fetched WAV files in Hz (default="${sample_rate}").
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
[ -n "${audio_dir}" ] || audio_dir=${audiocaps_root}/audio

csv_help="Download the AudioCaps caption CSVs from https://github.com/cdjkim/audiocaps (folder dataset/) into ${audiocaps_root}:
  mkdir -p ${audiocaps_root}
  for s in ${splits}; do wget -O ${audiocaps_root}/\$s.csv https://raw.githubusercontent.com/cdjkim/audiocaps/master/dataset/\$s.csv; done
then run this script again (or set AUDIOCAPS in db.sh / pass --audiocaps_root)."
audio_help="Fetch the audio into ${audio_dir}, one 10-s file per clip named <youtube_id>_<start_time>.wav
(.flac .ogg .mp3 .m4a and Y<youtube_id>.wav work too), e.g. where you have network access:
  $0 --audiocaps_root ${audiocaps_root} --download true     # needs yt-dlp (pip install yt-dlp) and ffmpeg
which runs, per clip:
  yt-dlp -f bestaudio -o <tmp>/<youtube_id>.%(ext)s https://www.youtube.com/watch?v=<youtube_id>
  ffmpeg -ss <start_time> -t 10 -i <tmp>/<youtube_id>.<ext> -ac 1 -ar ${sample_rate} -c:a pcm_s16le ${audio_dir}/<youtube_id>_<start_time>.wav
Clips whose video is gone stay missing: local/data.sh lists them in data/<split>/missing."

for split in ${splits}; do
    if [ ! -f "${audiocaps_root}/${split}.csv" ]; then
        log "Error: ${audiocaps_root}/${split}.csv not found."
        log "${csv_help}"
        exit 1
    fi
done

# "<youtube_id> <start_time>" of every clip of the splits (the first three CSV columns never hold a comma)
clips() {
    for split in ${splits}; do
        awk -F, 'NR > 1 && $2 ~ /^[A-Za-z0-9_-]+$/ { s = $3 + 0; print $2, (s == int(s) ? int(s) : $3) }' \
            "${audiocaps_root}/${split}.csv"
    done | sort -u
}
has_audio() {  # <youtube_id> <start_time>
    local ext sub
    for sub in "" ${splits}; do
        for ext in wav flac ogg mp3 m4a; do
            [ -f "${audio_dir}/${sub:+${sub}/}$1_$2.${ext}" ] && return 0
            [ -f "${audio_dir}/${sub:+${sub}/}Y$1.${ext}" ] && return 0
        done
    done
    return 1
}

total=0
missing=()
while read -r yid start; do
    total=$((total + 1))
    has_audio "${yid}" "${start}" || missing+=("${yid} ${start}")
done < <(clips)
log "${audio_dir}: audio of $((total - ${#missing[@]})) of ${total} clips (${splits}); ${#missing[@]} missing"
if [ ${#missing[@]} -eq 0 ]; then
    log "AudioCaps is already in ${audiocaps_root}; nothing to download"
    exit 0
fi

if ! "${download}"; then
    log "${audio_help}"
    if [ ${#missing[@]} -eq "${total}" ]; then
        log "Error: no audio at all in ${audio_dir}."
        exit 1
    fi
    log "Going on with the clips present (local/data.sh checks --max_missing_fraction ${max_missing_fraction})."
    exit 0
fi

for tool in yt-dlp ffmpeg; do
    if ! command -v "${tool}" > /dev/null; then
        log "Error: ${tool} not found: install yt-dlp (pip install yt-dlp, in a venv of its own) and ffmpeg (apt-get install ffmpeg)."
        log "${audio_help}"
        exit 1
    fi
done
mkdir -p "${audio_dir}"
tmpdir=$(mktemp -d)
trap 'rm -rf "${tmpdir}"' EXIT
failed=0
for clip in "${missing[@]}"; do
    read -r yid start <<< "${clip}"
    out="${audio_dir}/${yid}_${start}.wav"
    if yt-dlp -q --no-warnings --no-playlist -f bestaudio -o "${tmpdir}/${yid}.%(ext)s" \
            "https://www.youtube.com/watch?v=${yid}" \
        && src=$(find "${tmpdir}" -maxdepth 1 -type f -name "${yid}.*" | head -n 1) && [ -n "${src}" ] \
        && ffmpeg -nostdin -loglevel error -y -ss "${start}" -t 10 -i "${src}" \
            -ac 1 -ar "${sample_rate}" -c:a pcm_s16le "${out}.part.wav"; then
        mv "${out}.part.wav" "${out}"
    else
        log "Warning: could not fetch ${yid} (start ${start}); it stays missing"
        rm -f "${out}.part.wav"
        failed=$((failed + 1))
    fi
    rm -f "${tmpdir:?}/${yid}".*
done
log "Fetched $((${#missing[@]} - failed)) of ${#missing[@]} missing clips into ${audio_dir}; ${failed} could not be fetched"
log "Successfully finished. [elapsed=${SECONDS}s]"
