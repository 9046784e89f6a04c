# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Placeholders only: edit locally, do not commit
# site paths. Relative paths are relative to the recipe directory (egs/<name>/).

# MSVD: "MSR Video Description Corpus.csv" + youtube_mapping.txt (+ YouTubeClips/ or frame features)
MSVD=downloads/msvd
