"""Audio tagging pretraining of a captioner's encoder (``caption_pretrain_tagging``).

PANNs (Kong et al., "PANNs: Large-Scale Pretrained Audio Neural Networks for Audio Pattern
Recognition", IEEE/ACM TASLP 28, 2020, sec. III) train CNN14 / CNN10 on AudioSet's clip-level
labels: the clip embedding through the ``fc_audioset`` head, a sigmoid per class and the
binary cross-entropy summed over the classes, averaged over clips; the model is selected by
the mean average precision (mAP) of held-out clips. This module trains a captioner's encoder
the same way on any clip labels and writes the best epoch as a checkpoint in the authors'
layout, ``{"iteration": <updates>, "model": <state dict>}`` with their front-end tensors, so
that ``encoder_conf: {pretrained: <output_dir>/pretrained.pth, classes_num: <classes>}``
loads it strictly, as it loads the published ``Cnn10_mAP=0.380.pth``.

Labels come from a CSV (``file_name`` and ``keywords`` columns by default: Clotho's
``clotho_metadata_<split>.csv``, whose keywords are ``;``-separated; egs/soundscapes writes its
event labels in that layout) or, where a corpus has none, from the captions
(:func:`caption_keywords`).
"""

import csv
import functools
import io
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from captionlib.data.datasets import AudioRefsDataset, pad_feats
from captionlib.io.datadir import feats_dim, read_scp, read_utf8
from captionlib.models import panns
from captionlib.models.captioner import ENCODERS, check_keys
from captionlib.train.fit import fingerprint, fit, write_config
from captionlib.train.options import TaggingOptions
from captionlib.train.trainer import set_seed
from captionlib.train.xe import FEATS_CONFIG, read_feats_config
from captionlib.utils.cli import check_options
from captionlib.utils.distributed import init_distributed
from captionlib.utils.fileio import atomic_save, atomic_write_text, load_checkpoint

#: Encoders that can be pretrained, with the module name of their tagging head. Their authors'
#: checkpoints all hold torchlibrosa's front end (:func:`captionlib.models.panns.front_end_tensors`).
TAGGING_HEADS = {"cnn14": "fc_audioset", "cnn10": "fc_audioset", "convnext": "head_audioset"}
#: the authors'-layout checkpoint written into the output dir, and its class list
PRETRAINED_FILE, CLASSES_FILE = "pretrained.pth", "classes.txt"


def read_labels_csv(path: str, key_column: str = "file_name", label_column: str = "keywords",
                    separator: str = ";") -> Dict[str, List[str]]:
    """Clip labels from a CSV with a header: ``{key: [label, ...]}``, labels split on
    ``separator`` and stripped (empty ones dropped: a clip may have no label).

    Raises:
        ValueError: a missing file or column, a duplicate key or an empty key, naming
            ``<path>:<line>``.
    """
    rows = csv.DictReader(io.StringIO(read_utf8(path, ValueError, "labels CSV"), newline=""))
    for column in (key_column, label_column):
        if column not in (rows.fieldnames or []):
            raise ValueError(f"{path}:1: no {column!r} column (header: {','.join(rows.fieldnames or [])})")
    out: Dict[str, List[str]] = {}
    for row in rows:
        key, line = (row[key_column] or "").strip(), rows.line_num
        if not key:
            raise ValueError(f"{path}:{line}: empty {key_column}")
        if key in out:
            raise ValueError(f"{path}:{line}: {key_column} {key!r} given twice")
        out[key] = [s.strip() for s in (row[label_column] or "").split(separator) if s.strip()]
    return out


