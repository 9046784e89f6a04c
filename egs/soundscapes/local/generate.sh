#!/usr/bin/env bash

# Stage 0 of egs/soundscapes: mix the captioned soundscape corpus from an event library into
# <corpus_dir> in the official Clotho layout (captionbin.caption_make_soundscapes).
# Deterministic from --corpus_seed; re-running with the same options does nothing.
# Run from the recipe directory.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

# shellcheck disable=SC1091
. ./db.sh
event_root=${EVENT_LIBRARY}       # Event library: events.csv + audio, or the ESC-50 layout.
corpus_dir=downloads/soundscapes  # Where the corpus is written.
num_clips=development:1500,validation:200,evaluation:300  # Clips per split.
corpus_seed=0                     # Corpus seed (the training seeds are caption.sh's --seeds).
duration_s=10                     # Clip length in seconds.
classes=                          # Comma-separated labels to mix (empty: every class of the library).
mixer_conf=                       # Other mixer settings (YAML), e.g. "{overlap_prob: 0.5}".
python=${python:-python3}         # Python command.

help_message=$(cat << EOF
Usage: $0 [options]
e.g.
  $0 --event_root ../../../shared/data/event_library --num_clips development:300,validation:50,evaluation:100

Options:
  --event_root  # Event library (events.csv layout or ESC-50) (default="${event_root}").
  --corpus_dir  # Output corpus root (default="${corpus_dir}").
  --num_clips   # Clips per split, <split>:<count>,... (default="${num_clips}").
  --corpus_seed # Corpus seed (default="${corpus_seed}").
  --duration_s  # Clip length in seconds (default="${duration_s}").
  --classes     # Comma-separated labels to mix; empty: all (default="${classes}").
  --mixer_conf  # Other SoundscapeConfig fields as YAML (default="${mixer_conf}").
  --python      # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ]; then
    log "${help_message}"
    log "Error: no positional argument is allowed."
    exit 2
fi
if [ ! -f "${event_root}/events.csv" ] && [ ! -f "${event_root}/meta/esc50.csv" ]; then
    log "Error: --event_root ${event_root} holds neither events.csv nor meta/esc50.csv (see egs/soundscapes/README.md)"
    exit 1
fi

mkdir -p "${corpus_dir}"
${python} -m captionbin.caption_make_soundscapes --event_root "${event_root}" --output_dir "${corpus_dir}" \
    --num_clips "${num_clips}" --seed "${corpus_seed}" --duration_s "${duration_s}" \
    --classes "${classes}" ${mixer_conf:+--mixer_conf "${mixer_conf}"}

log "Successfully finished. [elapsed=${SECONDS}s]"
