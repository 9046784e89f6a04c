"""Datasets over dump directories and their batching (:mod:`captionlib.data.datasets`).

This package module holds the option choices shared with the training binaries (their one
definition). It must not import torch (nor the submodules), so that ``--help`` stays fast.
"""

#: What an epoch iterates (``--xe_unit``, ``--rl_unit``): clips, or (clip, caption) pairs.
UNITS = ("clip", "caption")
