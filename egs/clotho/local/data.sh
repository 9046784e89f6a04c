#!/usr/bin/env bash

# Stage 1 of the Clotho recipes: data/<split>/{wav.scp,text,utt2spk,spk2utt,aud2name,reco2dur}
# for each split, from the official Clotho v2.1 layout:
#   <clotho_root>/clotho_captions_<split>.csv  and  <clotho_root>/<split>/<file_name>
# Clip ids: clotho-<split>-<NNNNN> (1-based CSV row), caption ids: <clip-id>-<k>.
# Run from the recipe directory (egs/clotho or egs/mini_clotho).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

clotho_root=                                  # Clotho v2.1 root (official layout).
splits="development validation evaluation"    # Splits to prepare.
skip_bad=false                                # Warn about and skip bad clips instead of failing.
python=${python:-python3}                     # Python command.
keep_archives=false                           # Accepted (local_data_opts are shared with download.sh); unused.

help_message=$(cat << EOF
Usage: $0 --clotho_root <dir> [options]
e.g.
  $0 --clotho_root downloads/clotho --splits "development validation evaluation"

Options:
  --clotho_root  # Clotho v2.1 root: clotho_captions_<split>.csv + <split>/ (default="${clotho_root}").
  --splits       # Splits to prepare (default="${splits}").
  --skip_bad     # true: skip bad rows/clips with a warning instead of failing (default="${skip_bad}").
  --python       # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ] || [ -z "${clotho_root}" ]; then
    log "${help_message}"
    log "Error: --clotho_root is required and no positional argument is allowed."
    exit 2
fi
if [ ! -d "${clotho_root}" ]; then
    log "Error: --clotho_root ${clotho_root} is not a directory (run stage 0, local/download.sh, or download Clotho v2.1 by hand)"
    exit 1
fi
clotho_root=$(cd "${clotho_root}" && pwd)  # absolute: wav.scp holds absolute paths

for split in ${splits}; do
    log "Preparing data/${split} from ${clotho_root}"
    # shellcheck disable=SC2086
    ${python} -m captionbin.caption_prepare_clotho \
        --clotho_root "${clotho_root}" --split "${split}" --output_dir "data/${split}" --skip_bad "${skip_bad}"
    utils/validate_data_dir.sh --no-feats "data/${split}"
done

log "Successfully finished. [elapsed=${SECONDS}s]"
