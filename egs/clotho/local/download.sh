#!/usr/bin/env bash

# Stage 0 of the Clotho recipes: make sure <clotho_root> holds Clotho v2.1 in the official layout
#   <clotho_root>/clotho_captions_<split>.csv, <clotho_root>/<split>/*.wav  (+ clotho_metadata_<split>.csv)
# If it already does, this prints so and exits 0 (nothing is downloaded). Otherwise it downloads
# the official files from Zenodo (record 4783391, DOI 10.5281/zenodo.4783391), checks their MD5
# sums, extracts the 7z archives (needs 7z: apt-get install p7zip-full) and removes the archives
# unless --keep_archives true. About 4.6 GB of archives and 7 GB of audio.
#
# Licences: captions under the Tampere University licence (non-commercial/experimental use,
# keep the notice: LICENSE in the Zenodo record); audio from Freesound under per-clip Creative
# Commons licences listed in clotho_metadata_<split>.csv.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

clotho_root=                                  # Where Clotho v2.1 lives / is downloaded to.
splits="development validation evaluation"    # Splits needed.
skip_bad=false                                # Accepted (shared local_data_opts with data.sh); unused here.
python=${python:-python3}                     # Accepted for the same reason; unused here.
keep_archives=false                           # Keep the .7z archives after extraction.
base_url=https://zenodo.org/records/4783391/files   # Zenodo record of Clotho v2.1.

help_message=$(cat << EOF
Usage: $0 --clotho_root <dir> [options]
e.g.
  $0 --clotho_root downloads/clotho

Options:
  --clotho_root    # Target directory (default="${clotho_root}").
  --splits         # Splits to fetch (default="${splits}").
  --keep_archives  # Keep the 7z archives after extraction (default="${keep_archives}").
  --base_url       # Download location (default="${base_url}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${clotho_root}" ]; then
    log "${help_message}"
    log "Error: --clotho_root is required and no positional argument is allowed."
    exit 2
fi

# MD5 sums of the Zenodo v2.1 files (record 4783391). Caption CSV sums were checked against the
# official CSVs (dev/val are CRLF files); the audio/metadata sums agree between two independent
# public loaders (aac-datasets' Clotho links and mirdata's dcase23_task6a index).
declare -A md5=(
    [clotho_audio_development.7z]=c8b05bc7acdb13895bb3c6a29608667e
    [clotho_audio_validation.7z]=7dba730be08bada48bd15dc4e668df59
    [clotho_audio_evaluation.7z]=4569624ccadf96223f19cb59fe4f849f
    [clotho_captions_development.csv]=d4090b39ce9f2491908eebf4d5b09bae
    [clotho_captions_validation.csv]=5879e023032b22a2c930aaa0528bead4
    [clotho_captions_evaluation.csv]=1b16b9e57cf7bdb7f13a13802aeb57e2
    [clotho_metadata_development.csv]=170d20935ecfdf161ce1bb154118cda5
    [clotho_metadata_validation.csv]=2e010427c56b1ce6008b0f03f41048ce
    [clotho_metadata_evaluation.csv]=13946f054d4e1bf48079813aac61bf77
)

is_present() {  # <split>: caption CSV and a non-empty audio folder
    [ -f "${clotho_root}/clotho_captions_$1.csv" ] && [ -d "${clotho_root}/$1" ] \
        && [ -n "$(ls -A "${clotho_root}/$1" 2> /dev/null)" ]
}

missing=()
for split in ${splits}; do
    case "${split}" in
        development|validation|evaluation) ;;
        *) log "Error: unknown Clotho split '${split}'"; exit 2 ;;
    esac
    is_present "${split}" || missing+=("${split}")
