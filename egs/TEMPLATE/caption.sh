#!/usr/bin/env bash
# shellcheck disable=SC1091,SC2154  # sources path.sh/cmd.sh relative to the recipe; *_cmd come from cmd.sh

# The one staged captioning pipeline (ESPnet2 asr.sh order). Recipes call it from a thin run.sh:
#   ./caption.sh --train_sets "development" --valid_set validation --test_sets "evaluation" ... "$@"
# Orchestration only: every stage body calls one script or one captionbin binary.

# Set bash to 'debug' mode, it will exit on:
# -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -e
set -u
set -o pipefail

log() {
    local fname=${BASH_SOURCE[1]##*/}
    echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"
}
SECONDS=0

# General configuration
stage=1              # Processes starts from the specified stage.
stop_stage=10000     # Processes is stopped at the specified stage.
skip_data_prep=false # Skip data preparation stages (0-4).
skip_train=false     # Skip training stages (5-7).
skip_eval=false      # Skip decoding and evaluation stages (8-9).
ngpu=                # The number of gpus ("0" uses cpu; empty: 1 if torch sees a GPU, else 0).
nproc_per_node=      # Training processes per node (empty: ngpu when > 1, else 1); > 1: torchrun DDP.
num_nodes=1          # The number of nodes for training (> 1: torchrun on a SLURM allocation).
nj=4                 # The number of parallel jobs (feature dump).
inference_nj=4       # The number of parallel jobs in decoding.
score_nj=2           # Scoring jobs run at once (stage 9, a decode dir each; METEOR's JVM takes up to 2 GiB, SPICE's 8).
python=python3       # Python command; binaries run as "${python} -m captionbin.<name>".
dumpdir=dump         # Directory to dump features.
expdir=exp           # Directory to save experiments.

# Data preparation related
local_data_opts= # The options given to local/download.sh (or local/generate.sh) and local/data.sh; quote a value with spaces: "--clotho_root '/data/my clotho'".

# Feature extraction related
feats_type=logmel # Feature type (names dump/<feats_type>[_<feats_config name>]/): logmel (audio, wav.scp), pretrained (a frozen pretrained audio encoder's frame outputs, wav.scp), cnn (CNN features of image.scp/video.scp), import (precomputed features of the clips in clip2id, or of the audio files in wav.scp).
feats_config=     # Feature config (e.g. conf/feats_logmel.yaml).
feats_filetype=ark # Feature file type: ark or hdf5.

# Tokenization related
token_type=word # Tokenization type: word or bpe.
min_count=1     # Minimum count of a word in the train captions to enter the vocabulary.
nbpe=1000       # The number of BPE units (token_type=bpe).

# Word2Vec related (seed 000 CRNN-W)
word2vec=false  # Train Word2Vec on the train captions (stage 3) and initialise the decoder embeddings with it (stage 5).
word2vec_args=  # Extra arguments for caption_train_word2vec, e.g. "--epochs 20 --vector_size 256".

# Audio tagging pretraining of the encoder (before XE)
tagging_config= # Config of caption_pretrain_tagging (e.g. conf/pretrain_tagging_cnn10.yaml); empty: none. Stage 5 first writes ${expdir}/<config name>/pretrained.pth, which the XE config loads with encoder_conf.pretrained.
tagging_args=   # Extra arguments for caption_pretrain_tagging, e.g. "--max_epoch 5".

# XE training related
xe_tag=     # Suffix of the XE experiment directory (empty: derived from config and args).
xe_config=  # Config for XE training (e.g. conf/train_xe.yaml).
xe_args=    # Extra arguments for caption_train, e.g. "--max_epoch 3".

# RL fine-tuning related
rl_algo=scst # RL algorithm(s), space-separated (e.g. "scst"); empty: no RL stage.
rl_config=   # Config for RL training (empty: conf/train_<algo>.yaml).
rl_args=     # Extra arguments for caption_rl_train.
rl_init_tag= # Start RL from this RL experiment of the XE dir (its ${inference_model}) instead of the XE model: staged training, e.g. seed 004's XE -> REINFORCE+ -> multitask.

# Training seeds
seeds= # Seeds, space-separated (e.g. "0 1 2"): stages 5-9 run once per seed into <tag>_seed<N> dirs (--seed N) and RESULTS.md shows mean ± std; empty: one run with the configs' seed.

# Checkpoint averaging related
nbest_average=0 # Average the N best checkpoints by the metric they were kept by (the training's best_model_criterion) into valid.<metric>.ave_Nbest.pth (stage 7 runs only when > 0).

# Decoding related
decode_tag=    # Suffix of the decode directory (empty: derived from config, args and model).
decode_config= # Config for decoding (e.g. conf/decode.yaml).
decode_args=   # Extra arguments for caption_decode, e.g. "--beam_size 3".
gpu_inference=false # Decode on a GPU: each of the --inference_nj jobs runs with --ngpu 1 under ${cuda_cmd}.
inference_model=valid.cider_d.best.pth # Model file (in the model dir) used for decoding.
xe_inference_model= # Model file of the XE dirs: RL init (stage 6), XE decodes and ensemble members; empty: ${inference_model}.
num_diversity_samples=5 # Sampled captions per clip for Div-1/Div-2/mBLEU-4 and CIDEr-D (samples) (seed 001); 0: none.
diversity_nbest= # N-best beam hypotheses per clip (a beam of width max(beam_size, N)) for Div-1/Div-2/mBLEU-4 (beams) (seed 001); 0: none; empty: --num_diversity_samples.

# Ensemble related (seed 000 CRNN-E)
ensemble_models= # Model files decoded as one word-level ensemble, space-separated; "all": the model file of every model dir of this run; "{seed_suffix}" in a path makes one ensemble per seed (replaced by _seed<N>, or by nothing without --seeds).
ensemble_tag=    # Name of the ensemble dir under ${expdir} (empty: derived from the model files; with --seeds: ensemble_seed<N>).

# Reference rows
corpus_prior=false # Also score the corpus prior: the most frequent training caption given to every clip (exp/corpus_prior).

# Scoring related
metrics=bleu,meteor,rouge_l,cider_d,spice,spider # Metrics given to caption_score.
results_compare= # Pairs <baseline>=<model> of RESULTS.md models (seed-group names) also compared by the paired bootstrap (caption_results --compare).
spice_lib_dir= # Directory with the Stanford CoreNLP jars SPICE needs (empty: caption_score's default).
fluency_model= # Fluency error detector of --metrics ...,fluency (caption_train_fluency; empty: the rule checks alone).

# [Task dependent] Set the datadir name created by local/data.sh
train_sets=  # Training split(s), space-separated; several are combined into data/train_<a>_<b>.
valid_set=   # Validation set.
test_sets=   # Test sets, space-separated.
xe_test_sets= # More test sets decoded and scored with the XE model(s) only (e.g. control sets), space-separated.

# set_help_message: help_message from the options' current values, so that "./run.sh --help" shows
# the values the recipe's run.sh sets (it passes its options before --help), not only caption.sh's
set_help_message() {
help_message=$(cat << EOF
Usage: $0 --train_sets "<train_split(s)>" --valid_set "<valid_set>" --test_sets "<test_sets>"

Stages:
    0: download or generate the corpus (local/download.sh or local/generate.sh, if the recipe has one)
    1: data prep (local/data.sh)
    2: feature dump   3: token list (+ Word2Vec)   4: statistics (CMVN, CIDEr-D df)   5: XE training
    6: RL fine-tuning   7: checkpoint averaging   8: decoding (+ samples, ensemble)   9: scoring, RESULTS.md
    10: pack each model dir's inference model into <model_dir>/packed/<model stem>.zip (caption_pack; logmel, pretrained and
        cnn features, not import), for captionbin.caption_infer on audio, image or video files

Options:
    # General configuration
    --stage          # Processes starts from the specified stage (default="${stage}").
    --stop_stage     # Processes is stopped at the specified stage (default="${stop_stage}").
    --skip_data_prep # Skip data preparation stages 0-4 (default="${skip_data_prep}").
    --skip_train     # Skip training stages 5-7 (default="${skip_train}").
    --skip_eval      # Skip decoding and evaluation stages 8-9 (default="${skip_eval}").
    --ngpu           # The number of gpus; empty: autodetect 0/1 (default="${ngpu}").
    --nproc_per_node # Training processes per node; empty: ngpu when > 1, else 1 (default="${nproc_per_node}").
                     # More than one process (or node) runs stages 5-6 data-parallel through
                     # utils/torchrun.sh: one rank per GPU, or CPU ranks (gloo) with --ngpu 0.
    --num_nodes      # The number of nodes for training; > 1 needs cmd_backend=slurm (default="${num_nodes}").
    --nj             # The number of parallel jobs (default="${nj}").
    --inference_nj   # The number of parallel jobs in decoding (default="${inference_nj}").
    --score_nj       # Scoring jobs run at once in stage 9, one decode dir each; a JVM each for METEOR
                     # (up to 2 GiB) and SPICE (up to 8 GiB) (default="${score_nj}").
    --python         # Python command (default="${python}").
    --dumpdir        # Directory to dump features (default="${dumpdir}").
    --expdir         # Directory to save experiments (default="${expdir}").

    # Data preparation related
    --local_data_opts # The options given to local/download.sh or local/generate.sh, and local/data.sh; quote values
                      # with spaces, as in a shell: "--clotho_root '/data/my clotho'" (default="${local_data_opts}").

    # Feature extraction related
    --feats_type     # Feature type: logmel (wav.scp), pretrained (the frame outputs of a frozen pretrained
                     # audio encoder, e.g. conf/feats_pretrained_convnext.yaml; wav.scp), cnn (image.scp or
                     # video.scp) or import (precomputed features of the clips in clip2id, or of the audio files in wav.scp:
                     # embeddings of BEATs, EAT, CLAP...; see scripts/dump_feats.sh) (default="${feats_type}").
    --feats_config   # Feature config, required (default="${feats_config}").
    --feats_filetype # Feature file type: ark or hdf5 (default="${feats_filetype}").

    # Tokenization related
    --token_type # Tokenization type: word or bpe (default="${token_type}").
    --min_count  # Minimum word count for the vocabulary (default="${min_count}").
    --nbpe       # The number of BPE units (default="${nbpe}").

    # Word2Vec related (seed 000 CRNN-W)
    --word2vec      # Word2Vec-initialised decoder embeddings; the XE dir gets a _w2v suffix (default="${word2vec}").
    --word2vec_args # Extra arguments for caption_train_word2vec (default="${word2vec_args}").

    # Audio tagging pretraining of the encoder (before XE, in stage 5)
    --tagging_config # Config of caption_pretrain_tagging; empty: none. Writes \${expdir}/<config name>/pretrained.pth,
                     # named by the XE config's encoder_conf.pretrained (default="${tagging_config}").
    --tagging_args   # Extra arguments for caption_pretrain_tagging (default="${tagging_args}").

    # XE training related
    --xe_tag    # Suffix of the XE experiment directory (default="${xe_tag}").
    --xe_config # Config for XE training, required (default="${xe_config}").
    --xe_args   # Extra arguments for caption_train, e.g. "--decoder_conf dropout=0.5" (one key of the config's
                # mapping); every --*_args is split as a shell splits words, quotes included (default="${xe_args}").

    # RL fine-tuning related
    --rl_algo   # RL algorithm(s), space-separated (default="${rl_algo}").
    --rl_config # Config for RL training; empty: conf/train_<algo>.yaml (default="${rl_config}").
    --rl_args   # Extra arguments for caption_rl_train (default="${rl_args}").
    --rl_init_tag # Start RL from <xe dir>/<rl_init_tag>[_seedN]/${inference_model} instead of the XE model; the new RL dir nests
                  # there (staged training, e.g. seed 004: XE -> REINFORCE+ frozen encoder -> multitask) (default="${rl_init_tag}").

    # Training seeds
    --seeds # Seeds, e.g. "0 1 2": stages 5-9 once per seed into <tag>_seed<N> dirs; RESULTS.md gives mean ± std (default="${seeds}").

    # Checkpoint averaging related
    --nbest_average # Average the N best checkpoints by the training's best_model_criterion into
                    # valid.<metric>.ave_Nbest.pth; 0 skips stage 7 (default="${nbest_average}").

    # Decoding related
    --decode_tag      # Suffix of the decode directory (default="${decode_tag}").
    --decode_config   # Config for decoding, required (default="${decode_config}").
    --decode_args     # Extra arguments for caption_decode (default="${decode_args}").
    --gpu_inference   # Decode on GPUs: each job gets one under \${cuda_cmd} --gpu 1 (run.pl: its own visible GPU) (default="${gpu_inference}").
    --inference_model # Model file used for decoding (default="${inference_model}").
    --xe_inference_model # Model file of the XE dirs for RL init, XE decodes and ensembles; empty: --inference_model
                         # (seed 000 selects XE models by BLEU-4: valid.bleu_4.best.pth) (default="${xe_inference_model}").
    --num_diversity_samples # Sampled captions per clip for Div-1/Div-2/mBLEU-4 and CIDEr-D (samples); 0: none (default="${num_diversity_samples}").
    --diversity_nbest # N-best beam hypotheses per clip for Div-1/Div-2/mBLEU-4 (beams); 0: none; empty: --num_diversity_samples (default="${diversity_nbest}").

    # Ensemble related (seed 000 CRNN-E)
    --ensemble_models # Model files decoded as a word-level ensemble into \${expdir}/<ensemble_tag>;
                      # "all" = the model file of every model dir of this run; "{seed_suffix}" in a path makes
                      # one ensemble per seed: replaced by _seed<N> (nothing without --seeds) (default="${ensemble_models}").
    --ensemble_tag    # Ensemble dir name; empty: ensemble_<model names joined by +>, or ensemble_<N>models_<md5>
                      # when that is over 100 characters; with --seeds and "all": <tag or ensemble>_seed<N>; with
                      # "{seed_suffix}": <tag or derived name><seed suffix> (default="${ensemble_tag}").

    # Reference rows
    --corpus_prior # Score the most frequent training caption as every clip's caption (default="${corpus_prior}").

    # Scoring related
    --metrics       # Metrics given to caption_score (default="${metrics}").
    --results_compare # Pairs <baseline>=<model> of RESULTS.md models compared seed by seed by the paired bootstrap
                      # (caption_results --compare), e.g. a pretrained encoder against scratch (default="${results_compare}").
    --spice_lib_dir # Stanford CoreNLP jars for SPICE (default="${spice_lib_dir}").
    --fluency_model # Fluency error detector of --metrics ...,fluency (default="${fluency_model}").

    # [Task dependent] Set the datadir name created by local/data.sh
    --train_sets # Training split(s), space-separated, required (default="${train_sets}").
    --valid_set  # Validation set, required (default="${valid_set}").
    --test_sets  # Test sets, space-separated, required (default="${test_sets}").
    --xe_test_sets # Test sets decoded with the XE model(s) only, e.g. a control set (default="${xe_test_sets}").
EOF
)
}
set_help_message

