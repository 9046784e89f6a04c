#!/usr/bin/env bash
# Run one seed paper's own system: ./run_preset.sh <preset> [run.sh options, e.g. --stage 5 --seeds "0 1 2"]
# Each preset is ./run.sh (the recipe's data, features and decoding) plus the options below, with
# the recipe's config files of fixed names (conf/train_xe.yaml, conf/train_xe_specaug.yaml,
# conf/train_scst_pairs.yaml, conf/train_sle.yaml, conf/train_scst_me.yaml, conf/train_ac_embedding.yaml,
# conf/train_mc_pg.yaml, conf/train_reinforce_plus_frozen.yaml, conf/train_multitask.yaml).
# The tables "paper says | config key | value" are in egs/clotho/README.md.
#
#   seed000_crnn_b          XE, model selected by validation BLEU-4 (exp/xe_crnn_b)
#   seed000_crnn_w          as crnn_b with Word2Vec-initialised decoder embeddings (exp/xe_crnn_w)
#   seed000_crnn_e          word-level ensemble of crnn_b and crnn_w (run both first; exp/ensemble_crnn_e)
#   seed000_crnn_r          SCST from crnn_w over (clip, caption) pairs, selected by CIDEr-D
#   seed000_crnn_r_specaug  crnn_r with SpecAugment in XE and SCST (exp/xe_crnn_r_specaug)
#   seed001_sle             SLE (d = 2 - BLEU-3 - BLEU-4, leave-one-out diversity baseline)
#   seed001_sll_me          SLL-ME: SCST with the maximum-entropy term, weight 1e-2 (seed 001's comparison)
#   seed001_sle_tgif        seed 001's video system (egs/tgif, egs/mini_tgif only): FC 512 -> LSTM 512 on the
#                           recipe's ResNet-152 GIF features, XE then SLL-SLE, beam 5 (conf/train_xe_tgif.yaml,
#                           conf/train_sle_tgif.yaml, conf/decode_tgif.yaml; tables in egs/tgif/README.md)
#   seed002_ac              actor-critic with the embedding reward and its own value encoder
#   seed003_mc_pg           MC-PG (reward of conf/train_mc_pg.yaml: CIDEr-D where SPICE cannot run)
#   seed004_multitask       XE -> REINFORCE+ with the encoder frozen -> multitask from that model
# The field's current audio systems (audio recipes with the configs below; egs/clotho/README.md, "Pretrained encoders"):
#   sjtu_cnn14_transformer          SJTU-style: frozen PANNs CNN14 + Transformer encoder layers and decoder,
#                                   XE then SCST (conf/feats_panns.yaml, conf/train_xe_cnn14_transformer.yaml,
#                                   conf/train_scst_cnn14_transformer.yaml; beam 3)
#   dcase2024_convnext_transformer  the DCASE 2024 task 6 baseline: frozen audio ConvNeXt + 6-layer Transformer
#                                   decoder, XE (conf/feats_convnext.yaml, conf/train_xe_convnext_transformer.yaml;
#                                   beam 3); RL from it: ./run.sh with those options and --rl_algo
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

presets="seed000_crnn_b seed000_crnn_w seed000_crnn_e seed000_crnn_r seed000_crnn_r_specaug seed001_sle seed001_sll_me seed001_sle_tgif seed002_ac seed003_mc_pg seed004_multitask sjtu_cnn14_transformer dcase2024_convnext_transformer"
if [ $# -lt 1 ] || [[ " ${presets} " != *" $1 "* ]]; then
    echo "Usage: $0 <preset> [run.sh options]; presets: ${presets}" >&2
    exit 1
fi
preset=$1
shift
# The run's --expdir (for the ensemble members' paths of seed000_crnn_e); refuse what would
# break the staged seed004_multitask (its second stage names the first stage's dir).
expdir=exp
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --expdir) expdir=${args[i + 1]:-exp} ;;
        --rl_algo|--rl_config|--rl_args|--rl_init_tag|--xe_tag)
            echo "$0: ${args[i]} is set by the preset; edit the configs under conf/ instead" >&2
            exit 1 ;;
    esac
done

# seed 000 (Xu et al. 2020, sec. 3.4): XE models selected by BLEU-4, SCST by CIDEr
xe_b=(--xe_tag xe_crnn_b --xe_args "--best_model_criterion bleu_4" --xe_inference_model valid.bleu_4.best.pth)
xe_w=(--xe_tag xe_crnn_w --word2vec true --xe_args "--best_model_criterion bleu_4" --xe_inference_model valid.bleu_4.best.pth)
scst=(--rl_algo scst --rl_config conf/train_scst_pairs.yaml)
case "${preset}" in
    seed000_crnn_b) opts=("${xe_b[@]}" --rl_algo "" --ensemble_models "") ;;
    seed000_crnn_w) opts=("${xe_w[@]}" --rl_algo "" --ensemble_models "") ;;
    seed000_crnn_e)
        members="${expdir}/xe_crnn_b{seed_suffix}/valid.bleu_4.best.pth ${expdir}/xe_crnn_w{seed_suffix}/valid.bleu_4.best.pth"
        opts=("${xe_w[@]}" --rl_algo "" --ensemble_models "${members}" --ensemble_tag ensemble_crnn_e) ;;
    seed000_crnn_r) opts=("${xe_w[@]}" "${scst[@]}" --ensemble_models "") ;;
    seed000_crnn_r_specaug)
        opts=(--xe_tag xe_crnn_r_specaug --xe_config conf/train_xe_specaug.yaml --word2vec true
              --xe_args "--best_model_criterion bleu_4" --xe_inference_model valid.bleu_4.best.pth
              "${scst[@]}" --ensemble_models "") ;;
    seed001_sle) opts=(--rl_algo sle --rl_config conf/train_sle.yaml --ensemble_models "") ;;
    seed001_sll_me) opts=(--rl_algo scst --rl_config conf/train_scst_me.yaml --ensemble_models "") ;;
    seed001_sle_tgif)
        opts=(--xe_config conf/train_xe_tgif.yaml --rl_algo sle --rl_config conf/train_sle_tgif.yaml
              --decode_config conf/decode_tgif.yaml --ensemble_models "") ;;
    seed002_ac) opts=(--rl_algo ac --rl_config conf/train_ac_embedding.yaml --ensemble_models "") ;;
    seed003_mc_pg) opts=(--rl_algo mc_pg --rl_config conf/train_mc_pg.yaml --ensemble_models "") ;;
    seed004_multitask)
        # Li & Gong 2019 sec. 3.2: step 2 REINFORCE+ with the CNN fixed, step 3 multitask from it
        ./run.sh --rl_algo reinforce_plus --rl_config conf/train_reinforce_plus_frozen.yaml \
            --ensemble_models "" "$@"
        opts=(--rl_algo multitask --rl_config conf/train_multitask.yaml
              --rl_init_tag reinforce_plus_train_reinforce_plus_frozen --ensemble_models "") ;;
    sjtu_cnn14_transformer)
        opts=(--feats_config conf/feats_panns.yaml --xe_config conf/train_xe_cnn14_transformer.yaml --word2vec false
              --rl_algo scst --rl_config conf/train_scst_cnn14_transformer.yaml --decode_config conf/decode_beam3.yaml
              --ensemble_models "") ;;
    dcase2024_convnext_transformer)
        opts=(--feats_config conf/feats_convnext.yaml --xe_config conf/train_xe_convnext_transformer.yaml
              --word2vec false --rl_algo "" --decode_config conf/decode_beam3.yaml --ensemble_models "") ;;
esac
./run.sh "${opts[@]}" "$@"
