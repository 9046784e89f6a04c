#!/usr/bin/env bash

# Create a new recipe directory egs/<name>/ from this template:
#   copies:   path.sh cmd.sh db.sh conf/slurm.conf (cmd.sh and conf/slurm.conf must stay identical)
#   symlinks: caption.sh -> ../TEMPLATE/caption.sh, scripts -> ../TEMPLATE/scripts, utils -> ../../utils
#   stubs:    run.sh (thin, edit the sets and configs) and local/ (write local/data.sh there)
set -euo pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

help_message="Usage: $0 <egs/new-recipe-dir>
e.g.
  $0 egs/audiocaps
The new directory must be a sibling of egs/TEMPLATE and must not exist yet."

log "$0 $*"
if [ $# -eq 1 ] && { [ "$1" = --help ] || [ "$1" = -h ]; }; then
    echo "${help_message}" 1>&2
    exit 0
fi
if [ $# -ne 1 ]; then
    echo "${help_message}" 1>&2
    exit 1
fi
dir=${1%/}

if [ -e "${dir}" ]; then
    log "Error: ${dir} already exists"
    exit 1
fi
mkdir -p "${dir}"
if [ ! -f "${dir}/../TEMPLATE/caption.sh" ] || [ ! -d "${dir}/../../utils" ]; then
    rmdir "${dir}"
    log "Error: ${dir}/../TEMPLATE/caption.sh and ${dir}/../../utils must exist (give egs/<name>)"
    exit 1
fi

template=${dir}/../TEMPLATE
# Copies
mkdir -p "${dir}/conf" "${dir}/local"
for f in path.sh cmd.sh db.sh conf/slurm.conf; do
    cp "${template}/${f}" "${dir}/${f}"
done
# Symlinks (relative, inside the repository)
ln -s ../TEMPLATE/caption.sh "${dir}/caption.sh"
ln -s ../TEMPLATE/scripts "${dir}/scripts"
ln -s ../../utils "${dir}/utils"

# A thin run.sh to edit
cat > "${dir}/run.sh" << 'EOF'
#!/usr/bin/env bash
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# TODO: write local/data.sh (data/<split>/ per egs/TEMPLATE/README.md) and the conf/*.yaml files.
train_sets="train"
valid_set="valid"
test_sets="test"

exec ./caption.sh \
    --train_sets "${train_sets}" \
    --valid_set "${valid_set}" \
    --test_sets "${test_sets}" \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --decode_config conf/decode.yaml \
    "$@"
EOF
chmod +x "${dir}/run.sh"

log "Created ${dir}: now write ${dir}/local/data.sh, ${dir}/conf/*.yaml and edit ${dir}/run.sh"
log "Successfully finished. [elapsed=${SECONDS}s]"
