#!/usr/bin/env bash

# Extract features of a data dir into a dump dir with captionbin.caption_dump_feats, as a
# JOB array: wav.scp is split into <nj> shards (utils/split_scp.pl), job JOB writes
# <dump-dir>/feats.JOB.{ark|h5} + feats.JOB.scp + utt2num_frames.JOB, then the shards are
# merged and sorted (LC_ALL=C) into feats.scp / utt2num_frames, and feats_dim / feats_type
# are written. text, utt2spk, spk2utt, wav.scp, aud2name and reco2dur are copied.
# A .done marker (holding the options and the inputs' checksums) makes re-running with the same
# options and unchanged inputs a no-op.
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

cmd=utils/run.pl                      # Job wrapper (run.pl, slurm.pl ...).
nj=4                                  # Number of jobs (capped at the number of clips).
filetype=ark                          # Feature file type: ark or hdf5.
feats_config=conf/feats_logmel.yaml   # Feature config (keys of caption_dump_feats).
python=python3                        # Python command.

help_message=$(cat << EOF
Usage: $0 [options] <data-dir> <dump-dir>
e.g.
  $0 --cmd utils/run.pl --nj 4 --filetype ark --feats_config conf/feats_logmel.yaml \\
      data/development dump/logmel/development

Options:
  --cmd           # Job wrapper (default="${cmd}").
  --nj            # Number of jobs, capped at the number of clips (default="${nj}").
  --filetype      # ark or hdf5 (default="${filetype}").
  --feats_config  # Feature config YAML (default="${feats_config}").
  --python        # Python command (default="${python}").
EOF
)

log "$0 $*"
. utils/parse_options.sh

if [ $# -ne 2 ]; then
    log "${help_message}"
    log "Error: 2 positional arguments are required."
    exit 2
fi
data=$1
dir=$2

case "${filetype}" in
    ark) ext=ark ;;
    hdf5) ext=h5 ;;
    *) log "Error: --filetype must be ark or hdf5, got '${filetype}'"; exit 2 ;;
esac
[ -f "${data}/wav.scp" ] || { log "Error: ${data}/wav.scp not found"; exit 1; }
[ -f "${feats_config}" ] || { log "Error: feature config ${feats_config} not found"; exit 1; }

nclips=$(wc -l < "${data}/wav.scp")
[ "${nclips}" -gt 0 ] || { log "Error: ${data}/wav.scp is empty"; exit 1; }

# What the .done marker records, so that a re-run redoes the dump when any of it changed: the
# file type, the resolved feature options (the config with the binary's current defaults),
# wav.scp, and the size and modification time of every audio file it lists (an input file
# fixed in place).
_resolved=$(${python} -m captionbin.caption_dump_feats --config "${feats_config}" --print_config | md5sum | cut -d' ' -f1)
_audio=$({ cut -d' ' -f2- "${data}/wav.scp" | tr '\n' '\0' | xargs -0 stat -L -c '%n %s %.9Y' 2>/dev/null || true; } \
    | md5sum | cut -d' ' -f1)
_key="filetype=${filetype} feats_options=${_resolved} wav_scp=$(md5sum < "${data}/wav.scp" | cut -d' ' -f1) audio=${_audio}"
if [ -f "${dir}/.done" ] && [ "$(cat "${dir}/.done")" = "${_key}" ]; then
    log "${dir} is already dumped (remove ${dir}/.done to redo)"
    exit 0
fi

if [ "${nj}" -gt "${nclips}" ]; then
    log "Reducing nj from ${nj} to the number of clips (${nclips})"
    nj=${nclips}
fi
[ "${nj}" -ge 1 ] || { log "Error: --nj must be >= 1"; exit 2; }

mkdir -p "${dir}/log"
dir=$(cd "${dir}" && pwd)  # absolute, so that feats.scp holds absolute paths
rm -f "${dir}/.done" "${dir}"/feats.*.ark "${dir}"/feats.*.h5 "${dir}"/feats.*.scp \
    "${dir}"/utt2num_frames.* "${dir}"/feats_dim.* "${dir}"/feats_type.* "${dir}"/log/wav.*.scp

split_scps=()
for n in $(seq "${nj}"); do
    split_scps+=("${dir}/log/wav.${n}.scp")
done
utils/split_scp.pl "${data}/wav.scp" "${split_scps[@]}"

log "Dumping ${filetype} features of ${nclips} clips with ${nj} jobs: log in ${dir}/log/dump_feats.*.log"
# shellcheck disable=SC2086
${cmd} JOB=1:"${nj}" "${dir}/log/dump_feats.JOB.log" \
    ${python} -m captionbin.caption_dump_feats \
        --config "${feats_config}" \
        --wav_scp "${dir}/log/wav.JOB.scp" \
        --filetype "${filetype}" \
        --out_prefix "${dir}/feats.JOB"

for n in $(seq "${nj}"); do
    for f in "feats.${n}.${ext}" "feats.${n}.scp" "utt2num_frames.${n}" "feats_dim.${n}" "feats_type.${n}"; do
        [ -f "${dir}/${f}" ] || { log "Error: job ${n} did not write ${dir}/${f} (see ${dir}/log/dump_feats.${n}.log)"; exit 1; }
    done
done

for n in $(seq "${nj}"); do cat "${dir}/feats.${n}.scp"; done | LC_ALL=C sort > "${dir}/feats.scp"
for n in $(seq "${nj}"); do cat "${dir}/utt2num_frames.${n}"; done | LC_ALL=C sort > "${dir}/utt2num_frames"

for name in feats_dim feats_type; do
    _vals=$(for n in $(seq "${nj}"); do cat "${dir}/${name}.${n}"; done | LC_ALL=C sort -u)
    if [ "$(printf '%s\n' "${_vals}" | wc -l)" -ne 1 ]; then
        log "Error: the jobs disagree on ${name}: ${_vals//$'\n'/ }"
        exit 1
    fi
    printf '%s\n' "${_vals}" > "${dir}/${name}"
    for n in $(seq "${nj}"); do rm -f "${dir}/${name}.${n}"; done
done

nfeats=$(wc -l < "${dir}/feats.scp")
if [ "${nfeats}" -ne "${nclips}" ]; then
    log "Error: ${dir}/feats.scp has ${nfeats} clips, ${data}/wav.scp has ${nclips}"
    exit 1
fi

for f in wav.scp text utt2spk spk2utt aud2name reco2dur; do
    if [ -f "${data}/${f}" ]; then
        cp "${data}/${f}" "${dir}/${f}"
    fi
done

echo "${_key}" > "${dir}/.done"
log "Wrote ${dir}/feats.scp (${nfeats} clips, dim $(cat "${dir}/feats_dim"), $(cat "${dir}/feats_type"))"
log "Successfully finished. [elapsed=${SECONDS}s]"
