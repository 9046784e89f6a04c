#!/usr/bin/env bash
# CI recipe of egs/mscoco: every stage on 12 real photos (coco_fixture: scikit-image's sample
# images with captions we wrote, in Karpathy's dataset_coco.json format) through a randomly
# initialised CNN (conf/feats_cnn.yaml), a tiny Top-Down attention captioner, and every RL
# objective. Scored without the Java metrics (METEOR, SPICE) to stay fast; the real recipe scores all.
# Options: ./run.sh --help
# Set bash to 'debug' mode, it will exit on: -e 'error', -u 'undefined variable', -o ... 'error in pipeline'
set -euo pipefail

# ./run.sh --help: this recipe's options first, then caption.sh's (with the values this run.sh sets)
. utils/recipe_help.sh
recipe_summary="CI recipe of egs/mscoco: every stage on 12 real photos"
recipe_help "${recipe_summary}" "" "$@"

exec ./caption.sh \
    --local_data_opts "--coco_root coco_fixture --image_root coco_fixture/images" \
    --train_sets train --valid_set val --test_sets test \
    --nj 2 --inference_nj 2 \
    --feats_type cnn \
    --feats_config conf/feats_cnn.yaml \
    --xe_config conf/train_xe.yaml \
    --rl_algo "scst reinforce_plus sle ac mc_pg multitask" \
    --decode_config conf/decode.yaml \
    --num_diversity_samples 3 \
    --ensemble_models all \
    --metrics bleu,rouge_l,cider_d \
    "$@"
