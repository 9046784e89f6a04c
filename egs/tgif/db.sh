# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Placeholders only: edit locally, do not commit
# site paths. Relative paths are relative to the recipe directory (egs/<name>/).

# TGIF: TGIF-Release's data/ (tgif-v1.0.tsv, splits/{train,val,test}.txt); the GIFs in ${TGIF}/gifs
TGIF=downloads/tgif
