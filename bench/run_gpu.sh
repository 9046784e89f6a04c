#!/usr/bin/env bash
# Every GPU measurement of bench/README.md's "Speed" section, in one command, on one GPU.
#
#   bench/run_gpu.sh [--part bench|pipeline|all] [--out DIR] [--work_dir DIR] [--scale S] [--python PY]
#                    [--data DIR] [--step_timeout SECONDS] [--beats_ref DIR]
#
# --step_timeout: a step that runs longer is stopped and named as failed (default 1800), so that a
#   hung step leaves the others their time on a lent machine.
# --data: the shared data dir (default: the benchmarks' own, ../shared/data beside the repo): clotho_subset and
#   clotho_captions_v2.1 for bench_train, event_library and the captions for the pipeline.
#
# --part bench (about 8 minutes on an H100):
#   1. tests/captionlib/decode/test_cuda_graph.py (the whole loop captured as one CUDA graph) and
#      bench/bench_train.py --device cuda --decode_compile cuda-graph (issue 27's SCST / XE row);
#   2. tests/captionlib/decode/test_compiled.py: the compiled sampling loop (CUDA graphs) against
#      the eager one; its CUDA tests run only here;
#   3. bench/bench_train.py --device cuda --decode_compile reduce-overhead (with
#      TORCH_LOGS=perf_hints: inductor logs "skipping cudagraphs due to ..." where it declines
#      to capture): XE / SCST / REINFORCE+ updates, eager and compiled; if it fails, the eager
#      bench alone;
#   4. bench/bench_rl_phases.py --device cuda --decode_compile reduce-overhead cuda-graph: where the
#      time of an SCST update goes, phase by phase (torch.profiler's tables of cuda-graph in
#      DIR/profile.txt);
#   5. bench/bench_frozen_encoder.py --device cuda;
#   6. with --beats_ref DIR (the authors' beats/ directory of github.com/microsoft/unilm, which
#      captionlib does not hold): bench/compare_beats_authors.py --full, our BEATs against theirs,
#      and our Kaldi fbank against torchaudio's where torchaudio imports (it has no CPU build here).
# --part pipeline: bench/bench_pipeline.py --ngpu 1 --recipe_args "--gpu_inference true --inference_nj 2"
#   (bench/README.md's table; run.pl gives each decoding job the one GPU in turn, so more jobs only add
#   process starts) on a
#   corpus of --scale x Clotho's size (default 0.25; 4 GB of audio at 1.0) made in --work_dir
#   (default DIR/pipeline), stages 1-8 (stage 9's METEOR and PTB
#   tokenizer need Java; add --stop_stage 10 through PIPELINE_ARGS where the node has it).
#
# Each step's output goes to DIR/<step>.txt (default bench/out_gpu); a step that fails is
# named at the end and the script exits 1, the other steps still run.
# Where the node has no internet, install the project's Python packages from wheels first
# (pip download ... --python-version X.Y on a connected machine, pip install --no-index there).
set -uo pipefail
cd "$(dirname "$0")/.."

part=all
out=bench/out_gpu
work_dir=
data=
scale=0.25
python=${PYTHON:-python3}
step_timeout=1800
beats_ref=
while [ $# -gt 0 ]; do
  case "$1" in
    --part) part=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work_dir) work_dir=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --step_timeout) step_timeout=$2; shift 2 ;;
    --beats_ref) beats_ref=$2; shift 2 ;;
    *) echo "$0: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "${part}" in bench|pipeline|all) ;; *) echo "$0: --part must be bench, pipeline or all, got ${part}" >&2; exit 2 ;; esac
if [ -n "${beats_ref}" ] && [ ! -f "${beats_ref}/BEATs.py" ]; then
  echo "$0: --beats_ref ${beats_ref} has no BEATs.py (give the beats/ directory of github.com/microsoft/unilm)" >&2; exit 2
fi
case "${step_timeout}" in ''|*[!0-9]*|0) echo "$0: --step_timeout must be a number of seconds >= 1, got '${step_timeout}'" >&2; exit 2 ;; esac
"${python}" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
  || { echo "$0: ${python} sees no CUDA device (torch.cuda.is_available() is False)" >&2; exit 1; }
mkdir -p "${out}"
failed=()

step() {  # step NAME COMMAND...: run it, its output to ${out}/NAME.txt and the terminal
  local name=$1; shift
  echo "== ${name}: $*"
  local t0=${SECONDS}
  if timeout -k 10 "${step_timeout}" "$@" 2>&1 | tee "${out}/${name}.txt"; then
    echo "== ${name}: done in $((SECONDS - t0)) s"
    return 0
  fi
  echo "== ${name}: FAILED after $((SECONDS - t0)) s (see ${out}/${name}.txt)"
  failed+=("${name}")
  return 1
}

export PYTHONUNBUFFERED=1
if [ "${part}" != pipeline ]; then
  "${python}" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" | tee "${out}/device.txt"
  # issue 27's measurement first (SCST / XE with the captured loop), so that a time limit cuts the others
  step test_cuda_graph "${python}" -m pytest -q -p no:cacheprovider tests/captionlib/decode/test_cuda_graph.py
  step bench_train_cuda_graph "${python}" bench/bench_train.py --device cuda --skip_dump --reps 10 \
    --decode_compile cuda-graph ${data:+--data "${data}"}
  step test_compiled "${python}" -m pytest -q -p no:cacheprovider tests/captionlib/decode/test_compiled.py
  if ! step bench_train env TORCH_LOGS=perf_hints "${python}" bench/bench_train.py --device cuda --skip_dump \
      --reps 10 --decode_compile reduce-overhead ${data:+--data "${data}"}; then
    # without the compiled rows: the eager ones still measure --sample_logprobs recompute
    step bench_train_eager "${python}" bench/bench_train.py --device cuda --skip_dump --reps 10 \
      ${data:+--data "${data}"} && echo "== bench_train: the eager bench ran instead (see bench_train.txt for why)"
  fi
  step bench_rl_phases "${python}" bench/bench_rl_phases.py --device cuda --num_threads 16 --reps 10 \
    --decode_compile reduce-overhead cuda-graph --profile "${out}/profile.txt" ${data:+--data "${data}"}
  step bench_frozen_encoder "${python}" bench/bench_frozen_encoder.py --device cuda
  if [ -n "${beats_ref}" ]; then
    step compare_beats_authors "${python}" bench/compare_beats_authors.py --authors_dir "${beats_ref}" --full \
      ${data:+--data "${data}"}
  fi
fi
if [ "${part}" != bench ]; then
  # shellcheck disable=SC2086
  step bench_pipeline "${python}" bench/bench_pipeline.py --work_dir "${work_dir:-${out}/pipeline}" --scale "${scale}" \
    --ngpu 1 --stop_stage 8 --recipe_args "--gpu_inference true --inference_nj 2" \
    ${data:+--event_root "${data}/event_library" --captions_dir "${data}/clotho_captions_v2.1"} ${PIPELINE_ARGS:-}
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "$0: failed: ${failed[*]}" >&2
  exit 1
fi
