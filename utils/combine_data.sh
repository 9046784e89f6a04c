#!/usr/bin/env bash
# combine_data.sh: concatenate several captionlib data (or dump) directories into one.
set -euo pipefail

keyed="wav.scp image.scp video.scp clip2id feats.scp reco2dur aud2name utt2num_frames text utt2spk segments"
usage() {
  cat 1>&2 << EOF2
Usage: combine_data.sh <dest-dir> <src-dir-1> [<src-dir-2> ...]
For each of
  ${keyed}
present in EVERY source, writes the concatenation sorted with LC_ALL=C (a file present in
only some sources is skipped with a warning); a key found twice is an error. spk2utt is
regenerated from utt2spk; feats_dim/feats_type are copied when identical in all sources
(different values are an error).
EOF2
  exit 1
}
case "${1:-}" in -h | --help) usage ;; esac
[ $# -ge 2 ] || usage
dest=${1%/}
shift
utils=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LC_ALL=C

for s in "$@"; do
  [ -d "${s}" ] || { echo "combine_data.sh: no such directory ${s}" 1>&2; exit 1; }
done
mkdir -p "${dest}"
dest_real=$(cd "${dest}" && pwd -P)
for s in "$@"; do
  if [ "$(cd "${s}" && pwd -P)" = "${dest_real}" ]; then
    echo "combine_data.sh: <dest-dir> ${dest} is also a source" 1>&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

# Build everything in ${tmp} first, so a failure leaves <dest-dir> untouched.
for f in ${keyed}; do
  present=0
  for s in "$@"; do
    if [ -f "${s}/${f}" ]; then present=$((present + 1)); fi
  done
  if [ "${present}" -eq 0 ]; then continue; fi
  if [ "${present}" -ne $# ]; then
    echo "combine_data.sh: warning: ${f} is in only ${present} of $# sources; not combining it" 1>&2
    continue
  fi
  # awk rather than cat: a source whose last line lacks its newline gets one, instead of
  # being glued to the first line of the next source.
  for s in "$@"; do awk '{ print }' "${s}/${f}"; done | sort > "${tmp}/${f}"
  dup=$(awk '{print $1}' "${tmp}/${f}" | uniq -d | head -n 1)
  if [ -n "${dup}" ]; then
    echo "combine_data.sh: key '${dup}' of ${f} appears in more than one line of the sources" 1>&2
    exit 1
  fi
done
if [ -f "${tmp}/utt2spk" ]; then
  "${utils}/utt2spk_to_spk2utt.pl" "${tmp}/utt2spk" > "${tmp}/spk2utt"
fi
for f in feats_dim feats_type; do
  present=0
  for s in "$@"; do
    if [ -f "${s}/${f}" ]; then present=$((present + 1)); fi
  done
  if [ "${present}" -eq 0 ]; then continue; fi
  if [ "${present}" -ne $# ]; then
    echo "combine_data.sh: warning: ${f} is in only ${present} of $# sources; not copying it" 1>&2
    continue
  fi
  for s in "$@"; do
    if ! cmp -s "$1/${f}" "${s}/${f}"; then
      echo "combine_data.sh: ${f} differs between $1 and ${s}" 1>&2
      exit 1
    fi
  done
  cp "$1/${f}" "${tmp}/${f}"
done

n=0
for f in ${keyed} spk2utt feats_dim feats_type; do
  rm -f "${dest}/${f}"
  if [ -f "${tmp}/${f}" ]; then
    mv "${tmp}/${f}" "${dest}/${f}"
    n=$((n + 1))
  fi
done
if [ "${n}" -eq 0 ]; then
  echo "combine_data.sh: the sources have no data-directory file in common" 1>&2
  exit 1
fi
msg="combine_data.sh: combined $# directories into ${dest}"
if [ -f "${dest}/spk2utt" ]; then msg="${msg}: $(wc -l < "${dest}/spk2utt") clips"; fi
if [ -f "${dest}/utt2spk" ]; then msg="${msg}, $(wc -l < "${dest}/utt2spk") captions"; fi
echo "${msg}" 1>&2
