# shellcheck shell=bash
# Sourced by caption.sh and the recipe scripts, from the recipe directory (egs/<name>/).
# Sets the locale and the Python environment; activates tools/venv when it exists.
MAIN_ROOT=$PWD/../..

# C locale so that "sort" orders ids the same everywhere (Kaldi data-dir rule).
export LC_ALL=C
export PYTHONIOENCODING=UTF-8

# The virtual environment made by "make demo" / "make test" (tools/venv), if present;
# otherwise the current python3 must have captionlib installed ("pip install -e .").
if [ -f "${MAIN_ROOT}/tools/venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "${MAIN_ROOT}/tools/venv/bin/activate"
fi

# run.pl, slurm.pl, split_scp.pl, ... (egs/<name>/utils -> ../../utils)
export PATH=$PWD/utils:$PATH
