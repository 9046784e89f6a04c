#!/usr/bin/env bash
# split_data.sh: split a captionlib data (or dump) directory into N parts, by clip by default.
set -euo pipefail

# Where the clip list is read from: the first of these present.
clip_lists="spk2utt wav.scp image.scp video.scp clip2id feats.scp"
usage() {
  cat 1>&2 << EOF2
Usage: split_data.sh [--per-utt] <data-dir> <num-to-split>
Writes <data-dir>/split<N>/{1..N}/ (split<N>utt/ with --per-utt), each a data directory made
by utils/subset_data_dir.sh. By default the clips are split, so all captions of a clip land in
the same part; the clips are the keys of the first present of
  ${clip_lists}
--per-utt splits the captions (utt2spk) instead, so a clip may appear in several parts.
EOF2
  exit 1
}
per_utt=false
while [ $# -gt 0 ]; do
  case "$1" in
    --per-utt | --per_utt) per_utt=true; shift ;;
    -h | --help) usage ;;
    --*) echo "split_data.sh: unknown option $1" 1>&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
data=${1%/}
nj=$2
utils=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LC_ALL=C
if ! [[ "${nj}" =~ ^[0-9]+$ ]] || [ "${nj}" -le 0 ]; then
  echo "split_data.sh: <num-to-split> must be a positive integer, got '${nj}'" 1>&2
  exit 1
fi
[ -d "${data}" ] || { echo "split_data.sh: no such directory ${data}" 1>&2; exit 1; }

if ${per_utt}; then
  [ -f "${data}/utt2spk" ] || { echo "split_data.sh: --per-utt needs ${data}/utt2spk" 1>&2; exit 1; }
  list="${data}/utt2spk"; opt=--utt-list; out="${data}/split${nj}utt"
else
  list=""
  for f in ${clip_lists}; do
    if [ -f "${data}/${f}" ]; then list="${data}/${f}"; break; fi
  done
  [ -n "${list}" ] || { echo "split_data.sh: ${data} has none of ${clip_lists}" 1>&2; exit 1; }
  opt=--spk-list; out="${data}/split${nj}"
fi
mkdir -p "${out}"
lists=()
for n in $(seq "${nj}"); do
  mkdir -p "${out}/${n}"
  lists+=("${out}/${n}/.list")
done
"${utils}/split_scp.pl" "${list}" "${lists[@]}"
for n in $(seq "${nj}"); do
  "${utils}/subset_data_dir.sh" "${opt}" "${out}/${n}/.list" "${data}" "${out}/${n}" 2> /dev/null
  rm -f "${out}/${n}/.list"
done
echo "split_data.sh: wrote ${nj} parts in ${out}" 1>&2
