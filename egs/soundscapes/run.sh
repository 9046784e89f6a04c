#!/usr/bin/env bash
# Soundscapes: a learnable captioning corpus mixed from real recordings (egs/soundscapes/README.md).
# Stage 0 mixes 10-s clips of 1-3 events from the event library with five captions each;
# stages 1-9 are the Clotho pipeline. XE, every RL objective and their word-level ensemble are
# trained with 3 seeds; RESULTS.md gives mean ± std over the seeds, paired-bootstrap p-values of
# each RL model against its XE model, the corpus prior and the "deaf" evaluation_deaf rows.
# Each seed paper's own system (rows of RESULTS.md): ./run_preset.sh <preset> (see README.md).
# Word2Vec (--word2vec true, the seed000_crnn_w presets) matches the decoder's 128-d embeddings.
# Options: ./run.sh --help. Seed-sized models (slower):
#   ./run.sh --feats_config conf/feats_logmel_seed.yaml \
#       --xe_config conf/tuning/train_xe_crnn_gru.yaml --rl_algo scst --rl_config conf/tuning/train_scst_crnn_gru.yaml
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# RESULTS.md also compares, seed by seed, the CNN10 pretrained by audio tagging with the CNN10
# trained from scratch (./run_pretrained.sh), for XE and for SCST from each
cnn10=xe_train_xe_cnn10_logmel_word
cnn10_pretrained=xe_train_xe_cnn10_pretrained_logmel_word
compare="${cnn10}=${cnn10_pretrained} ${cnn10}/scst_train_scst_lr0.0001=${cnn10_pretrained}/scst_train_scst_lr0.0001"

# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="Soundscapes: a learnable captioning corpus mixed from real recordings; XE, every RL objective, 3 seeds"
recipe_help "${recipe_summary}" "" "$@"

exec ./caption.sh --stage 0 \
    --train_sets "development" --valid_set validation --test_sets evaluation --xe_test_sets evaluation_deaf \
    --nj 2 --inference_nj 2 \
    --feats_config conf/feats_logmel.yaml \
    --xe_config conf/train_xe.yaml \
    --word2vec_args "--vector_size 128" \
    --rl_algo "scst reinforce_plus sle ac mc_pg multitask" \
    --seeds "0 1 2" \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 5 \
    --ensemble_models all \
    --corpus_prior true \
    --metrics bleu,meteor,rouge_l,cider_d \
    --results_compare "${compare}" \
    "$@"