def clip_labels(data_dir: str, clips: Sequence[str], labels: Mapping[str, List[str]], source: str,
                key_column: str = "file_name") -> Dict[str, List[str]]:
    """The labels of each clip of a dump dir, from :func:`read_labels_csv` keyed by file name
    (through ``<data_dir>/aud2name``, the file name of each clip id) or by clip id.

    Raises:
        ValueError: clips without a row in ``source`` (counted, the first ones named).
        FileNotFoundError: ``key_column`` is ``file_name`` and the dump dir has no aud2name.
    """
    names = {c: c for c in clips}
    if key_column == "file_name":
        path = Path(data_dir) / "aud2name"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; a labels CSV keyed by file_name needs it (or key by clip id)")
        names = read_scp(path)
    missing = [c for c in clips if names.get(c) not in labels]
    if missing:
        raise ValueError(f"{source}: no labels for {len(missing)} of the {len(clips)} clips of {data_dir}, e.g. "
                         f"{[names.get(c, c) for c in missing[:3]]}")
    return {c: labels[names[c]] for c in clips}


def caption_keywords(refs: Mapping[str, Sequence[Sequence[str]]], num_keywords: Optional[int],
                     min_captions: int = 2) -> Tuple[List[str], Dict[str, List[str]]]:
    """Keywords from captions, for corpora without tags: a clip's labels are the words that
    at least ``min_captions`` of its captions contain; the classes are the ``num_keywords``
    words that are labels of the most clips, English stop words (scikit-learn's list)
    excluded. (Keyword labels from captions: Koizumi et al., "A Transformer-based audio
    captioning model with keyword estimation", Interspeech 2020; Clotho's own keywords are
    Freesound tags.)

    Args:
        refs: ``{clip: [caption words, ...]}`` (e.g. :attr:`AudioRefsDataset.refs`).
        num_keywords: the number of classes (``None``: every word that is a label).

    Returns:
        (the classes, most frequent first; ``{clip: [its labels among them]}``).
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    per_clip = {}
    for clip, captions in refs.items():
        counts = Counter(w for words in captions for w in set(words))
        per_clip[clip] = {w for w, n in counts.items() if n >= min_captions and w not in ENGLISH_STOP_WORDS}
    freq = Counter(w for words in per_clip.values() for w in words)
    classes = [w for w, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:num_keywords]]
    keep = set(classes)
    return classes, {c: sorted(words & keep) for c, words in per_clip.items()}


def label_matrix(clips: Sequence[str], labels: Mapping[str, List[str]], classes: Sequence[str]) -> np.ndarray:
    """Multi-hot targets (clips, classes) float32; labels outside ``classes`` are ignored."""
    index = {c: i for i, c in enumerate(classes)}
    out = np.zeros((len(clips), len(classes)), dtype=np.float32)
    for row, clip in enumerate(clips):
        for label in labels[clip]:
            if label in index:
                out[row, index[label]] = 1.0
    return out


class Tagger(nn.Module):
    """An encoder and its tagging head (module ``head`` of the encoder: :data:`TAGGING_HEADS`):
    clip logits (batch, classes) of features (batch, frames, feats_dim) and lengths (batch,),
    the head applied to the encoder's clip vector ``v`` (PANNs' ``clipwise_output`` before
    its sigmoid)."""

    def __init__(self, encoder: nn.Module, head: str):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        return getattr(self.encoder, self.head)(self.encoder(feats, lens)[0])


def collate_tagging(batch, targets: Mapping[str, np.ndarray]):
    """Collate :class:`AudioRefsDataset` items to ``(feats (batch, frames, dim), lens
    (batch,), targets (batch, classes))``."""
    feats, lens = pad_feats([b[1] for b in batch])
    return feats, lens, torch.from_numpy(np.stack([targets[b[0]] for b in batch]))


def tagging_objective(model: Tagger, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Binary cross-entropy summed over classes, averaged over clips (PANNs' ``clip_bce``
    is the mean over both; the sum keeps a rare class's gradient independent of the number
    of classes); stats ``loss``."""
    dev = next(model.parameters()).device
    feats, lens, targets = (t.to(dev) for t in batch)
    logits = model(feats, lens)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / len(feats)
    return loss, {"loss": loss.item()}


