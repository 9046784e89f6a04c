# shellcheck shell=bash
# Sourced by egs/<recipe>/run.sh for "./run.sh --help": the recipe's own usage and options first
# (on stderr); caption.sh then prints the pipeline's options, with the values the run.sh sets.

# recipe_usage <summary> [<options text>]: print the recipe's part of the help
recipe_usage() {
    printf 'Usage: ./run.sh [options]   (egs/%s: %s)\n\n%s\n\n%s\n%s\n\n' "$(basename "${PWD}")" "$1" \
        "${2:-This run.sh has no options of its own.}" \
        "Every option of the pipeline (caption.sh, below) works too, e.g. --ngpu 1, --stage N --stop_stage M," \
        "--rl_algo \"scst sle\"; its defaults below are the values this run.sh sets." 1>&2
}

# recipe_help <summary> <options text> <arguments...>: recipe_usage when the arguments hold --help or -h
recipe_help() {
    local _summary=$1 _options=$2 _arg
    shift 2
    for _arg in "$@"; do
        case "${_arg}" in --help|-h) recipe_usage "${_summary}" "${_options}"; return ;; esac
    done
}
