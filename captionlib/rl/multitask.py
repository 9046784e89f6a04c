"""Multitask reinforcement learning: REINFORCE+ plus attribute prediction.

Li and Gong, "End-to-End Video Captioning with Multitask Reinforcement Learning", WACV 2019
(seed 004), sec. 3.2 step 3, eq. 8::

    L = alpha * L_r + (1 - alpha) * L_a,          alpha = 0.95

* ``L_r``: REINFORCE+ (seed 004 eq. 7) with ``num_samples`` samples per clip and the greedy
  (self-critical) or leave-one-out mean baseline, computed by
  :meth:`PolicyGradient.loss_from_embedding` on the *same* audio embedding ``v`` as the
  attribute branch, so the encoder receives both gradients (``--freeze_encoder false``).
* ``L_a = -(1/N) sum_i [y_i log q_i + (1 - y_i) log(1 - q_i)]`` averaged over the clips of
  the batch: sigmoid binary cross-entropy of an attribute head (one linear layer on
  ``v`` (batch, embed_size) -> N logits; the paper's "attribute prediction layer" with
  sigmoid outputs, fed by the pooled encoder output).

Attributes ("the most frequent words including nouns, verbs and adjectives", sec. 3.2): the
``num_attributes`` most frequent *content* words of the train references, counted over all
word occurrences of all cleaned references, ties broken alphabetically. A word is a content
word when it is not in scikit-learn's English stop-word list
(``sklearn.feature_extraction.text.ENGLISH_STOP_WORDS``, 318 words) and contains a letter.
The target ``y`` of a clip is multi-hot: attribute ``i`` is 1 when it occurs in *any* of the
clip's references.
"""

import logging
from collections import Counter
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from captionlib.rl.policy_gradient import PolicyGradient
from captionlib.rl.rewards import Reward
from captionlib.text.tokenizer import Tokenizer


