"""Multitask reinforcement learning: REINFORCE+ plus attribute prediction.

Li and Gong, "End-to-End Video Captioning with Multitask Reinforcement Learning", WACV 2019
(seed 004), sec. 3.2 step 3, eq. 8::

    L = alpha * L_r + (1 - alpha) * L_a,          alpha = 0.95

* ``L_r``: REINFORCE+ (seed 004 eq. 7) with ``num_samples`` samples per clip and the greedy
  (self-critical) or leave-one-out mean baseline, computed by
  :meth:`PolicyGradient.loss_from_embedding` on the audio embedding ``v`` of the same
  encoder pass as the attribute branch, so the encoder receives both gradients
  (``--freeze_encoder false``).
* ``L_a = -(1/N) sum_i [y_i log q_i + (1 - y_i) log(1 - q_i)]`` averaged over the clips of
  the batch: sigmoid binary cross-entropy of an attribute head (one linear layer -> N logits;
  the paper's "attribute prediction layer" with sigmoid outputs). Its input
  (``attribute_input``):

  - ``cnn`` (default, the paper's Fig. 2 / sec. 3.1: "a temporal average pooling layer and
    an attribute prediction layer" on the CNN features): the CRNN's CNN output averaged
    over each clip's valid frames, before the BiGRU (:meth:`CRNNEncoder.forward_with_cnn`),
    (batch, ``cnn_size``); the attribute gradient reaches the CNN directly, not through
    the BiGRU (the paper's motivation, sec. 3.2);
  - ``embedding``: the pooled encoder output ``v`` (batch, ``embed_size``).

Attributes ("the most frequent words including nouns, verbs and adjectives", sec. 3.2): the
``num_attributes`` most frequent attribute words of the train references, counted over the
word occurrences of all cleaned references, ties broken alphabetically.
``attribute_selection`` says which occurrences count:

* ``pos`` (default): each reference is tagged in context (one sentence, its cleaned words)
  with the greedy averaged-perceptron tagger of Matthew Honnibal (Penn Treebank tags; the
  model that ships inside the ``textblob-aptagger`` wheel, MIT licence, so nothing is
  downloaded at run time; see :func:`pos_tags`), and an occurrence counts when its tag is
  a noun (``NN*``), verb (``VB*``) or adjective (``JJ*``) and the word is not an auxiliary
  (:data:`AUXILIARIES`: forms of *be*/*have*/*do*, which Penn tags ``VB*`` but Universal
  Dependencies calls ``AUX``); words with fewer than half of their occurrences so tagged
  are left out (on Clotho: *while*, *outside*, *fast*, *nearby*, *past*, mostly
  prepositions/adverbs there). On the Clotho development captions this admits *fire* and
  *call* (scikit-learn stop words) and drops adverbs such as *loudly*/*slowly*. The tagger
  sometimes confuses nouns and verbs (*birds chirp*: ``NNS NNS``), which does not change
  the selection since both count;
* ``stopwords``: an occurrence counts when the word is not in scikit-learn's English
  stop-word list (``sklearn.feature_extraction.text.ENGLISH_STOP_WORDS``, 318 words) and
  contains a letter (any part of speech, adverbs included).

The target ``y`` of a clip is multi-hot: attribute ``i`` is 1 when its word occurs in *any*
of the clip's references (whatever its tag there).
"""

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from captionlib.models.batch_parts import pooled
from captionlib.rl.options import DEFAULTS
from captionlib.rl.policy_gradient import RL_CONF, CriticConf, PolicyGradient, SampledConf, SamplesConf
from captionlib.rl.rewards import Reward
from captionlib.text.pos import tag_words
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.options import option

#: Which words are attributes, and what the attribute head reads (see the module docstring).
ATTRIBUTE_SELECTIONS = ("pos", "stopwords")
ATTRIBUTE_INPUTS = ("cnn", "embedding")


@dataclass
class MultiTaskConf(SampledConf, SamplesConf, CriticConf):
    """The ``rl_conf`` keys of multitask RL (``--rl_algo multitask``, seed 004): REINFORCE+'s samples
    and baseline, and the attribute branch (``critic_lr`` is its head's)."""

    alpha: float = option(0.95, "weight of the RL loss (seed 004: 0.95)", RL_CONF, valid="[0, 1]")
    num_attributes: int = option(400, "attribute words", RL_CONF, valid=">= 1")
    attribute_selection: str = option(
        "pos", "attributes are the most frequent nouns, verbs and adjectives (pos, seed 004) or words outside a "
               "stop-word list (stopwords)", RL_CONF, ATTRIBUTE_SELECTIONS)
    attribute_input: str = option(
        "cnn", "the attribute head reads the time-pooled CNN features (cnn, seed 004) or the audio embedding "
               "(embedding)", RL_CONF, ATTRIBUTE_INPUTS)