done
if [ ${#missing[@]} -eq 0 ]; then
    log "Clotho v2.1 is already in ${clotho_root} (caption CSVs and audio folders of: ${splits}); nothing to download"
    exit 0
fi

# A directory holding other things than Clotho's files is not downloaded into: a --clotho_root (or
# CLOTHO) that names the wrong directory, or Clotho extracted in another layout, must not get 4.6 GB
# written next to what is there. Clotho's own files (an interrupted download's included) are fine.
if [ -d "${clotho_root}" ]; then
    foreign=()
    for f in "${clotho_root}"/* "${clotho_root}"/.[!.]*; do
        [ -e "${f}" ] || continue
        case "${f##*/}" in
            clotho_audio_*.7z|clotho_audio_*.7z.part|clotho_captions_*.csv|clotho_captions_*.csv.part) ;;
            clotho_metadata_*.csv|clotho_metadata_*.csv.part|LICENSE*) ;;
            development|validation|evaluation) [ -d "${f}" ] || foreign+=("${f##*/}") ;;
            *) foreign+=("${f##*/}") ;;
        esac
    done
    if [ ${#foreign[@]} -gt 0 ]; then
        log "Error: ${clotho_root} lacks Clotho v2.1's ${missing[*]} (clotho_captions_<split>.csv and <split>/ with the audio) and holds other files (${foreign[*]:0:5}$([ ${#foreign[@]} -gt 5 ] && echo " ...")): not downloading into it. Give the directory that holds Clotho v2.1 in its official layout, or an empty or new one to download into."
        exit 1
    fi
fi

manual_help="Download Clotho v2.1 by hand from https://zenodo.org/records/4783391 (clotho_audio_<split>.7z,
clotho_captions_<split>.csv, clotho_metadata_<split>.csv), extract the archives into one directory
(giving <dir>/<split>/*.wav next to <dir>/clotho_captions_<split>.csv) and pass --clotho_root <dir>
(or set CLOTHO in db.sh)."

if command -v 7z > /dev/null; then
    sevenz=7z
elif command -v 7za > /dev/null; then
    sevenz=7za
elif command -v 7zz > /dev/null; then
    sevenz=7zz
else
    log "Error: 7z is needed to extract the Clotho archives: install p7zip-full (e.g. sudo apt-get install p7zip-full)."
    log "${manual_help}"
    exit 1
fi

if command -v wget > /dev/null; then
    fetch() { wget --tries=3 --timeout=60 -c -O "$2" "$1"; }
    probe() { wget -q --spider --tries=1 --timeout=20 "$1"; }
elif command -v curl > /dev/null; then
    fetch() { curl -fL --retry 3 --connect-timeout 60 -C - -o "$2" "$1"; }
    probe() { curl -fsIL --connect-timeout 20 -o /dev/null "$1"; }
else
    log "Error: neither wget nor curl is installed."
    log "${manual_help}"
    exit 1
fi

mkdir -p "${clotho_root}"
log "Downloading Clotho v2.1 (${missing[*]}) from ${base_url} into ${clotho_root}"
if ! probe "${base_url}/clotho_captions_${missing[0]}.csv?download=1"; then
    log "Error: cannot reach ${base_url} (no network?)."
    log "${manual_help}"
    exit 1
fi

get() {  # <file name>: download to .part, check MD5, move into place; skip if already verified
    local name=$1 dest="${clotho_root}/$1"
    if [ -f "${dest}" ] && [ "$(md5sum < "${dest}" | cut -d' ' -f1)" = "${md5[${name}]}" ]; then
        log "${name}: present, MD5 ok"
        return 0
    fi
    log "${name}: downloading"
    if ! fetch "${base_url}/${name}?download=1" "${dest}.part"; then
        log "Error: download of ${name} failed."
        log "${manual_help}"
        exit 1
    fi
    local sum
    sum=$(md5sum < "${dest}.part" | cut -d' ' -f1)
    if [ "${sum}" != "${md5[${name}]}" ]; then
        log "Error: MD5 of ${name} is ${sum}, expected ${md5[${name}]}; removed ${dest}.part, please retry."
        rm -f "${dest}.part"
        exit 1
    fi
    mv "${dest}.part" "${dest}"
}

for split in "${missing[@]}"; do
    get "clotho_captions_${split}.csv"
    get "clotho_metadata_${split}.csv"
    get "clotho_audio_${split}.7z"
    log "clotho_audio_${split}.7z: extracting into ${clotho_root}/${split}"
    if ! "${sevenz}" x -y -o"${clotho_root}" "${clotho_root}/clotho_audio_${split}.7z" > "${clotho_root}/extract_${split}.log" 2>&1; then
        log "Error: 7z failed on clotho_audio_${split}.7z (see ${clotho_root}/extract_${split}.log)"
        exit 1
    fi
    if ! is_present "${split}"; then
        log "Error: extracting clotho_audio_${split}.7z did not give ${clotho_root}/${split}/ (see ${clotho_root}/extract_${split}.log)"
        exit 1
    fi
    if ! "${keep_archives}"; then
        rm -f "${clotho_root}/clotho_audio_${split}.7z"
    fi
    log "${split}: $(find "${clotho_root}/${split}" -type f -name '*.wav' | wc -l) wav files"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