def stop_words() -> frozenset:
    """scikit-learn's English stop-word list (the one used for attribute mining)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def is_content_word(word: str, stop: Iterable[str]) -> bool:
    """True when ``word`` is not a stop word and has at least one letter."""
    return word not in stop and any(ch.isalpha() for ch in word)


def attribute_vocabulary(
    refs: Mapping[str, Sequence[Sequence[str]]], num_attributes: int, stop: Optional[Iterable[str]] = None
) -> List[str]:
    """The ``num_attributes`` most frequent content words of ``refs``.

    Args:
        refs: ``{clip_id: [[word, ...], ...]}`` cleaned train references.
        num_attributes: N; when larger than the number of distinct content words, all of
            them are used (logged as a warning).
        stop: stop words (default :func:`stop_words`).

    Returns:
        Words ordered by decreasing occurrence count, ties alphabetically.

    Raises:
        ValueError: ``num_attributes < 1`` or no content word in ``refs``.
    """
    if num_attributes < 1:
        raise ValueError(f"num_attributes must be >= 1, got {num_attributes}")
    stop = stop_words() if stop is None else frozenset(stop)
    counts: Counter = Counter(
        w for caps in refs.values() for cap in caps for w in cap if is_content_word(w, stop)
    )
    if not counts:
        raise ValueError("no content word in the train references: cannot build attributes")
    if num_attributes > len(counts):
        logging.warning(
            "num_attributes=%d exceeds the %d content words of the train references; using all %d",
            num_attributes, len(counts), len(counts),
        )
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [w for w, _ in ranked[:num_attributes]]


def attribute_targets(
    refs: Mapping[str, Sequence[Sequence[str]]], vocabulary: Sequence[str]
) -> Dict[str, List[int]]:
    """``{clip_id: sorted attribute indices present in any reference of the clip}``."""
    index = {w: i for i, w in enumerate(vocabulary)}
    return {
        clip: sorted({index[w] for cap in caps for w in cap if w in index}) for clip, caps in refs.items()
    }


class MultiTask(PolicyGradient):
    """Objective ``(model, (clip_ids, feats, feat_lens)) -> (loss, stats)`` of seed 004 step 3.

    Args:
        reward, tokenizer, num_samples, baseline, max_len, temperature, baseline_encoding:
            REINFORCE+ (see :class:`PolicyGradient`).
        train_refs: ``{clip_id: [[word, ...], ...]}`` cleaned train references (attribute
            vocabulary and targets; batches must only hold these clips).
        embed_size: size of the audio embedding ``v`` (``model.encoder.output_size``).
        num_attributes: N (paper: up to 400).
        alpha: weight of the RL loss (paper: 0.95).

    Attributes:
        attributes: the attribute words (list of N str). ``attr_head``: ``nn.Linear(embed_size, N)``
            (optimised with the objective's parameters, ``--critic_lr``).

    Stats: those of :class:`PolicyGradient` (``reward``, ``baseline``, ``advantage``,
    ``entropy``, ``sample_len``) plus ``rl_loss``, ``attr_loss`` (BCE, nats per attribute),
    ``attr_precision_at_k`` (mean over clips of the fraction of the k = min(5, N) highest
    scored attributes that are in the target) and ``attr_f1`` (micro F1 at q > 0.5).

    Raises:
        ValueError: bad ``alpha``/``num_attributes``/baseline, or no content word.
        KeyError: at ``forward``, a clip absent from ``train_refs``.
    """

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        train_refs: Mapping[str, Sequence[Sequence[str]]],
        embed_size: int,
        num_attributes: int = 400,
        alpha: float = 0.95,
        num_samples: int = 5,
        baseline: str = "greedy",
        max_len: int = 30,
        temperature: float = 1.0,
        baseline_encoding: str = "shared",
    ):
        super().__init__(reward, tokenizer, num_samples, baseline, max_len, temperature, baseline_encoding)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"multitask alpha must be in [0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.attributes = attribute_vocabulary(train_refs, num_attributes)
        self.targets_of = attribute_targets(train_refs, self.attributes)
        self.attr_head = nn.Linear(embed_size, len(self.attributes))
        self.k = min(5, len(self.attributes))
        logging.info(
            "multitask: %d attributes (most frequent: %s)", len(self.attributes), " ".join(self.attributes[:10])
        )

    def target(self, clips: Sequence[str], device) -> torch.Tensor:
        """Multi-hot targets (batch, N) float32 of ``clips``.

        Raises:
            KeyError: a clip without train references.
        """
        y = torch.zeros(len(clips), len(self.attributes), device=device)
        for row, clip in enumerate(clips):
            if clip not in self.targets_of:
                raise KeyError(f"multitask: clip {clip!r} has no train references (attribute targets)")
            y[row, self.targets_of[clip]] = 1.0
        return y

    def attribute_loss(self, v: torch.Tensor, clips: Sequence[str]) -> Tuple[torch.Tensor, Dict[str, float]]:
        """BCE of the attribute head on ``v`` (batch, embed_size) and its stats."""
        logits = self.attr_head(v)
        y = self.target(clips, v.device)
        loss = F.binary_cross_entropy_with_logits(logits, y)
        with torch.no_grad():
            top = logits.topk(self.k, dim=1).indices
            p_at_k = y.gather(1, top).mean().item()
            pred = (logits > 0).float()
            tp = (pred * y).sum()
            f1 = (2 * tp / (pred.sum() + y.sum()).clamp(min=1.0)).item()
        return loss, {"attr_loss": loss.item(), f"attr_precision_at_{self.k}": p_at_k, "attr_f1": f1}

    def forward(self, model, batch) -> Tuple[torch.Tensor, Dict[str, float]]:
        clips, feats, lens = self.inputs(model, batch)
        v = model.encode(feats, lens)
        rl_loss, stats = self.loss_from_embedding(model, clips, v, feats, lens)
        attr_loss, attr_stats = self.attribute_loss(v, clips)
        loss = self.alpha * rl_loss + (1.0 - self.alpha) * attr_loss
        stats.update(attr_stats)
        stats["rl_loss"] = rl_loss.item()
        return loss, stats
