#!/usr/bin/env bash
# Launch a captionbin training binary data-parallel with torchrun (torch.distributed.run).
#
# Usage: utils/torchrun.sh [--nproc_per_node N] [--num_nodes M] [--port P] \
#            <python command...> -m captionbin.caption_train [args...]
#   e.g. utils/torchrun.sh --nproc_per_node 2 python3 -m captionbin.caption_train --config ...
#
#   one node  (M = 1): <python> -m torch.distributed.run --standalone --nproc_per_node N -m ...
#                      (a free local port for the rendezvous, so runs do not collide);
#   M nodes   (M > 1): inside a SLURM allocation of M nodes (slurm.pl --num_nodes M), one
#                      torchrun per node through srun, rendezvous (c10d) on the first node's
#                      port P (default 29500 + SLURM job id modulo 1000), id = the job id.
# The python command may be several words (e.g. "coverage run"); it ends before "-m".
# N ranks per node: one per GPU with --ngpu N in the binary's arguments, or N CPU ranks
# (gloo) with --ngpu 0. The binary runs each rank; see captionlib/utils/distributed.py.
# Exit status: torchrun's (non-zero when any rank failed; the other ranks are stopped).
set -euo pipefail

nproc_per_node=1
num_nodes=1
port=
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --nproc_per_node|--nproc-per-node|--num_nodes|--num-nodes|--port)
            [ $# -ge 2 ] || { echo "$0: $1 needs a value" >&2; exit 2; }
            _name=${1#--}
            _name=${_name//-/_}
            printf -v "${_name}" '%s' "$2"
            shift 2 ;;
        *) break ;;
    esac
done
for _v in nproc_per_node num_nodes; do
    case "${!_v}" in ''|*[!0-9]*|0) echo "$0: --${_v} must be a positive integer, got '${!_v}'" >&2; exit 2 ;; esac
done
python=()
while [ $# -gt 0 ] && [ "$1" != -m ]; do
    python+=("$1")
    shift
done
if [ ${#python[@]} -eq 0 ] || [ $# -lt 2 ]; then
    echo "$0: expected <python command...> -m <module> [args...] (e.g. python3 -m captionbin.caption_train ...)" >&2
    exit 2
fi

if [ "${num_nodes}" -eq 1 ]; then
    exec "${python[@]}" -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node "${nproc_per_node}" "$@"
fi

if [ -z "${SLURM_JOB_NODELIST:-}" ] || ! command -v srun > /dev/null; then
    echo "$0: --num_nodes ${num_nodes} needs a SLURM allocation of ${num_nodes} nodes" \
         "(cmd_backend=slurm in cmd.sh; slurm.pl maps --num_nodes to sbatch --nodes)" >&2
    exit 1
fi
if [ "${SLURM_NNODES:-1}" -ne "${num_nodes}" ]; then
    echo "$0: --num_nodes ${num_nodes} but the SLURM job has ${SLURM_NNODES:-1} nodes (${SLURM_JOB_NODELIST})" >&2
    exit 1
fi
port=${port:-$((29500 + ${SLURM_JOB_ID:-0} % 1000))}
case "${port}" in ''|*[!0-9]*) echo "$0: --port must be a port number, got '${port}'" >&2; exit 2 ;; esac
head_node=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)
# srun steps do not inherit the job's --cpus-per-task (Slurm >= 22.05): pass it on
exec srun --nodes "${num_nodes}" --ntasks "${num_nodes}" --ntasks-per-node 1 \
    --cpus-per-task "${SLURM_CPUS_PER_TASK:-1}" \
    "${python[@]}" -m torch.distributed.run --nnodes "${num_nodes}" --nproc_per_node "${nproc_per_node}" \
        --rdzv_id "${SLURM_JOB_ID}" --rdzv_backend c10d --rdzv_endpoint "${head_node}:${port}" "$@"
