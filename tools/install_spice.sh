#!/usr/bin/env bash
# Install what SPICE (pycocoevalcap's spice-1.0.jar) needs on Java 17:
#   1. the Stanford CoreNLP 3.6.0 jars stanford-corenlp-3.6.0.jar and
#      stanford-corenlp-3.6.0-models.jar, extracted from the official release archive
#      stanford-corenlp-full-2015-12-09.zip into <dir> (default: tools/spice_lib);
#   2. Debian's librhino-java (a JavaScript engine; Java >= 15 has none), with apt-get.
# Then score with:  caption_score ... --spice_lib_dir <dir>   (or export CAPTIONLIB_SPICE_LIB=<dir>)
#
# Checksum: the SHA-1 below (55c9d653eb30ace7d5a60eb3138e424f9442e539) is the value a
# third-party install script records for stanford-corenlp-full-2015-12-09.zip. We could
# NOT confirm it against a Stanford-published checksum (none is published next to the
# archive, and the archive could not be downloaded where this script was written).
# If the check fails on an archive you trust, set CORENLP_SHA1 to its SHA-1 (or to
# "skip" to disable the check, at your own risk).
set -euo pipefail

help_message="Usage: $0 [--skip_rhino true|false] [<dir>]
  Downloads Stanford CoreNLP 3.6.0 (about 400 MB) and extracts the two jars SPICE needs
  into <dir> (default: tools/spice_lib), then apt-get installs librhino-java.
  Env: CORENLP_URL (archive URL), CORENLP_SHA1 (expected SHA-1 or 'skip')."

skip_rhino=false
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) echo "${help_message}"; exit 0 ;;
    --skip_rhino) skip_rhino="$2"; shift 2 ;;
    --*) echo "$0: unknown option $1" >&2; echo "${help_message}" >&2; exit 1 ;;
    *) break ;;
  esac
done
[ $# -le 1 ] || { echo "${help_message}" >&2; exit 1; }

tools_dir="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-${tools_dir}/spice_lib}"
name=stanford-corenlp-full-2015-12-09
url="${CORENLP_URL:-https://nlp.stanford.edu/software/${name}.zip}"
sha1="${CORENLP_SHA1:-55c9d653eb30ace7d5a60eb3138e424f9442e539}"
jars="stanford-corenlp-3.6.0.jar stanford-corenlp-3.6.0-models.jar"

log() { echo "$(date '+%Y-%m-%dT%H:%M:%S') ($(basename "$0")) $*"; }

mkdir -p "${dest}"
have_all=true
for j in ${jars}; do [ -s "${dest}/${j}" ] || have_all=false; done
if ${have_all}; then
  log "CoreNLP 3.6.0 jars already in ${dest}"
else
  tmpdir="$(mktemp -d)"
  trap 'rm -rf "${tmpdir}"' EXIT
  log "Downloading ${url}"
  if ! curl -fL --retry 3 --connect-timeout 30 -o "${tmpdir}/${name}.zip" "${url}"; then
    echo "ERROR: could not download ${url} (offline?). Fetch ${name}.zip on a machine with" >&2
    echo "       network access, then copy ${jars} from it into ${dest}." >&2
    exit 1
  fi
  if [ "${sha1}" != skip ]; then
    got="$(sha1sum "${tmpdir}/${name}.zip" | cut -d' ' -f1)"
    if [ "${got}" != "${sha1}" ]; then
      echo "ERROR: SHA-1 of ${name}.zip is ${got}, expected ${sha1} (see the note at the top of $0)." >&2
      exit 1
    fi
    log "SHA-1 ok (${sha1})"
  else
    log "WARNING: checksum check skipped (CORENLP_SHA1=skip)"
  fi
  for j in ${jars}; do
    unzip -q -o -j "${tmpdir}/${name}.zip" "${name}/${j}" -d "${dest}"
  done
  log "Extracted ${jars} into ${dest}"
fi

if [ "${skip_rhino}" != true ]; then
  if [ -f /usr/share/java/rhino.jar ]; then
    log "librhino-java already installed"
  else
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
    log "Installing librhino-java with apt-get"
    if ! { ${sudo_cmd} apt-get update && ${sudo_cmd} apt-get install -y librhino-java; }; then
      echo "ERROR: apt-get install librhino-java failed (offline, or not Debian/Ubuntu?)." >&2
      echo "       Install a Rhino jar and set CAPTIONLIB_RHINO_JAR to its path." >&2
      exit 1
    fi
  fi
fi
log "Done. Use: --spice_lib_dir ${dest}   (or export CAPTIONLIB_SPICE_LIB=${dest})"
