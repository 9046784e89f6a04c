#!/usr/bin/env bash
# shellcheck disable=SC1091  # utils/ is relative to the recipe directory

# Decode one feature dir with one model (or a word-level ensemble of several) in parallel jobs
# and merge the hypotheses.
# Shards <feats_dir>/feats.scp with utils/split_scp.pl into <decode_dir>/log/keys.JOB.scp, runs
# captionbin.caption_decode under "${cmd} JOB=1:N", and merges output.*/text into <decode_dir>/text
# (and output.*/text_samples into <decode_dir>/text_samples with --num_diversity_samples N > 0:
# N sampled captions per clip, ids <clip-id>#<k>, for Div-1/Div-2/mBLEU-4; and output.*/text_nbest
# into <decode_dir>/text_nbest with --nbest N > 0: the N best beam hypotheses, ids <clip-id>#<rank>).
# <model-file> may be a comma-separated list: the models are decoded as a word-level ensemble.
# A .done marker newer than the model file(s) and holding the same options, decode config
# contents and features makes re-running a finished decode a no-op.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

cmd=utils/run.pl  # Job wrapper ("run.pl", "slurm.pl --config conf/slurm.conf", ...).
nj=4              # The maximum number of parallel jobs (capped by the number of clips).
ngpu=0            # GPUs per job: 0 decodes on the CPU, 1 on a GPU (give a --cmd that allots one).
python=python3    # Python command.
decode_config=    # Config for caption_decode (required).
decode_args=      # Extra arguments for caption_decode.
num_diversity_samples=0 # N > 0: also write text_samples with N sampled captions per clip.
nbest=0           # N > 0: also write text_nbest with the N best beam hypotheses per clip.

