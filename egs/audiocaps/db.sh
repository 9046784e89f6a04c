# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Placeholders only: edit locally, do not commit
# site paths. Relative paths are relative to the recipe directory (egs/<name>/).

# AudioCaps (Kim et al. 2019): <dir>/{train,val,test}.csv from https://github.com/cdjkim/audiocaps
# (dataset/) and the audio in <dir>/audio/ (<youtube_id>_<start_time>.wav or Y<youtube_id>.wav;
# local/download.sh says how to fetch it).
AUDIOCAPS=downloads/audiocaps
