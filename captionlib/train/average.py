"""Average the weights of the n best epoch model files of an experiment (stage 7)."""

import json
import logging
from pathlib import Path

from captionlib.utils.fileio import atomic_save, load_checkpoint, read_yaml_mapping


def kept_by(exp_dir: str) -> str:
    """The metric an experiment kept its epoch files by: ``best_model_criterion`` of its
    ``config.yaml`` (``cider_d`` when the file or the key is missing)."""
    conf = read_yaml_mapping(Path(exp_dir) / "config.yaml", "the experiment's options")
    return (conf or {}).get("best_model_criterion") or "cider_d"


def average_checkpoints(exp_dir: str, output: str, metric: str = "cider_d", nbest: int = 5, mode: str = "max") -> Path:
    """Average the ``nbest`` kept ``<N>epoch.pth`` files ranked by ``valid_<metric>``.

    The trainer keeps the ``keep_nbest`` best epoch files by its first criterion (see
    :func:`kept_by`); ranking by another metric, or asking for more epochs than were kept,
    averages fewer or other epochs than asked, with a warning.

    Floating-point tensors are averaged; integer buffers (e.g. BatchNorm's
    ``num_batches_tracked``) are taken from the best epoch. The output is a model file
    like the inputs, with ``averaged_epochs`` recorded.

    Args:
        exp_dir: experiment directory with ``history.json`` and epoch model files.
        output: path of the averaged model file.
        metric: validation metric (key ``valid_<metric>`` in history.json).
        nbest: number of epochs to average (fewer if fewer were kept).
        mode: ``max`` or ``min`` (which end of the metric is best).

    Raises:
        FileNotFoundError: no history.json or no kept epoch file.
    """
    exp = Path(exp_dir)
    hist_path = exp / "history.json"
    if not hist_path.is_file():
        raise FileNotFoundError(f"{hist_path}: missing (is {exp} a finished training dir?)")
    history = [h for h in json.loads(hist_path.read_text()) if f"valid_{metric}" in h]
    ranked = sorted(history, key=lambda h: h[f"valid_{metric}"], reverse=(mode == "max"))
    epochs = [int(h["epoch"]) for h in ranked if (exp / f"{int(h['epoch'])}epoch.pth").is_file()][:nbest]
    if not epochs:
        raise FileNotFoundError(f"{exp}: no <N>epoch.pth file left to average")
    wanted = [int(h["epoch"]) for h in ranked[:nbest]]
    if epochs != wanted:
        logging.warning("%s: the %d best epochs by valid %s are %s, but only %s of them have an epoch file "
                        "(kept by valid %s, keep_nbest); averaging %s", exp, nbest, metric, wanted,
                        sorted(set(epochs) & set(wanted)), kept_by(exp_dir), epochs)
    logging.info("averaging epochs %s of %s by valid %s", epochs, exp, metric)
    avg = None
    for e in epochs:
        obj = load_checkpoint(exp / f"{e}epoch.pth")
        if avg is None:
            avg, base = {k: v.clone().double() if v.is_floating_point() else v for k, v in obj["model"].items()}, obj
        else:
            for k, v in obj["model"].items():
                if v.is_floating_point():
                    avg[k] += v.double()
    model = {k: (v / len(epochs)).to(base["model"][k].dtype) if v.is_floating_point() else v for k, v in avg.items()}
    out = dict(base, model=model, averaged_epochs=epochs)
    atomic_save(out, output)
    return Path(output)