help_message=$(cat << EOF
Usage: $0 [options] <model-file>[,<model-file>...] <feats-dir> <decode-dir>
e.g.
  $0 --nj 4 --decode_config conf/decode.yaml exp/xe_x/valid.cider_d.best.pth dump/logmel/evaluation exp/xe_x/decode_decode_model_valid.cider_d.best/evaluation
  # word-level ensemble of two models, with 5 sampled captions per clip
  $0 --num_diversity_samples 5 --decode_config conf/decode.yaml exp/a/valid.cider_d.best.pth,exp/b/valid.cider_d.best.pth dump/logmel/evaluation exp/ensemble_a+b/decode_x/evaluation

Options:
  --cmd           # Job wrapper (default="${cmd}").
  --nj            # The maximum number of parallel jobs (default="${nj}").
  --ngpu          # GPUs per job, 0 or 1 (default="${ngpu}").
  --python        # Python command (default="${python}").
  --decode_config # Config for caption_decode (required).
  --decode_args   # Extra arguments for caption_decode (default="${decode_args}").
  --num_diversity_samples # Sampled captions per clip for diversity metrics; 0: none (default="${num_diversity_samples}").
  --nbest         # N-best beam hypotheses per clip for diversity metrics; 0: none (default="${nbest}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 3 ]; then
    log "${help_message}"
    log "Error: 3 positional arguments are required."
    exit 2
fi
IFS=, read -r -a model_files <<< "$1"
feats_dir=$2
dir=$3
logdir=${dir}/log

[ -n "${decode_config}" ] || { log "Error: --decode_config is required"; exit 2; }
case "${ngpu}" in 0|1) ;; *) log "Error: --ngpu must be 0 or 1, got '${ngpu}'"; exit 2;; esac
[[ "${nj}" =~ ^[0-9]+$ ]] && [ "${nj}" -ge 1 ] || { log "Error: --nj (a number of jobs) must be an integer >= 1, got '${nj}'"; exit 2; }
[ ${#model_files[@]} -gt 0 ] || { log "Error: no model file given"; exit 2; }
# --decode_args is split as a POSIX shell splits words (quotes, backslashes), by
# utils/split_words.py: nothing in it is run or expanded
if ! _err=$(utils/split_words.py "${decode_args}" 2>&1 > /dev/null); then
    log "Error: --decode_args ${decode_args}: ${_err}"; exit 2
fi
_decode_opts=()
while IFS= read -r -d '' _w; do _decode_opts+=("${_w}"); done < <(utils/split_words.py "${decode_args}")
for f in "${model_files[@]}" "${feats_dir}/feats.scp"; do
    [ -f "${f}" ] || { log "Error: ${f} not found"; exit 1; }
done
model_opts=()
for f in "${model_files[@]}"; do
    model_opts+=(--model_file "${f}")
done
# The .done marker holds the options, the decode config's contents and the features' checksum
# (feats.scp and the dump's own .done): a decode with other options, an edited config or
# re-dumped features is redone.
[ -f "${decode_config}" ] || { log "Error: --decode_config ${decode_config} not found"; exit 1; }
_config_md5=$(md5sum < "${decode_config}" | cut -d' ' -f1)
_feats_md5=$({ cat "${feats_dir}/feats.scp"; if [ -f "${feats_dir}/.done" ]; then cat "${feats_dir}/.done"; fi; } \
    | md5sum | cut -d' ' -f1)
_key="models=$1 decode_config=${decode_config}:${_config_md5} decode_args=${decode_args} num_diversity_samples=${num_diversity_samples} nbest=${nbest} feats=${_feats_md5}"
if [ "${ngpu}" -gt 0 ]; then
    _key+=" ngpu=${ngpu}"  # GPU kernels (cuDNN's TF32) may change the last digits, and with them a caption
fi
_done=false
if [ -f "${dir}/.done" ] && [ "$(cat "${dir}/.done")" = "${_key}" ]; then
    _done=true
    for f in "${model_files[@]}"; do
        [ "${dir}/.done" -nt "${f}" ] || _done=false
    done
fi
if "${_done}"; then
    log "${dir} is already decoded (remove ${dir}/.done to redo)"
    exit 0
fi

_num=$(wc -l < "${feats_dir}/feats.scp")
_nj=$((nj < _num ? nj : _num))
mkdir -p "${logdir}"
rm -rf "${dir}"/output.* "${dir}/text" "${dir}/text_samples" "${dir}/text_nbest" "${dir}/.done"
split_scps=()
for n in $(seq "${_nj}"); do
    split_scps+=("${logdir}/keys.${n}.scp")
done
utils/split_scp.pl "${feats_dir}/feats.scp" "${split_scps[@]}"

# shellcheck disable=SC2086  # ${cmd}: e.g. "run.pl --gpu 1"
${cmd} JOB=1:"${_nj}" "${logdir}/decode.JOB.log" \
    ${python} -m captionbin.caption_decode --config "${decode_config}" "${model_opts[@]}" \
        --feats_scp "${logdir}/keys.JOB.scp" --output_dir "${dir}/output.JOB" --ngpu "${ngpu}" \
        --num_diversity_samples "${num_diversity_samples}" --nbest "${nbest}" ${_decode_opts[@]+"${_decode_opts[@]}"}

for n in $(seq "${_nj}"); do
    cat "${dir}/output.${n}/text"
done | LC_ALL=C sort -k1,1 > "${dir}/text"

_hyp=$(wc -l < "${dir}/text")
if [ "${_hyp}" -ne "${_num}" ]; then
    log "Error: ${dir}/text has ${_hyp} lines but ${feats_dir}/feats.scp has ${_num} clips"
    exit 1
fi
# merge_per_clip <name> <per clip>: merge output.*/<name> (<per clip> lines per clip) into <name>
merge_per_clip() {
    local n _lines
    for n in $(seq "${_nj}"); do
        cat "${dir}/output.${n}/$1"
    done | LC_ALL=C sort -k1,1 > "${dir}/$1"
    _lines=$(wc -l < "${dir}/$1")
    if [ "${_lines}" -ne $((_num * $2)) ]; then
        log "Error: ${dir}/$1 has ${_lines} lines, expected ${_num} clips x $2"
        exit 1
    fi
}
if [ "${num_diversity_samples}" -gt 0 ]; then
    merge_per_clip text_samples "${num_diversity_samples}"
fi
if [ "${nbest}" -gt 0 ]; then
    merge_per_clip text_nbest "${nbest}"
fi
echo "${_key}" > "${dir}/.done"
log "Successfully finished. [elapsed=${SECONDS}s]"