def tagging_validation(dataset: AudioRefsDataset, targets: np.ndarray, device: torch.device, batch_size: int):
    """``validate(model) -> {"map", "loss", "classes_scored"}``: the mean over classes with at
    least one positive clip of scikit-learn's ``average_precision_score`` (the mAP of PANNs'
    evaluation), and the validation loss of :func:`tagging_objective`."""
    from sklearn.metrics import average_precision_score

    scored = targets.sum(0) > 0

    @torch.no_grad()
    def validate(model: Tagger) -> Dict[str, float]:
        logits = []
        for start in range(0, len(dataset.clips), batch_size):
            feats, lens = pad_feats([dataset.feats[c] for c in dataset.clips[start: start + batch_size]])
            logits.append(model(feats.to(device), lens.to(device)).float().cpu())
        out = torch.cat(logits)
        y = torch.from_numpy(targets)
        loss = float(nn.functional.binary_cross_entropy_with_logits(out, y, reduction="sum")) / len(y)
        ap = average_precision_score(targets[:, scored], out.numpy()[:, scored], average=None) if scored.any() else []
        return {"map": float(np.mean(ap)) if len(ap) else 0.0, "loss": loss, "classes_scored": float(scored.sum())}

    return validate


def authors_checkpoint(model_file: str, feats_config: Mapping[str, Any], path: str, iteration: int) -> None:
    """Write the encoder of a tagging model file (``valid.map.best.pth``) as a checkpoint in
    its authors' layout, ``{"iteration": <updates>, "model": <front-end tensors + encoder
    state dict>}`` (:func:`captionlib.models.panns.front_end_tensors`), atomically."""
    obj = load_checkpoint(model_file)
    state = {k[len("encoder."):]: v for k, v in obj["model"].items() if k.startswith("encoder.")}
    state.update(panns.front_end_tensors(feats_config))
    atomic_save({"iteration": int(iteration), "model": state}, path)


def _labels(opts: TaggingOptions, train: AudioRefsDataset, valid: AudioRefsDataset):
    """(classes, train labels, valid labels) of the options: the CSVs, or caption keywords."""
    if opts.keywords_from_captions:
        classes, train_labels = caption_keywords(train.refs, opts.keywords_from_captions, opts.keywords_min_captions)
        _, valid_labels = caption_keywords(valid.refs, None, opts.keywords_min_captions)
        return classes, train_labels, valid_labels
    if not (opts.train_labels and opts.valid_labels):
        raise ValueError("give train_labels and valid_labels (labels CSVs), or keywords_from_captions")
    labels = []
    for csv_path, data in ((opts.train_labels, train), (opts.valid_labels, valid)):
        rows = read_labels_csv(csv_path, opts.key_column, opts.label_column, opts.label_separator)
        labels.append(clip_labels(data.data_dir, data.clips, rows, csv_path, opts.key_column))
    classes = sorted({label for clip_labels_ in labels[0].values() for label in clip_labels_})
    return classes, labels[0], labels[1]


def check_tagging_options(opts: TaggingOptions) -> None:
    """Check tagging options before anything is loaded (``caption_pretrain_tagging`` runs it at
    parse time): :func:`~captionlib.utils.cli.check_options`, an encoder with a tagging head
    (:data:`TAGGING_HEADS`) and the keys of ``encoder_conf`` (not ``classes_num``: it is set from
    the labels).

    Raises:
        ValueError: one line naming the option or key.
    """
    check_options(opts)
    if opts.encoder not in TAGGING_HEADS:
        raise ValueError(f"encoder {opts.encoder!r} cannot be pretrained here; choose from {sorted(TAGGING_HEADS)}")
    if "classes_num" in (opts.encoder_conf or {}):
        raise ValueError("encoder_conf.classes_num is set from the labels (the classes of the train clips); "
                         "leave it out")
    check_keys(ENCODERS[opts.encoder], f"encoder_conf (encoder {opts.encoder!r})", 1, dict(opts.encoder_conf or {}))


