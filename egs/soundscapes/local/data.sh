#!/usr/bin/env bash

# Stage 1 of egs/soundscapes: data/<split>/{wav.scp,text,utt2spk,spk2utt,aud2name,reco2dur} for
# development, validation and evaluation from the corpus of stage 0 (Clotho layout, so the
# Clotho preparation is reused; clip ids soundscapes-<split>-<NNNNN>), plus data/evaluation_deaf:
# the evaluation captions with every clip's audio replaced by the next clip's (the "deaf"
# reference row: a model that scores as well there does not listen).
# Run from the recipe directory.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

corpus_dir=downloads/soundscapes  # Corpus root written by stage 0 (local/generate.sh).
python=${python:-python3}         # Python command.
# Accepted because local_data_opts are shared with local/generate.sh; unused here.
event_root=
num_clips=
corpus_seed=
duration_s=
classes=
mixer_conf=

help_message=$(cat << EOF
Usage: $0 [--corpus_dir <dir>]

Options:
  --corpus_dir # Corpus root of stage 0 (default="${corpus_dir}").
  --python     # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 0 ]; then
    log "${help_message}"
    log "Error: no positional argument is allowed."
    exit 2
fi
if [ ! -f "${corpus_dir}/corpus.json" ]; then
    log "Error: ${corpus_dir}/corpus.json not found: generate the corpus first (stage 0, local/generate.sh)"
    exit 1
fi
: "${event_root}${num_clips}${corpus_seed}${duration_s}${classes}${mixer_conf}"

for split in development validation evaluation; do
    log "Preparing data/${split} from ${corpus_dir}"
    ${python} -m captionbin.caption_prepare_clotho --clotho_root "${corpus_dir}" --split "${split}" \
        --output_dir "data/${split}" --id_prefix soundscapes
    utils/validate_data_dir.sh --no-feats "data/${split}"
done

log "Preparing data/evaluation_deaf: the audio of each evaluation clip is the next clip's"
if [ "$(wc -l < data/evaluation/wav.scp)" -lt 2 ]; then
    log "Error: data/evaluation has fewer than 2 clips: no deaf control can be made"
    exit 1
fi
utils/copy_data_dir.sh data/evaluation data/evaluation_deaf
for f in wav.scp reco2dur aud2name; do
    # rotate the values by one line: clip k gets clip k+1's audio (the last gets the first's)
    paste -d' ' <(cut -d' ' -f1 "data/evaluation/${f}") \
        <(cut -d' ' -f2- "data/evaluation/${f}" | sed -e '1{h;d;}' -e '$G') > "data/evaluation_deaf/${f}"
done
utils/validate_data_dir.sh --no-feats data/evaluation_deaf

log "Successfully finished. [elapsed=${SECONDS}s]"
