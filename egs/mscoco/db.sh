# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Placeholders only: edit locally, do not commit
# site paths. Relative paths are relative to the recipe directory (egs/<name>/).

# MSCOCO: dataset_coco.json (Karpathy split) + train2014/ val2014/ images or precomputed features
COCO=downloads/coco