# --help: apply the other options first (a recipe's run.sh passes its own before the user's), then
# print the help with their values as the defaults (what this run would use), and exit 0
_help=false
for _arg in "$@"; do
    case "${_arg}" in --help|-h) _help=true ;; esac
done
if "${_help}"; then
    _args=()
    for _arg in "$@"; do
        case "${_arg}" in --help|-h) ;; *) _args+=("${_arg}") ;; esac
    done
    set -- ${_args[@]+"${_args[@]}"}
    . utils/parse_options.sh
    set_help_message
    printf '%s\n' "${help_message}" 1>&2
    exit 0
fi

log "$0 $*"
# Save command line args for logging (they will be lost after utils/parse_options.sh)
run_args=$(printf '%q ' "$0" "$@")
. utils/parse_options.sh

if [ $# -ne 0 ]; then
    log "${help_message}"
    log "Error: No positional arguments are required."
    exit 2
fi

. ./path.sh
. ./cmd.sh

diversity_nbest=${diversity_nbest:-${num_diversity_samples}}
# Check required arguments
for _opt in train_sets valid_set test_sets feats_config xe_config decode_config; do
    if [ -z "${!_opt}" ]; then
        log "${help_message}"
        log "Error: --${_opt} is required"
        exit 2
    fi
done
# The options strings (--local_data_opts, --*_args) are split into words as a POSIX shell splits
# them, quotes and backslashes included (--xe_args "--encoder_conf '{dropout: 0.3}'"; run.sh quotes
# a path), by utils/split_words.py: nothing in them is run or expanded
for _opt in local_data_opts word2vec_args tagging_args xe_args rl_args decode_args; do
    if ! _err=$(utils/split_words.py "${!_opt}" 2>&1 > /dev/null); then
        log "Error: --${_opt} ${!_opt}: ${_err}"; exit 2
    fi
done
# words_of <options string>: the words of the string, as above, into the array _words
words_of() {
    local _w
    _words=()
    while IFS= read -r -d '' _w; do _words+=("${_w}"); done < <(utils/split_words.py "$1")
}
words_of "${local_data_opts}"
_local_opts=(${_words[@]+"${_words[@]}"})
case "${feats_filetype}" in ark|hdf5) ;; *) log "Error: --feats_filetype must be ark or hdf5, got '${feats_filetype}'"; exit 2;; esac
case "${token_type}" in word|bpe) ;; *) log "Error: --token_type must be word or bpe, got '${token_type}'"; exit 2;; esac
for _opt in word2vec corpus_prior gpu_inference; do
    case "${!_opt}" in true|false) ;; *) log "Error: --${_opt} must be true or false, got '${!_opt}'"; exit 2;; esac
