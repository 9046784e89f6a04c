"""Training curves of several experiment dirs, seeds merged: one PNG per call.

Each experiment dir holds the ``history.json`` of :class:`captionlib.train.trainer.Trainer`
(a list of per-epoch dicts: ``epoch``, ``train_<stat>``, ``valid_<stat>``). Dirs of the
same seed group (:func:`captionlib.report.results.seed_group`: the names without their
``_seed<N>`` tokens) are drawn as one line, the mean over the seeds at each epoch, with a
shaded band from the minimum to the maximum over the seeds.

Layout: the left column shows the training objective, ``train_loss`` of XE dirs and
``train_reward`` of RL dirs (whose ``config.yaml`` names an ``rl_algo``),
in one sub-panel each since their scales differ; the right panel shows ``valid_cider_d``
per epoch for every group. matplotlib is used through its Agg canvas (no pyplot, no global backend).
"""

import json
import logging
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from captionlib.report.results import is_rl_model, model_kind, read_model_config, seed_group

VALID_KEY = "valid_cider_d"
#: (history key, panel title) of the objective of XE dirs and of RL dirs.
XE_OBJECTIVE = ("train_loss", "XE: train loss (cross-entropy per token)")
RL_OBJECTIVE = ("train_reward", "RL: mean train reward")


def load_history(exp_dir: Union[str, Path]) -> List[Dict[str, float]]:
    """Read ``<exp_dir>/history.json``.

    Returns:
        The per-epoch dicts, each with an ``epoch``.

    Raises:
        FileNotFoundError: naming the file, if the dir has no ``history.json``.
        ValueError: naming the file, if it is not a non-empty JSON list of objects with an ``epoch``.
    """
    path = Path(exp_dir) / "history.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (is {exp_dir} a trained experiment dir?)")
    try:
        history = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read history: {e}") from e
    if not isinstance(history, list) or not history:
        raise ValueError(f"{path}: expected a non-empty list of per-epoch objects")
    for i, h in enumerate(history):
        if not isinstance(h, dict) or not isinstance(h.get("epoch"), (int, float)):
            raise ValueError(f"{path}: entry {i} is not an object with a numeric 'epoch': {h!r}")
    return history


