"""Strict loading of published (third-party) encoder checkpoints into captionlib modules.

A checkpoint loaded into a model whose keys only partly match trains without error and gives
worse captions, so every key is accounted for: the module's own keys must all be in the
checkpoint with the module's shapes, and a checkpoint key the module lacks must be one the
caller names (``accounted``, e.g. the authors' own front end, checked separately). Anything
else is a :class:`CheckpointMismatchError` that lists every offending key; nothing is loaded
then. Files are read with :func:`captionlib.utils.fileio.load_checkpoint` (``torch.load``
with ``weights_only=True``), so no code in them is run; :func:`read_state_dict` also lets
through numpy arrays and scalars of numbers
(:func:`~captionlib.utils.fileio.numpy_safe_globals`), which published checkpoints hold
beside their weights.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import torch
from torch import nn

from captionlib.utils.fileio import load_checkpoint


class CheckpointMismatchError(ValueError):
    """The keys or shapes of a checkpoint differ from a module's.

    Attributes:
        path: the checkpoint file.
        missing: keys of the module (or required ``accounted`` keys) absent from the checkpoint.
        unexpected: checkpoint keys neither in the module nor accounted for.
        mis_shaped: ``(key, checkpoint shape, expected shape)`` for keys present in both.
    """

    def __init__(self, path: str, module: str, missing: List[str], unexpected: List[str],
                 mis_shaped: List[Tuple[str, Tuple[int, ...], Tuple[int, ...]]]):
        parts = []
        if missing:
            parts.append(f"missing keys {missing}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected}")
        if mis_shaped:
            parts.append("mis-shaped keys [" + ", ".join(
                f"{k}: checkpoint {tuple(a)}, expected {tuple(b)}" for k, a, b in mis_shaped) + "]")
        super().__init__(f"{path}: the checkpoint does not match {module} (nothing was loaded): " + "; ".join(parts))
        self.path, self.missing, self.unexpected, self.mis_shaped = path, missing, unexpected, mis_shaped

    def with_hint(self, hint: str) -> "CheckpointMismatchError":
        """The error with ``hint`` (what to change) appended to its message."""
        self.args = (f"{self.args[0]}; {hint}",)
        return self

    def reworded(self, message: str) -> "CheckpointMismatchError":
        """The error with ``message`` in place of its own (the keys stay in its attributes), for
        a mismatch whose cause is known, e.g. a features config that is not the checkpoint's."""
        self.args = (message,)
        return self


def read_state_dict(path: str, map_location: str = "cpu") -> Dict[str, torch.Tensor]:
    """The state dict of a checkpoint file: its ``"model"`` entry when it has one (the layout
    of PANNs' checkpoints, ``{"iteration": int, "model": state_dict, "sampler": ...}``), else
    the file's mapping. The file's other entries are not used (one log line names them).

    The file is read without running code from it (``torch.load(weights_only=True)`` through
    :func:`~captionlib.utils.fileio.load_checkpoint`), letting through numpy arrays and
    scalars of numbers (:func:`~captionlib.utils.fileio.numpy_safe_globals`: the authors' sampler state) besides
    tensors and plain Python values; any other class or function in the file is refused.
    (``torch.serialization.safe_globals`` with ``(function, name)`` pairs: torch >= 2.6; an
    older torch without ``safe_globals`` refuses such files.)

    Raises:
        FileNotFoundError: no such file.
        UnsafeFileError: (a ValueError) the file holds other classes or functions, naming them
            (see :func:`~captionlib.utils.fileio.load_checkpoint`).
        ValueError: an unreadable file, or one whose state dict is not a mapping of names to
            tensors (naming the file and the first offending entry).
    """
    obj = load_checkpoint(path, map_location, numpy_values=True)
    state = obj["model"] if isinstance(obj, Mapping) and "model" in obj else obj
    if state is not obj:
        others = sorted(str(k) for k in obj if k != "model")
        if others:
            logging.info("%s: loading its 'model' entry; entries %s are not used", path, others)
    return check_state_dict(state, path)


def check_state_dict(state: Any, path: str) -> Dict[str, torch.Tensor]:
    """``state`` as a dict, once it is a mapping of names to tensors.

    Raises:
        ValueError: not a mapping, or an entry that is not a tensor under a string name
            (naming ``path`` and the first such entry).
    """
    if not isinstance(state, Mapping):
        raise ValueError(f"{path}: not a state dict (a {type(state).__name__}, expected a mapping of tensors)")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise ValueError(f"{path}: not a state dict: entry {key!r} is a {type(value).__name__}, not a tensor")
    return dict(state)


def require_checkpoint(path: str, source: str) -> None:
    """Raise FileNotFoundError unless ``path`` is a file, saying where users get the published
    checkpoints (``source``): captionlib downloads nothing."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file. captionlib downloads nothing: download the "
                                f"checkpoint yourself ({source}) and give its path")


def check_keys(module: nn.Module, state: Mapping[str, torch.Tensor], path: str,
               accounted: Mapping[str, Sequence[int]] = ()) -> None:
    """Check that ``state`` has exactly ``module``'s keys and shapes, plus the ``accounted`` ones.

    Args:
        module: the module to fill (its ``state_dict()`` keys and shapes are the reference).
        state: checkpoint state dict (name -> tensor).
        path: the file, named in errors.
        accounted: checkpoint keys that are not the module's, with their required shapes
            (e.g. the authors' front end): they must be present; the caller checks their values.

    Raises:
        CheckpointMismatchError: (a ValueError) any missing, unexpected or mis-shaped key,
            listing all of them.
    """
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    expected.update({k: tuple(v) for k, v in dict(accounted).items()})
    missing = sorted(k for k in expected if k not in state)
    unexpected = sorted(k for k in state if k not in expected)
    mis_shaped = [(k, tuple(state[k].shape), expected[k]) for k in sorted(expected)
                  if k in state and tuple(state[k].shape) != expected[k]]
    if missing or unexpected or mis_shaped:
        raise CheckpointMismatchError(path, type(module).__name__, missing, unexpected, mis_shaped)


def load_strict(module: nn.Module, state: Mapping[str, torch.Tensor], path: str,
                accounted: Mapping[str, Sequence[int]] = ()) -> None:
    """:func:`check_keys`, then load every key of ``state`` but the ``accounted`` ones into
    ``module``: all or nothing.

    Raises:
        CheckpointMismatchError: as :func:`check_keys`; nothing is loaded then.
    """
    check_keys(module, state, path, accounted)
    module.load_state_dict({k: v for k, v in state.items() if k not in dict(accounted)}, strict=True)
