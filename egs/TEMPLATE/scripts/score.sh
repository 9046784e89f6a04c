#!/usr/bin/env bash
# shellcheck disable=SC1091  # utils/ is relative to the recipe directory

# Score one decode dir against the references of a data dir with captionbin.caption_score:
# writes <decode-dir>/score.json and result.txt (log: <decode-dir>/log/score.log).
# When <decode-dir>/text_samples exists (caption_decode --num_diversity_samples), it is passed as
# --hyp_samples: score.json then also has CIDEr-D (samples), Div-1, Div-2 and mBLEU-4 (seed 001);
# likewise <decode-dir>/text_nbest (caption_decode --nbest) as --hyp_nbest: Div-1/Div-2/mBLEU-4 (beams).
# A .score.done marker (holding the metric options, the references' path and the checksums of the
# hypotheses, references, utt2spk and spk2utt) makes re-running with the same inputs a no-op.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

cmd=utils/run.pl  # Job wrapper.
python=python3    # Python command.
metrics=bleu,meteor,rouge_l,cider_d,spice,spider # Metrics given to caption_score.
spice_lib_dir=    # Stanford CoreNLP jars for SPICE (empty: caption_score's default).
fluency_model=    # Fluency error detector of the metric fluency (caption_train_fluency; empty: the rules alone).

help_message=$(cat << EOF
Usage: $0 [options] <ref-data-dir> <decode-dir>
e.g.
  $0 --metrics cider_d,bleu data/evaluation exp/xe_x/decode_decode_model_valid.cider_d.best/evaluation

Options:
  --cmd           # Job wrapper (default="${cmd}").
  --python        # Python command (default="${python}").
  --metrics       # Metrics (default="${metrics}").
  --spice_lib_dir # Stanford CoreNLP jars for SPICE (default="${spice_lib_dir}").
  --fluency_model # Fluency error detector for the metric fluency (default="${fluency_model}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 2 ]; then
    log "${help_message}"
    log "Error: 2 positional arguments are required."
    exit 2
fi
ref_dir=$1
dir=$2

[ -f "${dir}/text" ] || { log "Error: ${dir}/text not found (run the decoding stage first)"; exit 1; }
samples_opts=()
if [ -f "${dir}/text_samples" ]; then
    samples_opts=(--hyp_samples "${dir}/text_samples")
fi
nbest_opts=()
if [ -f "${dir}/text_nbest" ]; then
    nbest_opts=(--hyp_nbest "${dir}/text_nbest")
fi
[ -f "${ref_dir}/text" ] || { log "Error: ${ref_dir}/text not found (the references)"; exit 1; }
# The key holds the options and the checksums of every input (the hypotheses, the references and
# their clip grouping): a re-run redoes the scoring when any of them changed. A modification time
# did not tell (a hypothesis file copied back with its old time kept the old score).
_md5s() { for _f in "$@"; do if [ -f "${_f}" ]; then md5sum < "${_f}" | cut -d' ' -f1; else echo -; fi; done | paste -sd, -; }
_key="metrics=${metrics} spice_lib_dir=${spice_lib_dir} fluency_model=${fluency_model}:$(_md5s "${fluency_model:-/nonexistent}") samples=${#samples_opts[@]} nbest=${#nbest_opts[@]}"
_key+=" hyps=$(_md5s "${dir}/text" "${dir}/text_samples" "${dir}/text_nbest")"
_key+=" refs=${ref_dir}:$(_md5s "${ref_dir}/text" "${ref_dir}/utt2spk" "${ref_dir}/spk2utt")"
if [ -f "${dir}/.score.done" ] && [ "$(cat "${dir}/.score.done")" = "${_key}" ] && [ -f "${dir}/per_clip.json" ]; then
    log "${dir} is already scored (remove ${dir}/.score.done to redo)"
    exit 0
fi
mkdir -p "${dir}/log"
# an earlier run's scores go first: a failed re-score must not leave them for caption_results
rm -f "${dir}/.score.done" "${dir}/score.json" "${dir}/per_clip.json" "${dir}/result.txt"
# shellcheck disable=SC2086
if ! ${cmd} "${dir}/log/score.log" \
    ${python} -m captionbin.caption_score --ref_dir "${ref_dir}" --hyp "${dir}/text" --metrics "${metrics}" \
        --output "${dir}/score.json" ${spice_lib_dir:+--spice_lib_dir "${spice_lib_dir}"} \
        ${fluency_model:+--fluency_model "${fluency_model}"} \
        ${samples_opts[@]+"${samples_opts[@]}"} ${nbest_opts[@]+"${nbest_opts[@]}"}; then
    log "Error: scoring ${dir} failed; the end of ${dir}/log/score.log:"
    tail -n 5 "${dir}/log/score.log" >&2
    exit 1
fi
echo "${_key}" > "${dir}/.score.done"
log "Successfully finished. [elapsed=${SECONDS}s]"