def _curve(history: List[Dict[str, float]], key: str, path: Path) -> Tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of ``key``, skipping epochs without it; ValueError naming ``path`` if none has it."""
    points = [(float(h["epoch"]), float(h[key])) for h in history if isinstance(h.get(key), (int, float))]
    if not points:
        raise ValueError(f"{path}: no epoch has {key!r} (keys: {sorted(history[0])})")
    epochs, values = zip(*points)
    return np.asarray(epochs), np.asarray(values)


def _band(curves: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Tuple[np.ndarray, ...]:
    """Per epoch over the seeds that have it: (epochs, mean, min, max)."""
    by_epoch: Dict[float, List[float]] = {}
    for epochs, values in curves:
        for e, v in zip(epochs.tolist(), values.tolist()):
            by_epoch.setdefault(e, []).append(v)
    epochs = np.asarray(sorted(by_epoch))
    vals = [np.asarray(by_epoch[e]) for e in epochs]
    return (epochs, np.array([v.mean() for v in vals]), np.array([v.min() for v in vals]),
            np.array([v.max() for v in vals]))


def group_exp_dirs(exp_dirs: Sequence[Union[str, Path]]) -> Dict[str, List[Path]]:
    """Group experiment dirs by :func:`seed_group` and give each group a short legend label.

    Names are taken relative to the common parent of the dirs' parents (``exp`` for
    ``exp/xe_a_seed0`` and ``exp/xe_a_seed0/scst_b_seed0``). The label is the model kind of
    :func:`captionlib.report.results.model_kind` (``xe``, ``scst``, ...) when that is
    unique among the groups, else the group's last name component, else its whole name.

    Returns:
        ``{label: [dir, ...]}`` sorted by group name, dirs in the given order.

    Raises:
        ValueError: if no dir is given, a dir is given twice, or from :func:`seed_group`.
    """
    dirs = [Path(os.path.abspath(d)) for d in exp_dirs]
    if not dirs:
        raise ValueError("no experiment dir given")
    if len(set(dirs)) != len(dirs):
        raise ValueError(f"an experiment dir is given twice: {[str(d) for d in exp_dirs]}")
    root = Path(os.path.commonpath([str(d.parent) for d in dirs]))
    groups: Dict[str, List[Path]] = {}
    for d in dirs:
        groups.setdefault(seed_group(d.relative_to(root).as_posix())[0], []).append(d)
    names = sorted(groups)
    labels: Dict[str, str] = {}
    configs = {g: read_model_config(groups[g][0]) for g in names}
    for choose in (lambda g: model_kind(g, configs[g]) or g.rsplit("/", 1)[-1], lambda g: g.rsplit("/", 1)[-1]):
        candidates = {g: choose(g) for g in names if g not in labels}
        taken = list(labels.values()) + list(candidates.values())
        labels.update({g: lab for g, lab in candidates.items() if taken.count(lab) == 1})
    return {labels.get(g, g): groups[g] for g in names}


def plot_history(
    exp_dirs: Sequence[Union[str, Path]], output: Union[str, Path], title: Optional[str] = None
) -> Dict[str, List[Path]]:
    """Draw the training curves of ``exp_dirs`` (seeds merged) into the PNG ``output``.

    Args:
        exp_dirs: experiment dirs, each with a ``history.json``; those of one seed group
            (e.g. ``exp/xe_a_seed0``, ``exp/xe_a_seed1``) become one line with a min-max band.
        output: PNG file to write (replaced atomically; parent dirs are created).
        title: figure title (default: none).

    Returns:
        The groups drawn, ``{legend label: [dir, ...]}`` (see :func:`group_exp_dirs`).

    Raises:
        FileNotFoundError: naming the file, for a dir without ``history.json``.
        ValueError: naming the file, for a malformed history or one without its objective
            (``train_loss`` for XE, ``train_reward`` for RL dirs) or ``valid_cider_d``.
    """
    groups = group_exp_dirs(exp_dirs)
    curves: Dict[str, Dict[str, list]] = {}  # label -> {"objective" | VALID_KEY: [(epochs, values)]}
    kinds: Dict[str, Tuple[str, str]] = {}
    for label, dirs in groups.items():
        kinds[label] = RL_OBJECTIVE if is_rl_model(read_model_config(dirs[0])) else XE_OBJECTIVE
        curves[label] = {"objective": [], VALID_KEY: []}
        for d in dirs:
            history = load_history(d)
            path = d / "history.json"
            curves[label]["objective"].append(_curve(history, kinds[label][0], path))
            curves[label][VALID_KEY].append(_curve(history, VALID_KEY, path))

    objectives = [k for k in (XE_OBJECTIVE, RL_OBJECTIVE) if k in kinds.values()]
    fig = Figure(figsize=(12, 3.6 * len(objectives) + 0.6))
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(len(objectives), 2)
    left = {}
    for row, objective in enumerate(objectives):
        ax = fig.add_subplot(grid[row, 0], sharex=left[objectives[0]] if left else None)
        ax.set_title(f"training objective: {objective[1]}", fontsize=10)
        ax.set_ylabel(objective[0])
        left[objective] = ax
    left[objectives[-1]].set_xlabel("epoch")
    right = fig.add_subplot(grid[:, 1])
    right.set_title("validation CIDEr-D", fontsize=10)
    right.set_xlabel("epoch")
    right.set_ylabel(VALID_KEY)
    colors = [f"C{i % 10}" for i in range(len(groups))]
    for color, label in zip(colors, groups):
        n = len(groups[label])
        legend = f"{label} ({n} seeds)" if n > 1 else label
        for ax, key in ((left[kinds[label]], "objective"), (right, VALID_KEY)):
            epochs, mean, low, high = _band(curves[label][key])
            ax.plot(epochs, mean, color=color, marker="." if len(epochs) < 30 else None, label=legend)
            if n > 1:
                ax.fill_between(epochs, low, high, color=color, alpha=0.2, linewidth=0)
    for ax in list(left.values()) + [right]:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".tmp_{output.name}")
    fig.savefig(tmp, format="png", dpi=100)
    tmp.replace(output)
    logging.info("wrote %s (%s)", output, ", ".join(f"{k}: {len(v)} dirs" for k, v in groups.items()))
    return groups
