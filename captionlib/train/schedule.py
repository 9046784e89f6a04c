"""Optimisers and learning-rate schedules of the training options (``optim``, ``scheduler``).

The field's Transformer captioners train with AdamW and a warm-up followed by a decay,
updated every optimizer step: the DCASE 2024 task 6 baseline and CoNeTTE (Labbé et al. 2023)
with a cosine decay, ESPnet with the Noam schedule (``WarmupLR``). The schedule is a
``torch.optim.lr_scheduler.LambdaLR`` whose state (the step count) is saved in
``latest.pth``, so a run killed mid-warm-up resumes with the same learning-rate sequence.
"""

import math
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import nn

from captionlib.train.options import OPTIMIZERS, SCHEDULERS, TrainOptions


def lr_factor(opts: TrainOptions, total_steps: int) -> Callable[[int], float]:
    """The learning-rate factor of optimizer step ``s`` (0-based: the factor of the first
    update is ``f(0)``), by ``opts.scheduler``, with ``w = opts.warmup_steps``:

    * ``none``: 1.
    * ``warmup_cosine``: ``(s + 1) / w`` during the warm-up, then a half cosine from 1 down
      to ``opts.min_lr_ratio`` at ``total_steps`` (DCASE 2024 baseline, CoNeTTE).
    * ``noam``: ``min((s + 1) / w, sqrt(w / (s + 1)))``: the Noam schedule of Vaswani et al.
      2017 scaled so that ``lr`` is its peak, at step ``w`` (ESPnet's ``WarmupLR``).
    * ``warmup_step``: the warm-up, then ``opts.decay_rate`` to the power of the number of
      completed ``opts.decay_steps`` after it.

    Args:
        opts: the training options.
        total_steps: optimizer steps of the whole run (``max_epoch`` epochs).

    Raises:
        ValueError: unknown scheduler, a negative ``warmup_steps``, ``noam`` without warm-up,
            ``decay_steps`` below 1 for ``warmup_step``, or ``min_lr_ratio`` outside [0, 1].
    """
    name, w = opts.scheduler, opts.warmup_steps
    if name not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {name!r}")
    if w < 0 or (name == "noam" and w < 1):
        raise ValueError(f"warmup_steps must be >= {1 if name == 'noam' else 0} for scheduler {name}, got {w}")
    if name == "warmup_step" and opts.decay_steps < 1:
        raise ValueError(f"decay_steps must be >= 1 for scheduler warmup_step, got {opts.decay_steps}")
    if not 0.0 <= opts.min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {opts.min_lr_ratio}")

    def factor(step: int) -> float:
        s = step + 1
        if name == "none":
            return 1.0
        if name == "noam":
            return min(s / w, math.sqrt(w / s))
        if s <= w:
            return s / w
        if name == "warmup_step":
            return opts.decay_rate ** ((s - w) // opts.decay_steps)
        progress = min(1.0, (s - w) / max(1, total_steps - w))
        return opts.min_lr_ratio + (1.0 - opts.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def no_decay(param: nn.Parameter, embeddings: set) -> bool:
    """Whether AdamW leaves ``param`` out of weight decay: biases and the gains of
    normalisation layers (1-d tensors: decaying them shrinks scales and offsets towards
    zero, which regularises nothing), and embedding tables (word and learned position
    embeddings, including a tied output projection: decay pulls the vectors of rare words
    to zero, since they get few gradient updates). This is the grouping of BERT and GPT-2
    and of CoNeTTE's ``use_custom_wd``. ``embeddings``: the ``id`` of every ``nn.Embedding``
    weight of the model."""
    return param.ndim < 2 or id(param) in embeddings


def param_groups(opts: TrainOptions, model: nn.Module, extra: Optional[List[nn.Parameter]] = None,
                 extra_lr: Optional[float] = None, encoder_lr_factor: float = 1.0) -> List[Dict[str, Any]]:
    """Optimizer parameter groups of the trainable parameters of ``model`` (learning rate
    ``opts.lr``) and of ``extra`` (an RL objective's own networks, learning rate
    ``extra_lr``). With ``optim: adamw`` and a weight decay, each is split into decayed and
    exempt parameters (:func:`no_decay`); with Adam every parameter gets ``weight_decay``
    (L2, as before AdamW existed).

    With ``encoder_lr_factor`` other than 1 (XE's ``encoder_conf.lr_factor``), the
    parameters of ``model.encoder`` get groups of their own, after the others', with
    learning rate ``opts.lr * encoder_lr_factor`` (and the same weight-decay split): a
    scheduler scales every group's initial learning rate by its factor
    (``LambdaLR``), so the ratio holds at every step. The first group is then the rest of
    the model's, whose learning rate the trainer logs.

    Raises:
        ValueError: ``encoder_lr_factor`` not a number > 0.
    """
    if not 0 < encoder_lr_factor < math.inf:
        raise ValueError(f"the encoder's learning-rate factor must be > 0, got {encoder_lr_factor}")

    def split(params, lr):
        base = {} if lr is None else {"lr": lr}
        params = [p for p in params if p.requires_grad]
        if opts.optim != "adamw" or opts.weight_decay == 0:
            return [dict(base, params=params)] if params else []
        exempt = [p for p in params if no_decay(p, embeddings)]
        decayed = [p for p in params if not no_decay(p, embeddings)]
        return [g for g in (dict(base, params=decayed), dict(base, params=exempt, weight_decay=0.0)) if g["params"]]

    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    extra_groups = split(extra or [], extra_lr)
    if encoder_lr_factor == 1.0:
        return split(model.parameters(), None) + extra_groups
    encoder = {id(p) for p in model.encoder.parameters()}
    rest = [p for p in model.parameters() if id(p) not in encoder]
    return split(rest, None) + split(model.encoder.parameters(), opts.lr * encoder_lr_factor) + extra_groups


def make_optimizer(opts: TrainOptions, groups: List[Dict[str, Any]]) -> torch.optim.Optimizer:
    """Adam or AdamW (``opts.optim``) over ``groups`` with ``opts.lr`` and ``opts.weight_decay``.

    Raises:
        ValueError: unknown optimizer, or a learning rate that is not positive.
    """
    if opts.optim not in OPTIMIZERS:
        raise ValueError(f"optim must be one of {', '.join(OPTIMIZERS)}, got {opts.optim!r}")
    cls = torch.optim.AdamW if opts.optim == "adamw" else torch.optim.Adam
    return cls(groups, lr=opts.lr, weight_decay=opts.weight_decay)
