# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Placeholders only: edit locally, do not commit
# site paths. Relative paths are relative to the recipe directory (egs/<name>/).

# MSR-VTT: train_val_videodatainfo.json + test_videodatainfo.json (+ TrainValVideo/ TestVideo/ or frame features)
MSRVTT=downloads/msrvtt
