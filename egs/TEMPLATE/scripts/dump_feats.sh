#!/usr/bin/env bash

# Extract features of a data dir into a dump dir, as a JOB array. The feature type picks the
# clip list and the binary:
#   logmel: wav.scp              -> captionbin.caption_dump_feats (log-mel of the audio)
#   pretrained: wav.scp          -> captionbin.caption_dump_feats (the frame outputs of a frozen
#           pretrained audio encoder, cnn14/cnn10/convnext, on that log-mel: its `encoder` and
#           `pretrained` checkpoint in the feature config, e.g. conf/feats_pretrained_convnext.yaml)
#   cnn:    image.scp/video.scp  -> captionbin.caption_extract_visual_feats (CNN features of
#           each image, or of N frames of each video)
#   import: clip2id, else wav.scp -> captionbin.caption_import_feats (precomputed features in
#           the self-critical.pytorch, per-video HDF5 or per-clip .npy layouts; an audio data
#           dir has no clip2id: the ids are the file names of wav.scp, see --audio_root)
# The list is split into <nj> shards (utils/split_scp.pl), job JOB writes
# <dump-dir>/feats.JOB.{ark|h5} + feats.JOB.scp + utt2num_frames.JOB, then the shards are
# merged and sorted (LC_ALL=C) into feats.scp / utt2num_frames, and feats_dim / feats_type
# are written, and feats_config.yaml: the binary's resolved options (the feature config with
# the binary's defaults filled in), which XE training with a pretrained encoder checks the
# checkpoint's front end against. The data dir's other files (text, utt2spk, spk2utt, the
# media list, clip2id, aud2name, reco2dur) are copied.
# A .done marker (holding the options and the inputs' checksums) makes re-running with the same
# options and unchanged inputs a no-op (it only writes feats_config.yaml where a dump made by
# an older version lacks it).
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

cmd=utils/run.pl                      # Job wrapper (run.pl, slurm.pl ...).
feats_type=logmel                     # logmel or pretrained (wav.scp), cnn (image.scp or video.scp) or import (clip2id, else wav.scp).
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
  --feats_type    # logmel or pretrained (wav.scp), cnn (image.scp or video.scp) or import (clip2id, else wav.scp) (default="${feats_type}").
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
# the clip list, the binary and its options for the list
case "${feats_type}" in
    logmel|pretrained) list=wav.scp; binary=caption_dump_feats; list_opts=(--wav_scp) ;;
    cnn)
        binary=caption_extract_visual_feats
        if [ -f "${data}/image.scp" ] && [ -f "${data}/video.scp" ]; then
            log "Error: ${data} has both image.scp and video.scp"; exit 1
        elif [ -f "${data}/video.scp" ]; then
            list=video.scp; list_opts=(--media_type video --media_scp)
        else
            list=image.scp; list_opts=(--media_type image --media_scp)
        fi ;;
    import)
        binary=caption_import_feats
        if [ -f "${data}/clip2id" ] || [ ! -f "${data}/wav.scp" ]; then
            list=clip2id; list_opts=(--clip2id)
        else  # audio: the source ids come from the file names (caption_import_feats --wav_scp)
            list=wav.scp; list_opts=(--wav_scp)
        fi ;;
    *) log "Error: --feats_type must be logmel, pretrained, cnn or import, got '${feats_type}'"; exit 2 ;;
esac
if [ ! -f "${data}/${list}" ]; then
    [ "${feats_type}" = import ] && list="clip2id (or, for audio, wav.scp)"
    log "Error: ${data}/${list} not found (needed by --feats_type ${feats_type})"; exit 1
fi
[ -f "${feats_config}" ] || { log "Error: feature config ${feats_config} not found"; exit 1; }

nclips=$(wc -l < "${data}/${list}")
[ "${nclips}" -gt 0 ] || { log "Error: ${data}/${list} is empty"; exit 1; }

# What the .done marker records, so that a re-run redoes the dump when any of it changed: the
# file type, the resolved feature options (the config with the binary's current defaults),
# the clip list, and the size and modification time of every media file it lists and of the
# files the options name (source: the imported features, cnn_weights: the CNN, pretrained: the
# audio encoder's checkpoint), so that an input fixed in place is seen (clip2id lists ids, not
# files).
_options=$(${python} -m "captionbin.${binary}" --config "${feats_config}" --print_config)
_named=$(printf '%s\n' "${_options}" | sed -n -e 's/^source: *//p' -e 's/^cnn_weights: *//p' -e 's/^pretrained: *//p' \
    | grep -v '^null$' || true)
