#!/usr/bin/env bash
# shellcheck disable=SC1091  # utils/ is relative to the recipe directory

# Score one decode dir against the references of a data dir with captionbin.caption_score:
# writes <decode-dir>/score.json and result.txt (log: <decode-dir>/log/score.log).
# When <decode-dir>/text_samples exists (caption_decode --num_diversity_samples), it is passed as
# --hyp_samples: score.json then also has CIDEr-D (samples), Div-1, Div-2 and mBLEU-4 (seed 001);
# likewise <decode-dir>/text_nbest (caption_decode --nbest) as --hyp_nbest: Div-1/Div-2/mBLEU-4 (beams).
# A .score.done marker (holding the metric options and the references' path and checksum) newer
# than <decode-dir>/text (and text_samples) makes re-running a no-op.
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

help_message=$(cat << EOF
Usage: $0 [options] <ref-data-dir> <decode-dir>
e.g.
  $0 --metrics cider_d,bleu data/evaluation exp/xe_x/decode_decode_model_valid.cider_d.best/evaluation

Options:
  --cmd           # Job wrapper (default="${cmd}").
  --python        # Python command (default="${python}").
  --metrics       # Metrics (default="${metrics}").
  --spice_lib_dir # Stanford CoreNLP jars for SPICE (default="${spice_lib_dir}").
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
_newest=${dir}/text
if [ -f "${dir}/text_samples" ]; then
    samples_opts=(--hyp_samples "${dir}/text_samples")
    [ "${dir}/text_samples" -nt "${_newest}" ] && _newest=${dir}/text_samples
fi
nbest_opts=()
if [ -f "${dir}/text_nbest" ]; then
    nbest_opts=(--hyp_nbest "${dir}/text_nbest")
    [ "${dir}/text_nbest" -nt "${_newest}" ] && _newest=${dir}/text_nbest
fi
[ -f "${ref_dir}/text" ] || { log "Error: ${ref_dir}/text not found (the references)"; exit 1; }
# the references are part of the key: other or edited references are scored again
_refs_md5=$(md5sum < "${ref_dir}/text" | cut -d' ' -f1)
_key="metrics=${metrics} spice_lib_dir=${spice_lib_dir} samples=${#samples_opts[@]} nbest=${#nbest_opts[@]} refs=${ref_dir}:${_refs_md5}"
if [ -f "${dir}/.score.done" ] && [ "${dir}/.score.done" -nt "${_newest}" ] \
        && [ "$(cat "${dir}/.score.done")" = "${_key}" ] && [ -f "${dir}/per_clip.json" ]; then
    log "${dir} is already scored (remove ${dir}/.score.done to redo)"
    exit 0
fi
mkdir -p "${dir}/log"
rm -f "${dir}/.score.done"
# shellcheck disable=SC2086
${cmd} "${dir}/log/score.log" \
    ${python} -m captionbin.caption_score --ref_dir "${ref_dir}" --hyp "${dir}/text" --metrics "${metrics}" \
        --output "${dir}/score.json" ${spice_lib_dir:+--spice_lib_dir "${spice_lib_dir}"} \
        ${samples_opts[@]+"${samples_opts[@]}"} ${nbest_opts[@]+"${nbest_opts[@]}"}
echo "${_key}" > "${dir}/.score.done"
log "Successfully finished. [elapsed=${SECONDS}s]"
