#!/usr/bin/env bash
# copy_data_dir.sh: copy the files of a captionlib data (or dump) directory.
set -euo pipefail

files="wav.scp image.scp video.scp clip2id feats.scp reco2dur aud2name utt2num_frames text utt2spk spk2utt segments feats_dim feats_type"
usage() {
  cat 1>&2 << EOF2
Usage: copy_data_dir.sh <src-dir> <dest-dir>
Copies the data-directory files present in <src-dir> to <dest-dir> (created if needed; those
files already in <dest-dir> are replaced or removed):
  ${files}
Paths inside scp files are absolute, so the copy stays valid.
EOF2
  exit 1
}
case "${1:-}" in -h | --help) usage ;; esac
[ $# -eq 2 ] || usage
src=${1%/}
dest=${2%/}
[ -d "${src}" ] || { echo "copy_data_dir.sh: no such directory ${src}" 1>&2; exit 1; }
mkdir -p "${dest}"
if [ "$(cd "${src}" && pwd -P)" = "$(cd "${dest}" && pwd -P)" ]; then
  echo "copy_data_dir.sh: <src-dir> and <dest-dir> are the same directory" 1>&2
  exit 1
fi
n=0
for f in ${files}; do
  rm -f "${dest}/${f}"
  if [ -f "${src}/${f}" ]; then
    cp "${src}/${f}" "${dest}/${f}"
    n=$((n + 1))
  fi
done
if [ "${n}" -eq 0 ]; then
  echo "copy_data_dir.sh: ${src} has none of: ${files}" 1>&2
  exit 1
fi
echo "copy_data_dir.sh: copied ${n} files from ${src} to ${dest}" 1>&2
