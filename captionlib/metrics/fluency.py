"""The fluency error detector: a small network trained on FENSE's synthetic errors.

RL-trained captioners learn to game CIDEr-D with disfluent endings and repetitions
(``... in the background and a``, ``whistling whistling``). FENSE (Zhou et al., "Can Audio
Captions Be Evaluated with Image Caption Metrics?", ICASSP 2022) detects them with a BERT
classifier trained on synthetic errors (:mod:`captionlib.metrics.fluency_corrupt`) and divides
the score of a flagged caption by 10; SPIDEr-FL (DCASE 2023 task 6a; aac-metrics) does the same
to SPIDEr. The transparent rules and the -FL penalty are in :mod:`captionlib.metrics.fluency_rules`
(no torch); this module holds

* :class:`FluencyDetector`: dilated convolutions (:class:`FluencyNet`) over words (vocabulary of the
  training captions), each with a POS-tag profile, repetition features and the counts of its
  bigram in the training captions (:class:`BigramCounts`), and sigmoid outputs for FENSE's five
  error classes and ``error`` (any error). It is small (a few hundred thousand parameters),
  downloads nothing and flags 64 captions in a few milliseconds on one CPU core (no POS tagger at
  inference: the tag profiles are a table). Trained by
  :func:`captionlib.metrics.fluency_train.train_detector` (``caption_train_fluency``).

Captions are compared as :func:`captionlib.text.cleaner.clean_words` gives them (lower case, no
punctuation), the words a captioner emits.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from captionlib.metrics.fluency_corrupt import ERROR_CLASSES
from captionlib.metrics.fluency_rules import caption_words
from captionlib.utils.fileio import atomic_save, load_checkpoint

#: Outputs of the detector: FENSE's error classes, then ``error`` (any error; the one that flags).
LABELS = ERROR_CLASSES + ("error",)

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
#: Features per word: seen earlier in the caption; the bigram ending here seen earlier; log count of
#: that bigram and of the word in the training captions (:class:`BigramCounts`).
NUM_FEATURES = 4
FORMAT = "captionlib-fluency-detector"


#: Coarse word classes of the detector's tag lexicon and of its auxiliary tagging task (Penn
#: Treebank tag -> class; any other tag: ``other``).
COARSE_TAGS = ("noun", "verb", "verb_3sg", "verb_past", "verb_ing", "verb_part", "adj", "adv", "det", "pron",
               "prep", "to", "conj", "num", "other")
_PENN_TO_COARSE = {"NN": "noun", "NNS": "noun", "NNP": "noun", "NNPS": "noun", "VB": "verb", "VBP": "verb",
                   "VBZ": "verb_3sg", "VBD": "verb_past", "VBG": "verb_ing", "VBN": "verb_part", "JJ": "adj",
                   "JJR": "adj", "JJS": "adj", "RB": "adv", "RBR": "adv", "RBS": "adv", "RP": "adv", "DT": "det",
                   "PDT": "det", "WDT": "det", "PRP": "pron", "PRP$": "pron", "WP": "pron", "WP$": "pron",
                   "EX": "pron", "IN": "prep", "TO": "to", "CC": "conj", "CD": "num"}


def coarse_tag(penn: str) -> int:
    """Index in :data:`COARSE_TAGS` of a Penn Treebank tag."""
    return COARSE_TAGS.index(_PENN_TO_COARSE.get(penn, "other"))


class FluencyNet(nn.Module):
    """Dilated 1-D convolutions over words; one logit per label, and per word a coarse-tag guess.

    A word enters as its embedding, its row of ``tag_lexicon`` (how often the POS tagger gave it each
    of :data:`COARSE_TAGS` in the training captions: grammar the small training set alone would not
    teach), two repetition features (:func:`repetition_features`) and two count features
    (:meth:`BigramCounts.features`). Each layer is a residual
    ``Conv1d`` (kernel 3, dilation 1, 2, 4, ...: the receptive field of ``layers`` layers is
    ``2 ** (layers + 1) - 1`` words) with ReLU; the caption is summarised by the maximum over its
    words and by the state at its end (``</s>``), where most errors sit. The per-word tag logits
    serve an auxiliary training task (predicting each word's coarse tag in context).

    Args:
        vocab_size: number of word ids (the specials included).
        embed_dim: word embedding size.
        channels: convolution channels.
        layers: convolution layers.
        num_labels: outputs (``len(LABELS)``).
    """

    def __init__(self, vocab_size: int, embed_dim: int = 64, channels: int = 128, layers: int = 3,
                 num_labels: int = len(LABELS)):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.register_buffer("tag_lexicon", torch.zeros(vocab_size, len(COARSE_TAGS)))
        self.inp = nn.Conv1d(embed_dim + len(COARSE_TAGS) + NUM_FEATURES, channels, 1)
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, 3, padding=2 ** k, dilation=2 ** k) for k in range(layers))
        self.out = nn.Linear(2 * channels, num_labels)
        self.tagger = nn.Conv1d(channels, len(COARSE_TAGS), 1)

    def encode(self, ids: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """Word states (B, channels, T) of ids (B, T) long (``<pad>`` after the end), feats (B, T, NUM_FEATURES)."""
        mask = (ids != PAD).unsqueeze(1).to(feats.dtype)  # (B, 1, T)
        x = torch.cat([self.embed(ids), self.tag_lexicon[ids], feats], dim=-1).transpose(1, 2)
        x = self.inp(x) * mask
        for conv in self.convs:
            x = (x + torch.relu(conv(x))) * mask
        return x

    def classify(self, x: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, num_labels) of word states x (B, channels, T) (``lengths - 1``: position of ``</s>``)."""
        pooled = x.masked_fill((ids == PAD).unsqueeze(1), float("-inf")).max(dim=2).values
        end = x.gather(2, (lengths - 1).view(-1, 1, 1).expand(-1, x.size(1), 1)).squeeze(2)
        return self.out(torch.cat([pooled, end], dim=-1))

    def forward(self, ids: torch.Tensor, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, num_labels) of ids (B, T) long, feats (B, T, NUM_FEATURES) float, lengths (B,) long (>= 1)."""
        return self.classify(self.encode(ids, feats), ids, lengths)


class BigramCounts:
    """How often each word id and each pair of adjacent ids (``<s>`` and ``</s>`` included) occur in
    training captions: where a word was removed, the words left side by side are rarely seen together.

    Args:
        vocab_size: number of ids.
        keys: sorted int64 ``first_id * vocab_size + second_id`` of the pairs seen.
        counts: float32 count of each key.
        unigram: float32 (vocab_size,) count of each id.
    """

    def __init__(self, vocab_size: int, keys: np.ndarray, counts: np.ndarray, unigram: np.ndarray):
        self.vocab_size, self.keys, self.counts, self.unigram = int(vocab_size), keys, counts, unigram

    @classmethod
    def from_rows(cls, vocab_size: int, rows: Sequence[Sequence[int]]) -> "BigramCounts":
        """Counts of id sequences (each ``<s> ... </s>``)."""
        pairs = np.concatenate([np.zeros(0, dtype=np.int64)] + [
            np.asarray(r[:-1], dtype=np.int64) * vocab_size + np.asarray(r[1:], dtype=np.int64) for r in rows])
        keys, counts = np.unique(pairs, return_counts=True)
        flat = np.concatenate([np.zeros(0, dtype=np.int64)] + [np.asarray(r, dtype=np.int64) for r in rows])
        unigram = np.bincount(flat, minlength=vocab_size).astype(np.float32)
        return cls(vocab_size, keys, counts.astype(np.float32), unigram)

    def minus(self, part: "BigramCounts") -> "BigramCounts":
        """These counts less those of ``part`` (a subset of the captions counted here)."""
        counts = self.counts.copy()
        counts[np.searchsorted(self.keys, part.keys)] -= part.counts
        return BigramCounts(self.vocab_size, self.keys, counts, self.unigram - part.unigram)

    def features(self, ids: np.ndarray) -> np.ndarray:
        """(B, T, 2) float32 of ids (B, T): ``log1p`` of the count of (previous id, id) / 5 and of
        the id / 10 (0 at the first position)."""
        out = np.zeros(ids.shape + (2,), dtype=np.float32)
        q = ids[:, :-1] * self.vocab_size + ids[:, 1:]
        pos = np.minimum(np.searchsorted(self.keys, q), max(len(self.keys) - 1, 0))
        found = self.keys[pos] == q if len(self.keys) else np.zeros(q.shape, dtype=bool)
        out[:, 1:, 0] = np.log1p(np.where(found, self.counts[pos] if len(self.keys) else 0, 0)) / 5
        out[:, :, 1] = np.log1p(self.unigram[ids]) / 10
        return out

    def state(self) -> Dict[str, torch.Tensor]:
        return {"keys": torch.from_numpy(self.keys), "counts": torch.from_numpy(self.counts),
                "unigram": torch.from_numpy(self.unigram)}

    @classmethod
    def from_state(cls, vocab_size: int, state: Mapping[str, torch.Tensor]) -> "BigramCounts":
        return cls(vocab_size, state["keys"].numpy(), state["counts"].numpy(), state["unigram"].numpy())


def repetition_features(words: Sequence[str]) -> np.ndarray:
    """(len(words), 2) float32: 1 where the word, resp. the bigram ending at it, occurred earlier."""
    feats = np.zeros((len(words), 2), dtype=np.float32)
    seen, seen2 = set(), set()
    for i, w in enumerate(words):
        feats[i, 0] = w in seen
        if i > 0:
            feats[i, 1] = (words[i - 1], w) in seen2
            seen2.add((words[i - 1], w))
        seen.add(w)
    return feats


class FluencyDetector:
    """A trained fluency error detector: :class:`FluencyNet`, its vocabulary and its threshold.

    Args:
        vocab: the words, id = index (the first four are :data:`SPECIALS`).
        net: the network (its ``out`` size is ``len(LABELS)``).
        threshold: a caption is flagged when its ``error`` probability is at least this.
        max_words: a longer caption keeps its last ``max_words`` words (errors sit at the end).
        meta: plain values saved with the model (training options, held-out measurements).
        counts: word and bigram counts of the training captions (``None``: all zero).
    """

    def __init__(self, vocab: Sequence[str], net: FluencyNet, threshold: float = 0.5, max_words: int = 64,
                 meta: Optional[Dict[str, Any]] = None, counts: Optional[BigramCounts] = None):
        if tuple(vocab[:len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"the vocabulary must start with {SPECIALS}")
        self.vocab = list(vocab)
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.net = net.eval()
        self.threshold = float(threshold)
        self.max_words = int(max_words)
        self.meta = dict(meta or {})
        self.counts = counts if counts is not None else BigramCounts(
            len(self.vocab), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32),
            np.zeros(len(self.vocab), dtype=np.float32))

    def ids(self, words: Sequence[str]) -> List[int]:
        """``<s>``, the ids of ``words`` (``<unk>`` for unknown ones), ``</s>``."""
        return [BOS] + [self.index.get(w, UNK) for w in words] + [EOS]

    def encode(self, captions: Sequence[Union[str, Sequence[str]]], unk_rate: float = 0.0,
               rng: Optional[np.random.Generator] = None, counts: Optional[Sequence[BigramCounts]] = None,
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batch tensors of raw captions (or word lists): ids (B, T) long, feats (B, T, NUM_FEATURES)
        float32, lengths (B,) long.

        Each caption is ``<s> words </s>`` (an empty caption ``<s> </s>``). Training options:
        ``unk_rate`` replaces that fraction of the words by ``<unk>``, drawn by ``rng``; ``counts``
        gives each caption its own counts (those of the other training captions) for :attr:`counts`.
        """
        rows = [caption_words(c)[-self.max_words:] for c in captions]
        lengths = [len(r) + 2 for r in rows]
        ids = np.zeros((len(rows), max(lengths, default=2)), dtype=np.int64)
        feats = np.zeros(ids.shape + (NUM_FEATURES,), dtype=np.float32)
        for i, words in enumerate(rows):
            ids[i, :len(words) + 2] = self.ids(words)
            feats[i, 1:len(words) + 1, :2] = repetition_features(words)
        if unk_rate > 0 and rng is not None:
            drop = (rng.random(ids.shape) < unk_rate) & (ids > EOS)
            ids[drop] = UNK
        if counts is None:
            feats[:, :, 2:] = self.counts.features(ids)
        else:
            for c in {id(c): c for c in counts}.values():
                sel = np.array([x is c for x in counts])
                feats[sel, :, 2:] = c.features(ids[sel])
        feats[ids == PAD] = 0
        return torch.from_numpy(ids), torch.from_numpy(feats), torch.tensor(lengths, dtype=torch.long)

    @torch.no_grad()
    def probabilities(self, captions: Sequence[Union[str, Sequence[str]]], batch_size: int = 256) -> np.ndarray:
        """Sigmoid outputs, float32 (N, len(:data:`LABELS`)): one probability per error class and ``error``."""
        self.net.eval()
        parts = [np.zeros((0, len(LABELS)), dtype=np.float32)]
        for start in range(0, len(captions), batch_size):
            logits = self.net(*self.encode(captions[start:start + batch_size]))
            parts.append(torch.sigmoid(logits).numpy().astype(np.float32))
        return np.concatenate(parts)

    def flag(self, captions: Sequence[Union[str, Sequence[str]]]) -> Tuple[np.ndarray, np.ndarray]:
        """Flag disfluent captions.

        Args:
            captions: N raw captions (cleaned here) or word lists.

        Returns:
            ``(flags, probs)``: bool (N,), True where the ``error`` probability is at least
            :attr:`threshold`; float32 (N, len(:data:`LABELS`)) of :meth:`probabilities`.
        """
        probs = self.probabilities(captions)
        return probs[:, LABELS.index("error")] >= self.threshold, probs

    def config(self) -> Dict[str, int]:
        """The sizes that rebuild :attr:`net`."""
        return {"vocab_size": len(self.vocab), "embed_dim": self.net.embed.embedding_dim,
                "channels": self.net.inp.out_channels, "layers": len(self.net.convs),
                "num_labels": self.net.out.out_features}

    def save(self, path) -> None:
        """Write the detector atomically: plain values and tensors only (``torch.load(weights_only=True)``)."""
        atomic_save({
            "format": FORMAT, "version": 1, "labels": list(LABELS), "vocab": self.vocab, "config": self.config(),
            "threshold": self.threshold, "max_words": self.max_words, "meta": self.meta,
            "bigrams": self.counts.state(),
            "state_dict": {k: v.detach().cpu() for k, v in self.net.state_dict().items()},
        }, path)

    @classmethod
    def load(cls, path) -> "FluencyDetector":
        """Read a detector written by :meth:`save` (through :func:`captionlib.utils.fileio.load_checkpoint`).

        Raises:
            FileNotFoundError: no such file.
            ValueError: not a fluency detector file (or one with other labels), or an unreadable
                or unsafe file (:class:`captionlib.utils.fileio.UnsafeFileError`).
        """
        obj = load_checkpoint(path)
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise ValueError(f"{path}: not a fluency detector (written by caption_train_fluency)")
        if tuple(obj["labels"]) != LABELS:
            raise ValueError(f"{path}: detector labels {obj['labels']} differ from {list(LABELS)}")
        net = FluencyNet(**obj["config"])
        net.load_state_dict(obj["state_dict"])
        return cls(obj["vocab"], net, threshold=obj["threshold"], max_words=obj["max_words"], meta=obj["meta"],
                   counts=BigramCounts.from_state(len(obj["vocab"]), obj["bigrams"]))


def fluency_flags(captions: Sequence[Sequence[str]], detector: Optional[FluencyDetector] = None) -> np.ndarray:
    """``(N,)`` bools: the captions (word lists) ``detector`` flags as disfluent, or, without one,
    those a rule check flags (:func:`captionlib.metrics.fluency_rules.rule_flags`). The one place
    the RL reward's penalty and the re-ranking of ``caption_decode`` take their flags from."""
    from captionlib.metrics.fluency_rules import rule_flags

    if detector is not None:
        return np.asarray(detector.flag(captions)[0], dtype=bool)
    return rule_flags(captions).any(axis=1)
