#!/usr/bin/env bash
# make demo: this recipe with XE and SCST only (./run.sh trains all six RL objectives; make
# demo-all runs them all), then the packed SCST model's path and a command, to run from the
# repository root, that captions the shipped clips with it. It scores only the evaluation clip:
# run.sh also tests on validation, one of its training sets (caption.sh warns of that).
# Usage: ./demo.sh [run.sh options]   or   ./demo.sh --print_only (the last lines alone)
set -euo pipefail
cd "$(dirname "$0")"

if [ "${1:-}" != --print_only ]; then
    ./run.sh --rl_algo scst --test_sets evaluation "$@"
    echo
    cat RESULTS.md
fi
# (|| true: with none yet, pipefail would end the script before the message below)
model=$(ls exp/xe_*/scst_*/packed/valid.cider_d.best.zip 2>/dev/null | head -n 1 || true)
if [ -z "${model}" ]; then
    echo "no packed SCST model under egs/mini_clotho/exp (run make demo first)" 1>&2
    exit 1
fi
echo
echo "The SCST model, packed: egs/mini_clotho/${model}"
echo "Caption the shipped clips with it (from the repository root):"
echo "    tools/venv/bin/caption_infer --model egs/mini_clotho/${model} egs/mini_clotho/clotho_fixture/"
