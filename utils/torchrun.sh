#!/usr/bin/env bash
# Launch a captionbin training binary data-parallel with torchrun (torch.distributed.run).
#
# Usage: utils/torchrun.sh [--python python3] [--nproc_per_node N] [--num_nodes M] [--port P] \
#            -m captionbin.caption_train [args...]
#
#   one node  (M = 1): python -m torch.distributed.run --standalone --nproc_per_node N -m ...
#                      (a free local port for the rendezvous, so runs do not collide);
#   M nodes   (M > 1): inside a SLURM allocation of M nodes (slurm.pl --num_nodes M), one
#                      torchrun per node through srun, rendezvous (c10d) on the first node's
#                      port P, rendezvous id = the SLURM job id.
# N ranks per node: one per GPU with --ngpu N in the binary's arguments, or N CPU ranks
# (gloo) with --ngpu 0. The binary runs each rank; see captionlib/utils/distributed.py.
# Exit status: torchrun's (non-zero when any rank failed; the other ranks are stopped).
set -euo pipefail

python=python3
nproc_per_node=1
num_nodes=1
port=29500
while [ $# -gt 0 ]; do
    case "$1" in
        --python) python=$2; shift 2 ;;
        --nproc_per_node|--nproc-per-node) nproc_per_node=$2; shift 2 ;;
        --num_nodes|--num-nodes) num_nodes=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
for _v in nproc_per_node num_nodes port; do
    case "${!_v}" in ''|*[!0-9]*|0) echo "$0: --${_v} must be a positive integer, got '${!_v}'" >&2; exit 2 ;; esac
done
[ $# -gt 0 ] || { echo "$0: no command given (e.g. -m captionbin.caption_train ...)" >&2; exit 2; }

if [ "${num_nodes}" -eq 1 ]; then
    # shellcheck disable=SC2086
    exec ${python} -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node "${nproc_per_node}" "$@"
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
head_node=$(scontrol show hostnames "${SLURM_JOB_NODELIST}" | head -n 1)
# shellcheck disable=SC2086
exec srun --nodes "${num_nodes}" --ntasks "${num_nodes}" --ntasks-per-node 1 \
    ${python} -m torch.distributed.run --nnodes "${num_nodes}" --nproc_per_node "${nproc_per_node}" \
        --rdzv_id "${SLURM_JOB_ID}" --rdzv_backend c10d --rdzv_endpoint "${head_node}:${port}" "$@"