CONTENT_TAGS = ("NN", "VB", "JJ")  # Penn Treebank tag prefixes of nouns, verbs, adjectives
AUXILIARIES = frozenset("be am is are was were been being have has had having do does did".split())


def stop_words() -> frozenset:
    """scikit-learn's English stop-word list (``attribute_selection='stopwords'``)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def is_content_word(word: str, stop: Iterable[str]) -> bool:
    """True when ``word`` is not a stop word and has at least one letter."""
    return word not in stop and any(ch.isalpha() for ch in word)








def pos_tags(caption: Sequence[str]) -> List[str]:
    """Penn Treebank tags of the words of one (cleaned) caption, tagged in context
    (:func:`captionlib.text.pos.tag_words`: NLTK's averaged perceptron with the model of the
    ``textblob-aptagger`` wheel, nothing downloaded).

    Raises:
        ImportError: ``textblob-aptagger`` is not installed (the message also names
            ``attribute_selection='stopwords'``, which needs no tagger).
    """
    try:
        return tag_words(caption)
    except ImportError as e:
        raise ImportError(f"attribute_selection='pos': {e}; or use attribute_selection='stopwords'") from None


def attribute_counts(refs: Mapping[str, Sequence[Sequence[str]]], selection: str = "pos") -> Counter:
    """Occurrence counts of the attribute candidates of ``refs`` (see the module docstring).

    Args:
        refs: ``{clip_id: [[word, ...], ...]}`` cleaned train references.
        selection: ``pos`` or ``stopwords``.

    Raises:
        ValueError: unknown ``selection``. ImportError: ``pos`` without ``textblob-aptagger``.
    """
    if selection == "stopwords":
        stop = stop_words()
        return Counter(w for caps in refs.values() for cap in caps for w in cap if is_content_word(w, stop))
    if selection != "pos":
        raise ValueError(f"attribute_selection must be one of {ATTRIBUTE_SELECTIONS}, got {selection!r}")
    counts: Counter = Counter()
    totals: Counter = Counter()
    for caps in refs.values():
        for cap in caps:
            totals.update(cap)
            counts.update(
                w for w, t in zip(cap, pos_tags(cap)) if t.startswith(CONTENT_TAGS) and w not in AUXILIARIES
            )
    # a word mostly tagged otherwise (e.g. "while": 65 of 2357 tagged NN) is tagging noise
    return Counter({w: c for w, c in counts.items() if 2 * c >= totals[w]})


def attribute_vocabulary(
    refs: Mapping[str, Sequence[Sequence[str]]], num_attributes: int, selection: str = "pos"
) -> List[str]:
    """The ``num_attributes`` most frequent attribute words of ``refs``.

    Args:
        refs: ``{clip_id: [[word, ...], ...]}`` cleaned train references.
        num_attributes: N; when larger than the number of distinct candidates, all of them
            are used (logged as a warning).
        selection: ``pos`` (nouns, verbs, adjectives by tagging) or ``stopwords``, see
            :func:`attribute_counts`.

    Returns:
        Words ordered by decreasing count, ties alphabetically.

    Raises:
        ValueError: ``num_attributes < 1``, unknown ``selection``, or no candidate in ``refs``.
        ImportError: ``selection='pos'`` without ``textblob-aptagger``.
    """
    if num_attributes < 1:
        raise ValueError(f"num_attributes must be >= 1, got {num_attributes}")
    counts = attribute_counts(refs, selection)
    if not counts:
        raise ValueError(f"no attribute word ({selection}) in the train references: cannot build attributes")
    if num_attributes > len(counts):
        logging.warning(
            "num_attributes=%d exceeds the %d attribute words of the train references; using all %d",
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
        reward, tokenizer, num_samples, baseline, max_len, temperature, baseline_encoding,
        sample_logprobs: REINFORCE+ (see :class:`PolicyGradient`).
        train_refs: ``{clip_id: [[word, ...], ...]}`` cleaned train references (attribute
            vocabulary and targets; batches must only hold these clips).
        embed_size: size of the audio embedding ``v`` (``model.embed_size``).
        num_attributes: N (paper: up to 400).
        alpha: weight of the RL loss (paper: 0.95).
        attribute_selection: ``pos`` (default; nouns, verbs, adjectives by POS tagging) or
            ``stopwords`` (see the module docstring).
        attribute_input: ``cnn`` (default, the paper's: time-pooled CNN features) or
            ``embedding`` (``v``).
        cnn_size: size of the time-pooled CNN features (``model.encoder.cnn_output_size``);
            required when ``attribute_input='cnn'``.

    Attributes:
        attributes: the attribute words (list of N str). ``attr_head``: ``nn.Linear(in, N)``
            with ``in = cnn_size`` or ``embed_size`` (optimised with the objective's
            parameters, ``--critic_lr``).

    Stats: those of :class:`PolicyGradient` (``reward``, ``baseline``, ``advantage``,
    ``entropy``, ``sample_len``) plus ``rl_loss``, ``attr_loss`` (BCE, nats per attribute),
    ``attr_precision_at_k`` (mean over clips of the fraction of the k = min(5, N) highest
    scored attributes that are in the target) and ``attr_f1`` (micro F1 at q > 0.5).

    Raises:
        ValueError: bad ``alpha``/``num_attributes``/baseline/``attribute_selection``/
            ``attribute_input``, ``attribute_input='cnn'`` without ``cnn_size``, or no
            attribute word in ``train_refs``.
        ImportError: ``attribute_selection='pos'`` without ``textblob-aptagger``.
        KeyError: at ``forward``, a clip absent from ``train_refs``.
    """

    Conf = MultiTaskConf
    paper = "Li & Gong 2019 (multitask)"

    def __init__(
        self,
        reward: Reward,
        tokenizer: Tokenizer,
        train_refs: Mapping[str, Sequence[Sequence[str]]],
        embed_size: int,
        num_attributes: int = MultiTaskConf.num_attributes,
        alpha: float = MultiTaskConf.alpha,
        num_samples: int = 5,
        baseline: str = MultiTaskConf.baseline,
        max_len: int = DEFAULTS.max_len,
        temperature: float = DEFAULTS.temperature,
        baseline_encoding: str = MultiTaskConf.baseline_encoding,
        attribute_selection: str = MultiTaskConf.attribute_selection,
        attribute_input: str = MultiTaskConf.attribute_input,
        cnn_size: Optional[int] = None,
        sample_logprobs: str = MultiTaskConf.sample_logprobs,
    ):
        super().__init__(reward, tokenizer, num_samples, baseline, max_len, temperature, baseline_encoding,
                         sample_logprobs=sample_logprobs)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"multitask alpha must be in [0, 1], got {alpha}")
        if attribute_input not in ATTRIBUTE_INPUTS:
            raise ValueError(f"attribute_input must be one of {ATTRIBUTE_INPUTS}, got {attribute_input!r}")
        if attribute_input == "cnn" and cnn_size is None:
            raise ValueError("attribute_input='cnn' needs cnn_size (model.encoder.cnn_output_size)")
        self.alpha = float(alpha)
        self.attribute_input = attribute_input
        self.attributes = attribute_vocabulary(train_refs, num_attributes, attribute_selection)
        self.targets_of = attribute_targets(train_refs, self.attributes)
        self.attr_head = nn.Linear(cnn_size if attribute_input == "cnn" else embed_size, len(self.attributes))
        self.k = min(5, len(self.attributes))
        logging.info(
            "multitask: %d attributes (%s selection, head on %s; most frequent: %s)", len(self.attributes),
            attribute_selection, attribute_input, " ".join(self.attributes[:10]),
        )

    @classmethod
    def from_options(cls, opts, conf, model, reward: Reward, tokenizer: Tokenizer, train_set) -> "MultiTask":
        """Multitask (``--rl_algo multitask``) from :class:`captionlib.rl.options.RLOptions` (``max_len``,
        ``temperature``) and its ``rl_conf`` block ``conf`` (:class:`MultiTaskConf`); the attributes come
        from ``train_set.refs`` and the head's input size from ``model.encoder``.

        Raises:
            ValueError: see the class.
        """
        return cls(
            reward, tokenizer, train_set.refs, embed_size=model.embed_size, num_attributes=conf.num_attributes,
            alpha=conf.alpha, num_samples=conf.num_samples, baseline=conf.baseline, max_len=opts.max_len,
            temperature=opts.temperature, baseline_encoding=conf.baseline_encoding,
            attribute_selection=conf.attribute_selection, attribute_input=conf.attribute_input,
            cnn_size=model.encoder.cnn_output_size, sample_logprobs=conf.sample_logprobs,
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

    def attribute_loss(self, x: torch.Tensor, clips: Sequence[str]) -> Tuple[torch.Tensor, Dict[str, float]]:
        """BCE of the attribute head on ``x`` (batch, ``attr_head.in_features``): the
        time-pooled CNN features or ``v``, as ``attribute_input`` says; and its stats."""
        logits = self.attr_head(x)
        y = self.target(clips, x.device)
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
        if self.attribute_input == "cnn":  # one encoder pass gives both inputs
            v, attr_in = model.encode(feats, lens, return_cnn=True)
        else:
            v = model.encode(feats, lens)
            attr_in = pooled(v)
        rl_loss, stats = self.loss_from_embedding(model, clips, v, feats, lens)
        attr_loss, attr_stats = self.attribute_loss(attr_in, clips)
        loss = self.alpha * rl_loss + (1.0 - self.alpha) * attr_loss
        stats.update(attr_stats)
        stats["rl_loss"] = rl_loss.item()
        return loss, stats
