# shellcheck shell=bash disable=SC2034
# Where each corpus lives on this machine. Relative paths are relative to the recipe directory
# (egs/<name>/).

# The event library the soundscapes are mixed from: events.csv + audio, or the ESC-50 layout
# (meta/esc50.csv + audio/). Default: the 74 real recordings shipped beside the repository.
EVENT_LIBRARY=../../../shared/data/event_library
