# shellcheck shell=bash
# ====== About run.pl, slurm.pl, and stdout.pl ======
# The job wrappers in utils/ share one command-line contract (Kaldi's):
#
#   <wrapper> [options] [JOB=1:N] <log-file> <command...>
#
# e.g.  run.pl --mem 4G JOB=1:4 exp/x/log/decode.JOB.log python3 -m captionbin.caption_decode --feats_scp keys.JOB.scp
#
# "JOB" in <log-file> and <command> is replaced by 1..N and the N jobs run in parallel; each
# job's log starts with the command and ends with its exit code, and the wrapper exits non-zero
# (naming the failed logs) if any job fails. Options understood by every wrapper:
#   --gpu N, --mem X, --num_threads N, --time T, --max_jobs_run N
# run.pl honours --max_jobs_run and gives each job its own --gpu N of the visible GPUs
# (CUDA_VISIBLE_DEVICES); slurm.pl maps every option to sbatch options through
# conf/slurm.conf, the only place for site specifics.
#
# train_cmd: CPU jobs (feature dump, statistics, scoring)
# cuda_cmd:  training (caption.sh adds "--gpu ${ngpu}") and, with --gpu_inference true, decoding ("--gpu 1")
# decode_cmd: decoding jobs on the CPU
#
# This file is identical in every recipe (CI compares it with egs/TEMPLATE/cmd.sh): change
# cmd_backend locally, do not commit a site backend.

# Select the backend used by caption.sh from "local", "stdout" and "slurm".
cmd_backend='local'

if [ "${cmd_backend}" = local ]; then
    # Runs the jobs on this machine.
    export train_cmd="run.pl"
    export cuda_cmd="run.pl"
    export decode_cmd="run.pl"

elif [ "${cmd_backend}" = stdout ]; then
    # Like local, but also prints each job's output to the terminal.
    export train_cmd="stdout.pl"
    export cuda_cmd="stdout.pl"
    export decode_cmd="stdout.pl"

elif [ "${cmd_backend}" = slurm ]; then
    # Submits the jobs with sbatch (job arrays) and waits for them; see conf/slurm.conf.
    export train_cmd="slurm.pl --config conf/slurm.conf"
    export cuda_cmd="slurm.pl --config conf/slurm.conf"
    export decode_cmd="slurm.pl --config conf/slurm.conf"

else
    echo "$0: Error: Unknown cmd_backend=${cmd_backend}" 1>&2
    return 1
fi