done
for _s in ${seeds}; do
    case "${_s}" in *[!0-9]*) log "Error: --seeds must be integers >= 0, got '${seeds}'"; exit 2;; esac
done
if [ -n "${seeds}" ]; then
    # shellcheck disable=SC2086  # one seed per line
    if [ "$(printf '%s\n' ${seeds} | sort | uniq -d)" != "" ]; then
        log "Error: --seeds '${seeds}' repeats a seed"; exit 2
    fi
    case " ${xe_args} ${rl_args} " in
        *" --seed "*|*" --seed="*) log "Error: give the training seeds with --seeds, not --seed in --xe_args/--rl_args"; exit 2;;
    esac
fi
# integer options, checked once here (a non-integer would make every stage test fail with
# "integer expression expected" and the run exit 0 having done nothing)
# (before any test of them: the first "[ abc -le 5 ]" would print bash's own error first)
for _opt in stage stop_stage min_count nbpe nbest_average num_diversity_samples diversity_nbest; do
    case "${!_opt}" in ''|*[!0-9]*) log "Error: --${_opt} must be an integer >= 0, got '${!_opt}'"; exit 2;; esac
done
# counts of jobs, nodes and processes (a 0 job count would make split_scp.pl print its usage)
for _opt in nj inference_nj score_nj num_nodes; do
    if ! [[ "${!_opt}" =~ ^[0-9]+$ ]] || [ "${!_opt}" -lt 1 ]; then
        log "Error: --${_opt} must be an integer >= 1, got '${!_opt}'"; exit 2
    fi
done
case "${ngpu}" in *[!0-9]*) log "Error: --ngpu must be an integer >= 0 (or empty), got '${ngpu}'"; exit 2;; esac
case "${nproc_per_node}" in *[!0-9]*|0) log "Error: --nproc_per_node must be an integer >= 1 (or empty), got '${nproc_per_node}'"; exit 2;; esac
if ! "${skip_train}" && [ "${stage}" -le 5 ] && [ "${stop_stage}" -ge 5 ] && [ ! -f "${xe_config}" ]; then
    log "Error: XE config ${xe_config} not found (give --xe_config)"; exit 2
fi
# A range that selects no stage would run nothing and report success.
last_stage=10
if [ "${stage}" -gt "${last_stage}" ] || [ "${stage}" -gt "${stop_stage}" ]; then
    log "Error: --stage ${stage} --stop_stage ${stop_stage} selects no stage: the stages are 0-${last_stage}, and --stage must be <= --stop_stage"
    exit 2
