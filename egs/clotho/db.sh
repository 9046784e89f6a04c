# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Placeholders only: edit locally, do not commit
# site paths. Relative paths are relative to the recipe directory (egs/<name>/).
# Empty or absent: stage 0 (local/download.sh) downloads the corpus there.

# Clotho v2.1, official layout: <split>/<file>.wav + clotho_captions_<split>.csv
CLOTHO=downloads/clotho
