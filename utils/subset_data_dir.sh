#!/usr/bin/env bash
# subset_data_dir.sh: copy a consistent subset of a captionlib data (or dump) directory.
set -euo pipefail

clip_files="wav.scp image.scp video.scp clip2id feats.scp reco2dur aud2name utt2num_frames"
cap_files="text segments"    # filtered by the kept captions of utt2spk
copied_files="feats_dim feats_type"
# Where the list of all clips is read from: the first of these present.
clip_lists="spk2utt wav.scp image.scp video.scp clip2id feats.scp"
usage() {
  cat 1>&2 << EOF2
Usage: subset_data_dir.sh [--spk-list <file> | --utt-list <file> | --first <N> | --last <N>] <src-dir> <dest-dir>
Selects by clip ("speaker") with --spk-list (clip ids in the first column) or --first N /
--last N (the first/last N keys of the first present of
  ${clip_lists});
or by caption with --utt-list (caption ids in the first column; keeps the clips of the kept
captions). These files, when present, are filtered consistently:
  ${clip_files} utt2spk ${cap_files}
spk2utt is regenerated, ${copied_files} are copied. Input order is kept (sorted in, sorted out).
EOF2
  exit 1
}

mode=""
arg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --spk-list | --spk_list | --utt-list | --utt_list | --first | --last)
      [ -z "${mode}" ] || { echo "subset_data_dir.sh: give only one of --spk-list/--utt-list/--first/--last" 1>&2; exit 1; }
      [ $# -ge 2 ] || usage
      mode=${1#--}; mode=${mode//_/-}; arg=$2; shift 2 ;;
    -h | --help) usage ;;
    --*) echo "subset_data_dir.sh: unknown option $1" 1>&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] && [ -n "${mode}" ] || usage
src=${1%/}
dest=${2%/}
utils=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LC_ALL=C

[ -d "${src}" ] || { echo "subset_data_dir.sh: no such directory ${src}" 1>&2; exit 1; }
mkdir -p "${dest}"
if [ "$(cd "${src}" && pwd -P)" = "$(cd "${dest}" && pwd -P)" ]; then
  echo "subset_data_dir.sh: <src-dir> and <dest-dir> are the same directory" 1>&2
  exit 1
fi
for f in ${clip_files} ${cap_files} utt2spk spk2utt ${copied_files}; do
  rm -f "${dest}/${f}"    # no stale files from an earlier run
done
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

# list of all clips of the source, in order
clip_list=""
for f in ${clip_lists}; do
  if [ -f "${src}/${f}" ]; then clip_list=${f}; break; fi
done
[ -n "${clip_list}" ] || { echo "subset_data_dir.sh: ${src} has none of ${clip_lists}" 1>&2; exit 1; }
cut -d' ' -f1 "${src}/${clip_list}" > "${tmp}/all_clips"
nclips=$(wc -l < "${tmp}/all_clips")

case "${mode}" in
  spk-list | utt-list)
    [ -f "${arg}" ] || { echo "subset_data_dir.sh: no such file ${arg}" 1>&2; exit 1; } ;;
  first | last)
    if ! [[ "${arg}" =~ ^[0-9]+$ ]] || [ "${arg}" -le 0 ]; then
      echo "subset_data_dir.sh: --${mode} needs a positive integer, got '${arg}'" 1>&2; exit 1
    fi
    if [ "${arg}" -gt "${nclips}" ]; then
      echo "subset_data_dir.sh: cannot take the ${mode} ${arg} clips of ${src}: it has only ${nclips}" 1>&2; exit 1
    fi ;;
esac

case "${mode}" in
  spk-list) awk 'NF > 0 {print $1}' "${arg}" > "${tmp}/clips" ;;
  first) head -n "${arg}" "${tmp}/all_clips" > "${tmp}/clips" ;;
  last) tail -n "${arg}" "${tmp}/all_clips" > "${tmp}/clips" ;;
  utt-list)
    [ -f "${src}/utt2spk" ] || { echo "subset_data_dir.sh: --utt-list needs ${src}/utt2spk" 1>&2; exit 1; }
    "${utils}/filter_scp.pl" "${arg}" "${src}/utt2spk" > "${tmp}/utt2spk"
    awk '{print $2}' "${tmp}/utt2spk" | sort -u > "${tmp}/clips" ;;
esac

for f in ${clip_files}; do
  if [ -f "${src}/${f}" ]; then "${utils}/filter_scp.pl" "${tmp}/clips" "${src}/${f}" > "${dest}/${f}"; fi
done
if [ -f "${src}/utt2spk" ]; then
  if [ "${mode}" = utt-list ]; then
    cp "${tmp}/utt2spk" "${dest}/utt2spk"
  else
    "${utils}/filter_scp.pl" -f 2 "${tmp}/clips" "${src}/utt2spk" > "${dest}/utt2spk"
  fi
  for f in ${cap_files}; do
    if [ -f "${src}/${f}" ]; then "${utils}/filter_scp.pl" "${dest}/utt2spk" "${src}/${f}" > "${dest}/${f}"; fi
  done
  "${utils}/utt2spk_to_spk2utt.pl" "${dest}/utt2spk" > "${dest}/spk2utt"
elif [ -f "${src}/spk2utt" ]; then
  "${utils}/filter_scp.pl" "${tmp}/clips" "${src}/spk2utt" > "${dest}/spk2utt"
fi
for f in ${copied_files}; do
  if [ -f "${src}/${f}" ]; then cp "${src}/${f}" "${dest}/${f}"; fi
done

n=0
for f in ${clip_lists}; do
  if [ -f "${dest}/${f}" ]; then n=$(wc -l < "${dest}/${f}"); break; fi
done
msg="subset_data_dir.sh: ${dest}: ${n} of ${nclips} clips"
if [ -f "${dest}/utt2spk" ]; then msg="${msg}, $(wc -l < "${dest}/utt2spk") captions"; fi
echo "${msg}" 1>&2