def train_tagging(opts: TaggingOptions) -> str:
    """Train ``opts.encoder`` on clip labels and write ``<output_dir>/pretrained.pth`` (the
    epoch with the best validation mAP, or the lowest validation loss when no validation clip
    has a label among the classes; in the authors' layout: :func:`authors_checkpoint`)
    and ``<output_dir>/classes.txt`` (the class of each output of ``fc_audioset``, in order).

    The encoder takes the dump dir's features as they are (no global normalisation: PANNs'
    ``bn0`` normalises each mel bin), as XE feeds a pretrained encoder. Training is the
    captioners' trainer: resumable, atomic checkpoints, ``valid.map.best.pth``.

    With ``opts.check_only``, the options are checked (:func:`check_tagging_options`) and
    nothing is loaded or written.

    Returns:
        The path of the checkpoint.

    Raises:
        ValueError: bad options (:func:`check_tagging_options`), labels (see
            :func:`read_labels_csv`, :func:`clip_labels`), no class, or an encoder that cannot
            be pretrained here.
        FileNotFoundError: a missing dump dir file, labels CSV or ``feats_config.yaml``.
    """
    check_tagging_options(opts)
    if opts.check_only:
        return str(Path(opts.output_dir) / PRETRAINED_FILE)
    feats_config = read_feats_config(opts.train_data_dir)
    panns.front_end_tensors(feats_config)  # fail early on a config without fs
    set_seed(opts.seed)
    device = init_distributed(opts.ngpu)
    train, valid = AudioRefsDataset(opts.train_data_dir), AudioRefsDataset(opts.valid_data_dir)
    classes, train_labels, valid_labels = _labels(opts, train, valid)
    if not classes:
        raise ValueError(f"no class: the train clips of {opts.train_data_dir} have no label")
    encoder_conf = dict(opts.encoder_conf, classes_num=len(classes))
    model_conf = {"encoder": opts.encoder, "encoder_conf": encoder_conf, "feats_dim": feats_dim(opts.train_data_dir)}
    model = Tagger(ENCODERS[opts.encoder](model_conf["feats_dim"], **encoder_conf), TAGGING_HEADS[opts.encoder])
    model.to(device)
    out = Path(opts.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CLASSES_FILE, "".join(f"{c}\n" for c in classes))
    write_config(opts)
    train_targets = dict(zip(train.clips, label_matrix(train.clips, train_labels, classes)))
    valid_targets = label_matrix(valid.clips, valid_labels, classes)
    logging.info("%d classes; %d train clips (%.2f labels per clip), %d valid clips (%d classes with a positive)",
                 len(classes), len(train.clips), float(np.mean([t.sum() for t in train_targets.values()])),
                 len(valid.clips), int((valid_targets.sum(0) > 0).sum()))
    if opts.dry_run:
        return str(out / PRETRAINED_FILE)
    inputs = {"train_feats": fingerprint(Path(opts.train_data_dir) / "feats.scp"), "classes": fingerprint(classes),
              "model_conf": fingerprint(model_conf), "labels": fingerprint([train_labels, valid_labels]),
              "feats_config": fingerprint(str(Path(opts.train_data_dir) / FEATS_CONFIG))}
    criteria = [("map", "max"), ("loss", "min")]
    if not valid_targets.any():
        logging.warning("no validation clip has a positive label of the %d classes: the mAP is undefined (0), the "
                        "epochs are ranked by the validation loss", len(classes))
        criteria.reverse()
    history = fit(opts, model, tagging_objective, train, functools.partial(collate_tagging, targets=train_targets),
                  tagging_validation(valid, valid_targets, device, opts.batch_size), criteria, device,
                  {"model_conf": model_conf, "token_list": classes}, inputs=inputs)
    metric, mode = criteria[0]
    best = (max if mode == "max" else min)(history, key=lambda h: h[f"valid_{metric}"])
    path = str(out / PRETRAINED_FILE)
    iteration = sum(int(h["steps"]) for h in history if h["epoch"] <= best["epoch"])
    authors_checkpoint(str(out / f"valid.{metric}.best.pth"), feats_config, path, iteration)
    logging.info("%s: epoch %d (valid mAP %.4f, loss %.4f) in the authors' layout, %d classes (%s); load it with "
                 "encoder_conf: {pretrained: %s, classes_num: %d}", path, best["epoch"], best["valid_map"],
                 best["valid_loss"], len(classes), out / CLASSES_FILE, path, len(classes))
    return path