fi
case "${feats_type}" in logmel|pretrained|cnn|import) ;; *) log "Error: --feats_type must be logmel, pretrained, cnn or import, got '${feats_type}'"; exit 2;; esac

if [ -z "${ngpu}" ]; then
    # Autodetect with the plain interpreter (${python} may be a wrapper such as "coverage run").
    ngpu=$(python3 -c 'import torch; print(1 if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
fi
if [ -z "${nproc_per_node}" ]; then
    if [ "${ngpu}" -gt 1 ]; then nproc_per_node=${ngpu}; else nproc_per_node=1; fi
fi
if [ "${ngpu}" -gt 0 ] && [ "${nproc_per_node}" -gt 1 ] && [ "${nproc_per_node}" -ne "${ngpu}" ]; then
    log "Error: --nproc_per_node ${nproc_per_node} with --ngpu ${ngpu}: GPU training runs one process per GPU"
    exit 2
fi
# Stages 5-6: the training command runs as "${train_launcher} -m captionbin.<binary> ..."; more
# than one process runs it data-parallel (torchrun; ranks split each global batch).
train_launcher=${python}
train_cmd_opts=
if [ "${nproc_per_node}" -gt 1 ] || [ "${num_nodes}" -gt 1 ]; then
    train_launcher="utils/torchrun.sh --nproc_per_node ${nproc_per_node} --num_nodes ${num_nodes} ${python}"
    [ "${num_nodes}" -gt 1 ] && train_cmd_opts="--num_nodes ${num_nodes}"
fi

# Derived names (deterministic: from config names and overrides, never timestamps)
# sanitize <options>: a name part (a key=value item keeps its '=' as '-': --decoder_conf dropout=0.5 and
# --decoder_conf '{dropout: 0.5}' set different configs)
sanitize() { echo "$1" | sed -e 's/\(^\|[[:space:]]\)\([A-Za-z_][A-Za-z0-9_.]*\)=/\1\2-/g' -e 's/--/_/g' -e 's/[^A-Za-z0-9_.,+-]//g'; }
read -r -a _train_sets <<< "${train_sets}"
if [ ${#_train_sets[@]} -gt 1 ]; then
    train_set=train_$(IFS=_; echo "${_train_sets[*]}")
else
    train_set=${_train_sets[0]}
fi
for _t in ${test_sets}; do
    for _s in "${_train_sets[@]}"; do
        if [ "${_t}" = "${_s}" ]; then
            log "warning: test set ${_t} is also a training set (--train_sets \"${train_sets}\"): its scores are of data the models were trained on"
        fi
    done
done
# Every set that needs features, each once
all_sets=$(echo "${train_set} ${valid_set} ${test_sets} ${xe_test_sets}" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | paste -sd ' ' -)
if [ "${token_type}" = bpe ]; then token_tag=bpe${nbpe}; else token_tag=word; fi
token_list=data/token_list/${token_tag}/tokens.txt
word2vec_file=data/token_list/${token_tag}/word2vec.npy
# Feature tag (names dump/<feats_tag>/, exp/stats_<feats_tag> and the XE dirs): the feature type,
# plus the feature config's name unless it is conf/feats_<feats_type>.yaml, so that two feature
# configs (e.g. two CNNs) never share a dump dir or an experiment.
_fc=$(basename "${feats_config}" .yaml); _fc=${_fc#feats_}; _fc=${_fc#"${feats_type}"_}
if [ "${_fc}" = "${feats_type}" ]; then feats_tag=${feats_type}; else feats_tag=${feats_type}_${_fc}; fi
stats_dir=${expdir}/stats_${feats_tag}
feats_stats=${stats_dir}/feats_stats.npz
cider_df=${stats_dir}/cider_df.npz
if [ -z "${xe_tag}" ]; then
    xe_tag=xe_$(basename "${xe_config}" .yaml)_${feats_tag}_${token_tag}$(sanitize "${xe_args}")
    if "${word2vec}"; then
        xe_tag+=_w2v$(sanitize "${word2vec_args}")
    fi
fi
rl_config_of() { if [ -n "${rl_config}" ]; then echo "${rl_config}"; else echo "conf/train_$1.yaml"; fi; }
if ! "${skip_train}" && [ "${stage}" -le 6 ] && [ "${stop_stage}" -ge 6 ]; then
    for _a in ${rl_algo}; do
        [ -f "$(rl_config_of "${_a}")" ] || { log "Error: RL config $(rl_config_of "${_a}") not found (give --rl_config)"; exit 2; }
    done
fi
rl_tag_of() { echo "$1_$(basename "$(rl_config_of "$1")" .yaml)$(sanitize "${rl_args}")"; }
xe_inference_model=${xe_inference_model:-${inference_model}}
# Seeds: "none" stands for one run with the configs' own seed and no name suffix.
seed_list=${seeds:-none}
seed_suffix() { if [ "$1" != none ]; then echo "_seed$1"; fi; }
seed_opts() { if [ "$1" != none ]; then echo "--seed $1"; fi; }
xe_exp_of() { echo "${expdir}/${xe_tag}$(seed_suffix "$1")"; }
# rl_init_of <seed>: the model file RL starts from; RL dirs nest under the dir of that model
rl_init_of() {
    if [ -n "${rl_init_tag}" ]; then
        echo "$(xe_exp_of "$1")/${rl_init_tag}$(seed_suffix "$1")/${inference_model}"
    else
        echo "$(xe_exp_of "$1")/${xe_inference_model}"
    fi
}
rl_exp_of() { echo "$(dirname "$(rl_init_of "$1")")/$(rl_tag_of "$2")$(seed_suffix "$1")"; }
model_dirs_of() {
    local _a
    xe_exp_of "$1"
    for _a in ${rl_algo}; do rl_exp_of "$1" "${_a}"; done
}
model_dirs=$(for _s in ${seed_list}; do model_dirs_of "${_s}"; done | paste -sd ' ' -)
# xe_train_opts <seed> / rl_train_opts <seed> <algo>: the options of caption_train (stage 5) and
# caption_rl_train (stage 6), in the arrays _xe_opts and _rl_opts
xe_train_opts() {
    # shellcheck disable=SC2206,SC2207  # word-split options
    _xe_opts=(--config "${xe_config}" --train_data_dir "${dumpdir}/${feats_tag}/${train_set}"
        --valid_data_dir "${dumpdir}/${feats_tag}/${valid_set}" --token_list "${token_list}"
        --feats_stats "${feats_stats}" --output_dir "$(xe_exp_of "$1")" --ngpu "${ngpu}")
    if "${word2vec}"; then _xe_opts+=(--init_embedding "${word2vec_file}"); fi
    words_of "${xe_args}"
    # shellcheck disable=SC2207  # --seed N
    _xe_opts+=(${_words[@]+"${_words[@]}"} $(seed_opts "$1"))
}
rl_train_opts() {
    words_of "${rl_args}"
    # shellcheck disable=SC2207  # --seed N
    _rl_opts=(--rl_algo "$2" --config "$(rl_config_of "$2")" --init_param "$(rl_init_of "$1")"
        --train_data_dir "${dumpdir}/${feats_tag}/${train_set}" --valid_data_dir "${dumpdir}/${feats_tag}/${valid_set}"
        --cider_df "${cider_df}" --output_dir "$(rl_exp_of "$1" "$2")"
        --ngpu "${ngpu}" ${_words[@]+"${_words[@]}"} $(seed_opts "$1"))
}
# tagging_train_opts: the options of caption_pretrain_tagging (stage 5, --tagging_config) in _tag_opts
tagging_train_opts() {
    _tag_exp=${expdir}/$(basename "${tagging_config}" .yaml)
    words_of "${tagging_args}"
    _tag_opts=(--config "${tagging_config}" --train_data_dir "${dumpdir}/${feats_tag}/${train_set}"
        --valid_data_dir "${dumpdir}/${feats_tag}/${valid_set}" --output_dir "${_tag_exp}" --ngpu "${ngpu}"
        ${_words[@]+"${_words[@]}"})
}
# check_train_opts <binary> <what> <options...>: the training options checked (--check_only) before
# the stages that come first run: a bad --xe_args/--rl_args, or an option one algorithm of
# --rl_algo cannot train with, stops the run here, not after stages 1-4, XE or another algorithm
check_train_opts() {
    local _bin=$1 _what=$2 _out
    shift 2
    log "Checking the options of ${_what} before anything runs (${_bin} --check_only)"
    if ! _out=$(${python} -m "captionbin.${_bin}" "$@" --check_only true 2>&1); then
        log "Error: the options of ${_what}: $(tail -n 1 <<< "${_out}"); nothing has run"
        exit 2
    fi
}
if ! "${skip_train}"; then
    if [ "${stage}" -le 4 ] && [ "${stop_stage}" -ge 5 ]; then
        if [ -n "${tagging_config}" ]; then
            tagging_train_opts
            check_train_opts caption_pretrain_tagging "stage 5 (tagging pretraining)" "${_tag_opts[@]}"
        fi
        xe_train_opts "${seed_list%% *}"
        check_train_opts caption_train "stage 5 (XE training)" "${_xe_opts[@]}"
    fi
    # one algorithm at --stage 6 fails at once without this
    if [ "${stage}" -le 6 ] && [ "${stop_stage}" -ge 6 ] && { [ "${stage}" -le 5 ] || [ "$(wc -w <<< "${rl_algo}")" -gt 1 ]; }; then
        for _a in ${rl_algo}; do
            rl_train_opts "${seed_list%% *}" "${_a}"
            check_train_opts caption_rl_train "stage 6 (RL, --rl_algo ${_a})" "${_rl_opts[@]}"
        done
    fi
fi
# model_file_of <model dir> <seed>: the XE dirs decode (and start RL from) ${xe_inference_model}
model_file_of() {
    if [ "$1" = "$(xe_exp_of "$2")" ]; then echo "$1/${xe_inference_model}"; else echo "$1/${inference_model}"; fi
}
decode_tag_of() {
    if [ -n "${decode_tag}" ]; then echo "${decode_tag}"; return; fi
    echo "$(basename "${decode_config}" .yaml)$(sanitize "${decode_args}")_model_$(basename "$1" .pth)"
}
# Word-level ensembles, one "<dir>|<model>,<model>,..." entry each (one per seed for "all" with --seeds)
ensemble_name_of() {
    # exp/xe_a/valid.cider_d.best.pth exp/xe_a/scst_b/valid.cider_d.best.pth -> ensemble_xe_a+xe_a-scst_b
    local _m _n _names=() _tag
    for _m in "$@"; do
        _n=${_m#"${expdir}"/}
        _n=${_n%/"${inference_model}"}
        _n=${_n%/"${xe_inference_model}"}
        _n=${_n%.pth}
        _names+=("$(sanitize "${_n//\//-}")")
    done
    _tag=ensemble_$(IFS=+; echo "${_names[*]}")
    if [ ${#_tag} -gt 100 ]; then
        _tag=ensemble_$#models_$(printf '%s\n' "$@" | md5sum | cut -c1-8)
    fi
    echo "${_tag}"
}
ensembles=()
if [ "${ensemble_models}" = all ] && [ -n "${seeds}" ]; then
    for _s in ${seed_list}; do
        _files=()
        for _dir in $(model_dirs_of "${_s}"); do _files+=("$(model_file_of "${_dir}" "${_s}")"); done
        ensembles+=("${expdir}/${ensemble_tag:-ensemble}_seed${_s}|$(IFS=,; echo "${_files[*]}")")
    done
elif [[ "${ensemble_models}" == *"{seed_suffix}"* ]]; then
    # shellcheck disable=SC2086  # one argument per model file
    _tag=${ensemble_tag:-$(ensemble_name_of ${ensemble_models//\{seed_suffix\}/})}
    for _s in ${seed_list}; do
        _files=()
        for _m in ${ensemble_models}; do _files+=("${_m//\{seed_suffix\}/$(seed_suffix "${_s}")}"); done
        ensembles+=("${expdir}/${_tag}$(seed_suffix "${_s}")|$(IFS=,; echo "${_files[*]}")")
    done
elif [ -n "${ensemble_models}" ]; then
    _files=()
    for _m in ${ensemble_models}; do
        if [ "${_m}" = all ]; then
            for _s in ${seed_list}; do
                for _dir in $(model_dirs_of "${_s}"); do _files+=("$(model_file_of "${_dir}" "${_s}")"); done
            done
        else
            _files+=("${_m}")
        fi
    done
    ensembles+=("${expdir}/${ensemble_tag:-$(ensemble_name_of "${_files[@]}")}|$(IFS=,; echo "${_files[*]}")")
fi
# Decodes of stages 8-9, one "<model file(s), comma-separated>|<decode dir>|<sets>" entry each;
# the XE models also decode --xe_test_sets.
decodes=()
for _s in ${seed_list}; do
    for _dir in $(model_dirs_of "${_s}"); do
        _sets=${test_sets}
        if [ "${_dir}" = "$(xe_exp_of "${_s}")" ]; then _sets+=" ${xe_test_sets}"; fi
        _model=$(model_file_of "${_dir}" "${_s}")
        decodes+=("${_model}|${_dir}/decode_$(decode_tag_of "${_model}")|${_sets}")
    done
done
for _e in ${ensembles[@]+"${ensembles[@]}"}; do
    _model=${_e#*|}
    decodes+=("${_model}|${_e%%|*}/decode_$(decode_tag_of "${_model%%,*}")|${test_sets}")
done
prior_dir=
if "${corpus_prior}"; then
    prior_dir=${expdir}/corpus_prior
fi

# Experiment-dir locks. A trainer holds <dir>/.lock ("<pid> <host> <launcher pids>", see
# captionlib.utils.fileio.exp_dir_lock) while it trains. Before anything is written to <dir>,
# lock_exp_dir takes <dir>/.pipeline.lock ("<pid> <host>" of this script) atomically (noclobber:
# O_EXCL), so that of two runs started at once on one dir the loser stops at once and touches
# nothing, then checks .lock; release_exp_dir gives it back once the trainer has finished.
export CAPTIONLIB_PIPELINE_PID=$$  # the top of a trainer's launcher chain in its .lock
held_lock=
release_exp_dir() {
    if [ -n "${held_lock}" ] && [ "$(cat "${held_lock}" 2>/dev/null)" = "$$ $(hostname)" ]; then
        rm -f "${held_lock}"
    fi
    held_lock=
}
trap release_exp_dir EXIT
# Return 0 if the lock file $1 is free or stale (its process no longer runs on this host); else
# log the "in use" error (saying so when the holder's launcher is gone: an orphaned trainer).
lock_is_free() {
    local _pid _host _launchers _l
    [ -f "$1" ] || return 0
    read -r _pid _host _launchers < "$1" || true
    if [ "${_host:-}" = "$(hostname)" ]; then
        kill -0 "${_pid:-0}" 2>/dev/null || return 0
        for _l in ${_launchers//,/ }; do
            if ! kill -0 "${_l}" 2>/dev/null; then
                log "Error: $(dirname "$1") is in use by process ${_pid} on ${_host} ($1); its launcher (process ${_l}) is gone, so nothing waits for it (an orphan, e.g. of a killed run.pl or torchrun): stop it with \`kill ${_pid}\`, then run again"
                return 1
            fi
        done
    fi
    log "Error: $(dirname "$1") is in use by process ${_pid:-?} on ${_host:-?} ($1); wait for it, or remove the lock if it is gone"
    return 1
}
lock_exp_dir() {
    local lock=$1/.pipeline.lock _try
    mkdir -p "$1"
    for _try in 1 2; do
        if (set -o noclobber; echo "$$ $(hostname)" > "${lock}") 2>/dev/null; then
            held_lock=${lock}
            lock_is_free "$1/.lock" || exit 1
            return 0
        fi
        lock_is_free "${lock}" || exit 1
        rm -f "${lock}"  # stale: the caption.sh that took it is gone
    done
    log "Error: cannot take ${lock}"
    exit 1
}

# Write <dir>/run.sh that re-runs (resumes) this experiment from the recipe directory (ESPnet habit).
# Keep the log of an earlier (e.g. killed, now resumed) run as <log>.N instead of overwriting it.
keep_old_log() {
    local n=1
    [ -f "$1" ] || return 0
    while [ -f "$1.${n}" ]; do n=$((n + 1)); done
    mv "$1" "$1.${n}"
}

# follow_epochs <log> <command...>: run a training job, printing the "epoch N/M done" lines
# (losses, validation scores, ETA) of its log on the terminal as they are written
follow_epochs() {
    local _log=$1 _job _follow _rc=0
    shift
    "$@" &
    _job=$!
    tail -n +1 -F --pid="${_job}" "${_log}" 2>/dev/null \
        | grep --line-buffered -E "INFO: (epoch [0-9]+/[0-9]+ done in|train_(loss|reward): epoch)" \
        | sed -u -e 's/^.*INFO: /    /' &
    _follow=$!
    wait "${_job}" || _rc=$?
    wait "${_follow}" || true
    return "${_rc}"
}

# mark_stage <N>: log the wall time of the stage that ran before stage N (and, with "end", of the last)
_stage_now=
_stage_t0=0
mark_stage() {
    if [ -n "${_stage_now}" ]; then
        log "Stage ${_stage_now} done in $((SECONDS - _stage_t0)) s"
    fi
    _stage_now=$1
    _stage_t0=${SECONDS}
    [ "$1" != end ] || _stage_now=
}

write_run_sh() {
    local dir=$1 back
    shift
    if [[ "${dir}" = /* ]]; then
        back=${PWD}
    else
        # exp/a/b -> $(dirname "$0")/../../..
        # shellcheck disable=SC2001
        back="\$(dirname \"\$0\")/$(echo "${dir}" | sed -e 's:[^/][^/]*:..:g')"
    fi
    mkdir -p "${dir}"
    {
        echo '#!/usr/bin/env bash'
        echo "# Generated by caption.sh: re-runs this experiment; extra options are appended."
        echo "cd \"${back}\" || exit 1"
        echo "${run_args}$* \"\$@\"; exit \$?"
    } > "${dir}/run.sh"
    chmod +x "${dir}/run.sh"
}

# ========================== Main stages start from here. ==========================

if ! "${skip_data_prep}"; then
    if [ ${stage} -le 0 ] && [ ${stop_stage} -ge 0 ]; then
        mark_stage 0
        if [ -x local/download.sh ]; then
            log "Stage 0: Download the corpus (local/download.sh)"
            local/download.sh ${_local_opts[@]+"${_local_opts[@]}"}
        elif [ -x local/generate.sh ]; then
            log "Stage 0: Generate the corpus (local/generate.sh)"
            local/generate.sh ${_local_opts[@]+"${_local_opts[@]}"}
        else
            log "Stage 0: no local/download.sh or local/generate.sh in this recipe: nothing to do"
        fi
    fi

    if [ ${stage} -le 1 ] && [ ${stop_stage} -ge 1 ]; then
        mark_stage 1
        log "Stage 1: Data preparation: data/{${all_sets// /,}}"
        local/data.sh ${_local_opts[@]+"${_local_opts[@]}"}
        if [ ${#_train_sets[@]} -gt 1 ]; then
            utils/combine_data.sh "data/${train_set}" "${_train_sets[@]/#/data/}"
        fi
        _opts=(--no-feats)
        if [ "${feats_type}" = import ]; then
            _opts+=(--no-media)  # the features come from elsewhere: no media list needed
        fi
        for dset in ${all_sets}; do
            utils/validate_data_dir.sh "${_opts[@]}" "data/${dset}"
        done
        # a clip of an evaluation set that is also a training clip (by id, media file or bytes;
        # a set named in --train_sets is warned about above) scores what the models were trained on
        _eval_dirs=()
        for dset in ${valid_set} ${test_sets} ${xe_test_sets}; do
            case " ${train_sets} ${_eval_dirs[*]} " in *" ${dset} "*|*" data/${dset} "*) continue;; esac
            _eval_dirs+=("data/${dset}")
        done
        if [ ${#_eval_dirs[@]} -gt 0 ]; then
            ${python} -m captionbin.caption_check_overlap --log_level WARNING --train_dir "data/${train_set}" \
                --eval_dirs "${_eval_dirs[@]}"
        fi
    fi

    if [ ${stage} -le 2 ] && [ ${stop_stage} -ge 2 ]; then
        mark_stage 2
        log "Stage 2: Feature extraction (${feats_type}, ${feats_filetype}): data/* -> ${dumpdir}/${feats_tag}/*"
        for dset in ${all_sets}; do
            # dump_feats.sh caps nj at the number of clips
            scripts/dump_feats.sh --cmd "${train_cmd}" --nj "${nj}" --feats_type "${feats_type}" \
                --filetype "${feats_filetype}" --feats_config "${feats_config}" --python "${python}" \
                "data/${dset}" "${dumpdir}/${feats_tag}/${dset}"
        done
    fi

    if [ ${stage} -le 3 ] && [ ${stop_stage} -ge 3 ]; then
        mark_stage 3
        log "Stage 3: Token list (${token_tag}) from data/${train_set}/text: ${token_list}"
        ${python} -m captionbin.caption_tokenize --text "data/${train_set}/text" --token_type "${token_type}" \
            --min_count "${min_count}" --nbpe "${nbpe}" --output_dir "$(dirname "${token_list}")"
        if "${word2vec}"; then
            log "Stage 3: Word2Vec on data/${train_set}/text aligned with ${token_list}: ${word2vec_file}"
            words_of "${word2vec_args}"
            ${python} -m captionbin.caption_train_word2vec --text "data/${train_set}/text" \
                --token_list "${token_list}" --output "${word2vec_file}" ${_words[@]+"${_words[@]}"}
        fi
    fi

    if [ ${stage} -le 4 ] && [ ${stop_stage} -ge 4 ]; then
        mark_stage 4
        log "Stage 4: Statistics of ${train_set}: ${feats_stats}, ${cider_df}"
        mkdir -p "${stats_dir}/logs"
        ${train_cmd} "${stats_dir}/logs/compute_stats.log" ${python} -m captionbin.caption_compute_stats \
            --feats_scp "${dumpdir}/${feats_tag}/${train_set}/feats.scp" --output "${feats_stats}"
        ${train_cmd} "${stats_dir}/logs/compute_cider_df.log" ${python} -m captionbin.caption_compute_cider_df \
            --text "data/${train_set}/text" --output "${cider_df}"
    fi
else
    log "Skip the data preparation stages"
fi

if ! "${skip_train}"; then
    if [ ${stage} -le 5 ] && [ ${stop_stage} -ge 5 ]; then
        mark_stage 5
        if "${word2vec}" && [ ! -f "${word2vec_file}" ]; then
            log "Error: ${word2vec_file} not found (run stage 3 with --word2vec true)"; exit 1
        fi
        if [ -n "${tagging_config}" ]; then
            tagging_train_opts
            log "Stage 5: audio tagging pretraining of the encoder: ${_tag_exp}/pretrained.pth (log: ${_tag_exp}/train.log)"
            lock_exp_dir "${_tag_exp}"
            keep_old_log "${_tag_exp}/train.log"
            # shellcheck disable=SC2086  # word-split options
            follow_epochs "${_tag_exp}/train.log" ${cuda_cmd} --gpu "${ngpu}" ${train_cmd_opts} "${_tag_exp}/train.log" \
                ${train_launcher} -m captionbin.caption_pretrain_tagging "${_tag_opts[@]}"
            release_exp_dir
        fi
        for _s in ${seed_list}; do
            _xe_exp=$(xe_exp_of "${_s}")
            log "Stage 5: XE training: ${_xe_exp} (log: ${_xe_exp}/train.log)"
            lock_exp_dir "${_xe_exp}"
            if [ "${_s}" = none ]; then write_run_sh "${_xe_exp}" --stage 5; else write_run_sh "${_xe_exp}" --stage 5 --seeds "${_s}"; fi
            keep_old_log "${_xe_exp}/train.log"
            xe_train_opts "${_s}"
            # shellcheck disable=SC2086  # word-split options
            follow_epochs "${_xe_exp}/train.log" ${cuda_cmd} --gpu "${ngpu}" ${train_cmd_opts} "${_xe_exp}/train.log" \
                ${train_launcher} -m captionbin.caption_train "${_xe_opts[@]}"
            release_exp_dir
        done
    fi

    if [ ${stage} -le 6 ] && [ ${stop_stage} -ge 6 ]; then
        mark_stage 6
        for _s in ${seed_list}; do
            for algo in ${rl_algo}; do
                _cfg=$(rl_config_of "${algo}")
                _rl_exp=$(rl_exp_of "${_s}" "${algo}")
                log "Stage 6: RL fine-tuning (${algo}, ${_cfg}) from $(rl_init_of "${_s}"): ${_rl_exp} (log: ${_rl_exp}/train.log)"
                [ -f "$(rl_init_of "${_s}")" ] || { log "Error: $(rl_init_of "${_s}") not found (train the model RL starts from first)"; exit 1; }
                lock_exp_dir "${_rl_exp}"
                if [ "${_s}" = none ]; then
                    write_run_sh "${_rl_exp}" --stage 6 --rl_algo "${algo}"
                else
                    write_run_sh "${_rl_exp}" --stage 6 --rl_algo "${algo}" --seeds "${_s}"
                fi
                keep_old_log "${_rl_exp}/train.log"
                rl_train_opts "${_s}" "${algo}"
                # shellcheck disable=SC2086  # word-split options
                follow_epochs "${_rl_exp}/train.log" ${cuda_cmd} --gpu "${ngpu}" ${train_cmd_opts} "${_rl_exp}/train.log" \
                    ${train_launcher} -m captionbin.caption_rl_train "${_rl_opts[@]}"
                release_exp_dir
            done
        done
    fi

    if [ ${stage} -le 7 ] && [ ${stop_stage} -ge 7 ] && [ "${nbest_average}" -gt 0 ]; then
        mark_stage 7
        for _dir in ${model_dirs}; do
            log "Stage 7: Average the ${nbest_average} best checkpoints of ${_dir} by its best_model_criterion"
            ${python} -m captionbin.caption_average_checkpoints --exp_dir "${_dir}" --nbest "${nbest_average}"
        done
    fi
else
    log "Skip the training stages"
fi

if ! "${skip_eval}"; then
    if [ ${stage} -le 8 ] && [ ${stop_stage} -ge 8 ]; then
        mark_stage 8
        for _e in ${ensembles[@]+"${ensembles[@]}"}; do
            mkdir -p "${_e%%|*}"
            tr ',' '\n' <<< "${_e#*|}" > "${_e%%|*}/models.txt"
        done
        if "${gpu_inference}"; then
            _cmd="${cuda_cmd} --gpu 1"
            _ngpu=1
        else
            _cmd=${decode_cmd}
            _ngpu=0
        fi
        for _job in "${decodes[@]}"; do
            IFS='|' read -r _models _ddir _sets <<< "${_job}"
            for dset in ${_sets}; do
                log "Stage 8: Decoding ${dset} with ${_models//,/ }: ${_ddir}/${dset}"
                scripts/decode.sh --cmd "${_cmd}" --ngpu "${_ngpu}" --nj "${inference_nj}" --python "${python}" \
                    --decode_config "${decode_config}" --decode_args "${decode_args}" \
                    --num_diversity_samples "${num_diversity_samples}" --nbest "${diversity_nbest}" \
                    "${_models}" "${dumpdir}/${feats_tag}/${dset}" "${_ddir}/${dset}"
            done
        done
        if [ -n "${prior_dir}" ]; then
            for dset in ${test_sets}; do
                log "Stage 8: Corpus prior (most frequent caption of data/${train_set}) for ${dset}: ${prior_dir}/decode_most_frequent_train_caption/${dset}"
                ${python} -m captionbin.caption_corpus_prior --train_text "data/${train_set}/text" \
                    --data_dir "data/${dset}" --output_dir "${prior_dir}/decode_most_frequent_train_caption/${dset}"
            done
        fi
    fi

    if [ ${stage} -le 9 ] && [ ${stop_stage} -ge 9 ]; then
        mark_stage 9
        _scores=("${decodes[@]}")
        if [ -n "${prior_dir}" ]; then
            _scores+=("|${prior_dir}/decode_most_frequent_train_caption|${test_sets}")
        fi
        # --score_nj score.sh jobs at once (the oldest is waited for first: "wait -n" needs bash
        # 4.3); a failed one fails the stage once all have ended
        _pids=()
        _failed=0
        _total=0
        for _job in "${_scores[@]}"; do
            IFS='|' read -r _ _ddir _sets <<< "${_job}"
            for dset in ${_sets}; do
                if [ ${#_pids[@]} -ge "${score_nj}" ]; then
                    wait "${_pids[0]}" || _failed=$((_failed + 1))
                    _pids=("${_pids[@]:1}")
                fi
                log "Stage 9: Scoring ${_ddir}/${dset} (${metrics})"
                scripts/score.sh --cmd "${train_cmd}" --python "${python}" --metrics "${metrics}" \
                    --spice_lib_dir "${spice_lib_dir}" --fluency_model "${fluency_model}" \
                    "data/${dset}" "${_ddir}/${dset}" &
                _pids+=($!)
                _total=$((_total + 1))
            done
        done
        for _pid in ${_pids[@]+"${_pids[@]}"}; do
            wait "${_pid}" || _failed=$((_failed + 1))
        done
        if [ "${_failed}" -gt 0 ]; then
            log "Error: Stage 9: ${_failed} of the ${_total} scoring jobs failed (their errors are above)"
            exit 1
        fi
        _compare=()
        for _pair in ${results_compare}; do _compare+=(--compare "${_pair}"); done
        ${python} -m captionbin.caption_results --exp_dir "${expdir}" --output RESULTS.md ${_compare[@]+"${_compare[@]}"}
        cat RESULTS.md
    fi
else
    log "Skip the evaluation stages"
fi

if [ ${stage} -le 10 ] && [ ${stop_stage} -ge 10 ]; then
    mark_stage 10
    if [ "${feats_type}" = import ]; then
        log "Stage 10: skipped: packed models are for caption_infer on audio files (feats_type logmel, pretrained) and on images and videos (feats_type cnn), this run has feats_type import (features made elsewhere)"
    else
        # what caption_pack needs to compute stage 2's features: the sample rates of the training
        # audio, or the media type of the training data dir (as scripts/dump_feats.sh picks it)
        if [ "${feats_type}" = logmel ] || [ "${feats_type}" = pretrained ]; then
            _front=(--feats_type "${feats_type}" --train_wav_scp "data/${train_set}/wav.scp")
            _sha=${dumpdir}/${feats_tag}/${train_set}/pretrained.sha256  # the encoder checkpoint stage 2 used
            if [ "${feats_type}" = pretrained ] && [ -f "${_sha}" ]; then
                _front+=(--encoder_sha256 "$(cat "${_sha}")")
            fi
        elif [ -f "data/${train_set}/video.scp" ]; then
            _front=(--feats_type cnn --media_type video)
        else
            _front=(--feats_type cnn --media_type image)
        fi
        # the feature options the training features were dumped with (stage 2 records them), not
        # ${feats_config} as it is now: an edit since stage 2 must not reach the packed front end
        _packed_feats_config=${dumpdir}/${feats_tag}/${train_set}/feats_config.yaml
        if [ ! -f "${_packed_feats_config}" ]; then
            log "Stage 10: warning: ${_packed_feats_config} not found (a dump of an older version): packing ${feats_config}, which must be what stage 2 used"
            _packed_feats_config=${feats_config}
        fi
        read -r _test_set _ <<< "${test_sets}"  # the metrics of the decode of the first test set
        for _s in ${seed_list}; do
            for _dir in $(model_dirs_of "${_s}"); do
                _model=$(model_file_of "${_dir}" "${_s}")
                _score=${_dir}/decode_$(decode_tag_of "${_model}")/${_test_set}/score.json
                _packed=${_dir}/packed/$(basename "${_model}" .pth).zip
                _metrics=()
                if [ -f "${_score}" ]; then
                    _metrics=(--score_json "${_score}")
                else
                    log "Stage 10: warning: ${_score} not found (run stages 8-9 first): packing without metrics"
                fi
                log "Stage 10: Pack ${_model} (${feats_type}; metrics: ${_score}): ${_packed} (log: ${_dir}/packed/log/pack.log)"
                ${train_cmd} "${_dir}/packed/log/pack.log" \
                    ${python} -m captionbin.caption_pack --model_file "${_model}" --train_config "${_dir}/config.yaml" \
                    "${_front[@]}" --feats_config "${_packed_feats_config}" --feats_stats "${feats_stats}" --cider_df "${cider_df}" \
                    --decode_config "${decode_config}" \
                    "--decode_args=${decode_args}" ${_metrics[@]+"${_metrics[@]}"} --recipe "$(basename "${PWD}")" \
                    --output "${_packed}"
            done
        done
    fi
fi

mark_stage end
log "Successfully finished. [elapsed=${SECONDS}s]"
