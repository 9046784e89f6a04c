#!/usr/bin/env bash
# Usage: . utils/parse_options.sh    (sourced by a script, after it has set its default variables)
#
# Parses "--name value" options from the caller's positional arguments and leaves the
# remaining (positional) arguments in "$@".
#
#   --a-b v  and  --a_b v   both set the shell variable a_b=v; a_b must already exist
#                           (the caller defines its defaults first), otherwise the
#                           option is rejected as "invalid option".
#   boolean check           if the old value is true/false, the new one must be true/false.
#   --x=y                   rejected: write "--x y".
#   --help, -h              prints $help_message (to stderr) and exits 0.
#   --config FILE           sources the shell file FILE (name=value lines) before the
#                           other options are applied, so the command line wins.
#   --                      ends option parsing.
# Parsing stops at the first argument that does not start with "--".
# Works under "set -euo pipefail".  Helper variables are prefixed "__po_" and unset.

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "Usage: . utils/parse_options.sh   (source it from a script after setting its defaults;" 1>&2
  echo "       see the comments at the top of ${BASH_SOURCE[0]})" 1>&2
  exit 1
fi
__po_prog="${0##*/}"

# First pass: source --config files (in order) so that command-line options override them.
__po_prev=""
for __po_arg in "$@"; do
  if [ -n "${__po_prev}" ]; then
    # __po_arg is the value of option ${__po_prev}
    if [ "${__po_prev}" = "--config" ]; then
      if [ ! -f "${__po_arg}" ]; then
        echo "${__po_prog}: config file '${__po_arg}' not found" 1>&2
        exit 1
      fi
      # shellcheck disable=SC1090
      . "${__po_arg}"
    fi
    __po_prev=""
    continue
  fi
  case "${__po_arg}" in
    --help | --*=* | --) break ;;
    --*) __po_prev="${__po_arg}" ;;
    *) break ;;
  esac
done
if [ "${__po_prev}" = "--config" ]; then
  echo "${__po_prog}: option --config requires a value" 1>&2
  exit 1
fi

# Second pass: apply the options.
while [ $# -gt 0 ]; do
  case "$1" in
    --help | -h)
      if [ -n "${help_message:-}" ]; then
        printf '%s\n' "${help_message}" 1>&2
      else
        echo "${__po_prog}: no help message available" 1>&2
      fi
      exit 0
      ;;
    --)
      shift
      break
      ;;
    --*=*)
      echo "${__po_prog}: options of the form '$1' (--name=value) are not supported; use '--name value'" 1>&2
      exit 1
      ;;
    --config)
      shift 2
      ;;
    --*)
      __po_name="${1#--}"
      __po_name="${__po_name//-/_}"
      if ! [[ "${__po_name}" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || [[ "${__po_name}" == __po_* ]]; then
        echo "${__po_prog}: invalid option $1" 1>&2
        exit 1
      fi
      if ! declare -p "${__po_name}" > /dev/null 2>&1; then
        echo "${__po_prog}: invalid option $1 (no variable '${__po_name}' is defined)" 1>&2
        exit 1
      fi
      if [ $# -lt 2 ]; then
        echo "${__po_prog}: option $1 requires a value" 1>&2
        exit 1
      fi
      __po_old="${!__po_name:-}"
      if [ "${__po_old}" = "true" ] || [ "${__po_old}" = "false" ]; then
        if [ "$2" != "true" ] && [ "$2" != "false" ]; then
          echo "${__po_prog}: option $1 is boolean: expected 'true' or 'false', got '$2'" 1>&2
          exit 1
        fi
      fi
      printf -v "${__po_name}" '%s' "$2"
      shift 2
      ;;
    *)
      break
      ;;
  esac
done

unset __po_prog __po_prev __po_arg __po_name __po_old
true
