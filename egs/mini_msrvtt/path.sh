# shellcheck shell=bash
# Sourced by caption.sh and the recipe scripts, from the recipe directory (egs/<name>/).
# Sets the locale and the Python environment; activates tools/venv when it exists.
MAIN_ROOT=$PWD/../..

# C locale so that "sort" orders ids the same everywhere (Kaldi data-dir rule).
export LC_ALL=C
export PYTHONIOENCODING=UTF-8
# PyTorch's CPU allocator asks for transparent huge pages for tensors of 2 MiB or more: training
# maps its large tensors afresh each step, and faulting them in 2 MiB pages is several times
# cheaper (bench/README.md, "The XE update against its bound"; bench/bench_xe_bound.py).
export THP_MEM_ALLOC_ENABLE=${THP_MEM_ALLOC_ENABLE:-1}

# The virtual environment made by "make demo" / "make test" (tools/venv), if present;
# otherwise the current python3 must have captionlib installed ("pip install -e .").
if [ -f "${MAIN_ROOT}/tools/venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "${MAIN_ROOT}/tools/venv/bin/activate"
fi

# run.pl, slurm.pl, split_scp.pl, ... (egs/<name>/utils -> ../../utils)
export PATH=$PWD/utils:$PATH