if [ "${binary}" = caption_dump_feats ]; then  # the config's feats_type is what the binary makes
    _made=$(printf '%s\n' "${_options}" | sed -n 's/^feats_type: *//p')
    if [ "${_made}" != "${feats_type}" ]; then
        log "Error: ${feats_config} makes feats_type '${_made}', not the '${feats_type}' asked for (--feats_type)"
        exit 1
    fi
fi
_media=$({ { cut -d' ' -f2- "${data}/${list}"; [ -z "${_named}" ] || printf '%s\n' "${_named}"; } | tr '\n' '\0' \
    | xargs -0 stat -L -c '%n %s %.9Y' 2>/dev/null || true; } | md5sum | cut -d' ' -f1)
_key="feats_type=${feats_type} filetype=${filetype} feats_options=$(printf '%s\n' "${_options}" | md5sum | cut -d' ' -f1)"
_key+=" ${list}=$(md5sum < "${data}/${list}" | cut -d' ' -f1) media=${_media}"
write_feats_config() {
    { echo "# resolved options of captionbin.${binary} (--config ${feats_config}), written by $0"
      printf '%s\n' "${_options}"; } > "${dir}/feats_config.yaml"
}
if [ -f "${dir}/.done" ] && [ "$(cat "${dir}/.done")" = "${_key}" ]; then
    log "${dir} is already dumped (remove ${dir}/.done to redo)"
    if [ ! -f "${dir}/feats_config.yaml" ]; then  # dumped by an older version: the options are the .done's
        write_feats_config
        log "Wrote ${dir}/feats_config.yaml"
    fi
    exit 0
fi

if [ "${nj}" -gt "${nclips}" ]; then
    log "Reducing nj from ${nj} to the number of clips (${nclips})"
    nj=${nclips}
fi
[ "${nj}" -ge 1 ] || { log "Error: --nj must be >= 1"; exit 2; }

mkdir -p "${dir}/log"
dir=$(cd "${dir}" && pwd)  # absolute, so that feats.scp holds absolute paths
# the merged files of an earlier dump go too: a re-dump that fails or is killed must not leave a
# feats.scp that points at the arks it removed (or at features of another config)
rm -f "${dir}/.done" "${dir}/feats_config.yaml" "${dir}/pretrained.sha256" "${dir}"/feats.*.ark "${dir}"/feats.*.h5 "${dir}"/feats.*.scp \
    "${dir}"/utt2num_frames.* "${dir}"/feats_dim.* "${dir}"/feats_type.* "${dir}"/log/"${list}".* \
    "${dir}/feats.scp" "${dir}/utt2num_frames" "${dir}/feats_dim" "${dir}/feats_type"

split_scps=()
for n in $(seq "${nj}"); do
    split_scps+=("${dir}/log/${list}.${n}")
done
utils/split_scp.pl "${data}/${list}" "${split_scps[@]}"

log "Dumping ${feats_type} ${filetype} features of ${nclips} clips (${list}) with ${nj} jobs: log in ${dir}/log/dump_feats.*.log"
# shellcheck disable=SC2086
${cmd} JOB=1:"${nj}" "${dir}/log/dump_feats.JOB.log" \
    ${python} -m "captionbin.${binary}" \
        --config "${feats_config}" \
        "${list_opts[@]}" "${dir}/log/${list}.JOB" \
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
        if [ "${name}" = feats_dim ] && [ "${feats_type}" = import ]; then
            log "Set feats_dim in ${feats_config} (caption_import_feats --feats_dim) to have the files of the other dimension named"
        fi
        exit 1
    fi
    printf '%s\n' "${_vals}" > "${dir}/${name}"
    for n in $(seq "${nj}"); do rm -f "${dir}/${name}.${n}"; done
done

nfeats=$(wc -l < "${dir}/feats.scp")
if [ "${nfeats}" -ne "${nclips}" ]; then
    log "Error: ${dir}/feats.scp has ${nfeats} clips, ${data}/${list} has ${nclips}"
    exit 1
fi

for f in wav.scp image.scp video.scp clip2id text utt2spk spk2utt aud2name reco2dur; do
    if [ -f "${data}/${f}" ]; then
        cp "${data}/${f}" "${dir}/${f}"
    fi
done

write_feats_config
if [ "${feats_type}" = pretrained ]; then  # the checkpoint the frames were made with: stage 10 packs only that one
    sha256sum < "$(printf '%s\n' "${_options}" | sed -n 's/^pretrained: *//p')" | cut -d' ' -f1 > "${dir}/pretrained.sha256"
fi
echo "${_key}" > "${dir}/.done"
log "Wrote ${dir}/feats.scp (${nfeats} clips, dim $(cat "${dir}/feats_dim"), $(cat "${dir}/feats_type"))"
log "Successfully finished. [elapsed=${SECONDS}s]"
