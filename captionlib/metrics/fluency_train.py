"""Training and held-out measurement of the fluency error detector (``caption_train_fluency``).

As FENSE (Zhou et al., ICASSP 2022, sec. 3.2) trains its error detector: every clean training
caption is shown as it is (no error) and with synthetic errors
(:func:`captionlib.metrics.fluency_corrupt.random_corruption`: one of the five classes, sometimes
a second), drawn anew each epoch; the targets are the classes applied and ``error`` (any), the
loss the mean binary cross-entropy of the six sigmoid outputs. The flagging threshold on the
``error`` output is set on captions held out of the training ones (``tune_fraction``): the
``1 - target_fpr`` quantile of their clean ``error`` probabilities, so that about ``target_fpr``
of clean captions are flagged (kept within [0.05, 0.999]).

:func:`evaluate_detector` measures a detector on held-out clean captions (the Clotho validation
captions for ``caption_train_fluency``): the false-positive rate on them, and for each error class
the recall on one copy of each caption damaged with that class alone (where the class applies),
for the detector and for the rules of :func:`captionlib.metrics.fluency_rules.fluency_rules`.
:func:`evaluate_judged` measures it on the part of those that a person judged disfluent
(:func:`read_judgements`, ``docs/fluency_judgements.tsv``): a removed word often leaves a fluent
caption ("people talking in a room" -> "people in a room"), which no detector should flag.
"""

import dataclasses
import logging
import os
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from captionlib.io.datadir import read_csv_rows, read_text
from captionlib.metrics.fluency import (
    COARSE_TAGS,
    LABELS,
    SPECIALS,
    UNK,
    BigramCounts,
    FluencyDetector,
    FluencyNet,
    coarse_tag,
)
from captionlib.metrics.fluency_corrupt import ERROR_CLASSES, Token, corrupt_tokens, random_corruption, tag_caption
from captionlib.metrics.fluency_rules import rule_flags

CLOTHO_HEADER = ("file_name", "caption_1", "caption_2", "caption_3", "caption_4", "caption_5")


@dataclasses.dataclass
class FluencyTrainOptions:
    """Options of :func:`train_detector` (the flags of ``caption_train_fluency``).

    Attributes:
        epochs: passes over the training captions (each a clean and a damaged copy of every caption).
        batch_size: examples per update.
        lr: Adam learning rate (cosine-decayed to 5% of it over the run).
        embed_dim, channels, layers: word embedding size, convolution channels and layers.
        min_count: words seen fewer times in the training captions are ``<unk>``.
        unk_rate: fraction of training words replaced by ``<unk>`` (robustness to new words).
        second_error: probability that a damaged copy carries a second error class.
        class_weights: relative frequency of each error class in the damaged copies (the removals,
            hardest to see, twice as often by default).
        tune_fraction: fraction of the training captions held out to set the threshold (in blocks of
            5 consecutive captions: the captions of one Clotho clip).
        target_fpr: fraction of the held-out clean captions the threshold lets be flagged.
        seed: seeds the corruptions, the split, the initialisation and the batches.
        tag_weight: weight of the auxiliary loss (cross-entropy of each word's coarse tag).
        count_folds: a training caption's bigram-count features count the captions of the other
            folds only (:func:`cross_fitted_counts`; < 2: all captions, its own included).
        log_interval: updates between progress lines.
    """

    epochs: int = 25
    batch_size: int = 128
    lr: float = 3e-3
    embed_dim: int = 64
    channels: int = 128
    layers: int = 3
    min_count: int = 2
    unk_rate: float = 0.02
    second_error: float = 0.3
    class_weights: Tuple[float, ...] = (1.0, 1.0, 1.0, 2.0, 2.0)
    tune_fraction: float = 0.05
    target_fpr: float = 0.03
    seed: int = 0
    tag_weight: float = 0.3
    count_folds: int = 4
    log_interval: int = 100


def read_caption_file(path: str) -> List[str]:
    """The captions of a Clotho captions CSV (``file_name,caption_1..caption_5``, by name ``*.csv``)
    or of a Kaldi ``text`` file (``<utt-id> <caption words>``).

    Raises:
        FileNotFoundError: no such file. ValueError: a malformed file (naming file and line).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such caption file")
    if path.endswith(".csv"):
        return [c for _, cells in read_csv_rows(path, CLOTHO_HEADER, what="Clotho captions CSV")
                for c in cells[1:] if c.strip()]
    return [c for c in read_text(path).values() if c.strip()]


def build_vocab(tagged: Sequence[Sequence[Token]], min_count: int) -> List[str]:
    """:data:`SPECIALS`, then the words seen at least ``min_count`` times, most frequent first."""
    counts = Counter(w for toks in tagged for w, _ in toks)
    return list(SPECIALS) + [w for w, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if n >= min_count]


def build_tag_lexicon(tagged: Sequence[Sequence[Token]], vocab: Sequence[str]) -> torch.Tensor:
    """(len(vocab), len(COARSE_TAGS)) float32: row ``i`` is how often the tagger gave word ``i`` each
    coarse tag in ``tagged`` (fractions summing to 1); ``<unk>``'s row pools the out-of-vocabulary
    words, the other specials' rows are 0."""
    index = {w: i for i, w in enumerate(vocab)}
    lex = np.zeros((len(vocab), len(COARSE_TAGS)), dtype=np.float64)
    for toks in tagged:
        for w, t in toks:
            lex[index.get(w, UNK), coarse_tag(t)] += 1
    lex[:len(SPECIALS)][np.arange(len(SPECIALS)) != UNK] = 0
    return torch.from_numpy((lex / np.maximum(lex.sum(axis=1, keepdims=True), 1)).astype(np.float32))


def _tag_targets(toks: Sequence[Token]) -> List[int]:
    """Coarse tag index per word (``-100``, ignored, for appended words tagged ``X``)."""
    return [-100 if t == "X" else coarse_tag(t) for _, t in toks]


def _epoch_examples(tagged: Sequence[Sequence[Token]], rng: np.random.Generator, second: float,
                    weights: Sequence[float]):
    """Word lists, tag targets, (N, 6) float32 targets and source caption indices of one epoch:
    each caption clean and damaged."""
    words, tags, targets, source = [], [], [], []
    for n, toks in enumerate(tagged):
        words.append([w for w, _ in toks])
        tags.append(_tag_targets(toks))
        targets.append([0.0] * len(LABELS))
        source.append(n)
        bad, labels = random_corruption(toks, rng, second, weights)
        if bad is not None:
            words.append([w for w, _ in bad])
            tags.append(_tag_targets(bad))
            targets.append([float(x) for x in labels] + [1.0])
            source.append(n)
    return words, tags, np.asarray(targets, dtype=np.float32), source


def cross_fitted_counts(detector: FluencyDetector, tagged: Sequence[Sequence[Token]], folds: int,
                        ) -> List[BigramCounts]:
    """Set ``detector.counts`` to the counts of all of ``tagged``; return, for each caption, the counts
    of the captions outside its fold (caption ``n`` is in fold ``n % folds``): a training caption must
    not find its own bigrams counted, as a new caption will not."""
    rows = [detector.ids([w for w, _ in t]) for t in tagged]
    size = len(detector.vocab)
    detector.counts = BigramCounts.from_rows(size, rows)
    if folds < 2:
        return [detector.counts] * len(rows)
    rest = [detector.counts.minus(BigramCounts.from_rows(size, rows[k::folds])) for k in range(folds)]
    return [rest[n % folds] for n in range(len(rows))]


def _tag_batch(tags: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """(B, width) long tag targets aligned with :meth:`FluencyDetector.encode` (``<s>`` first; -100 elsewhere)."""
    out = np.full((len(tags), width), -100, dtype=np.int64)
    for i, t in enumerate(tags):
        t = t[-(width - 2):] if width > 2 else []
        out[i, 1:len(t) + 1] = t
    return torch.from_numpy(out)


def _fmt_time(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _fit(detector: FluencyDetector, tagged: Sequence[Sequence[Token]], opts: FluencyTrainOptions) -> None:
    """Train ``detector.net`` in place (see the module docstring), logging progress; sets its counts."""
    rng = np.random.default_rng(opts.seed)
    own_counts = cross_fitted_counts(detector, tagged, opts.count_folds)
    net = detector.net.train()
    optim = torch.optim.Adam(net.parameters(), lr=opts.lr)
    per_epoch = -(-2 * len(tagged) // opts.batch_size)
    total = per_epoch * opts.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: 0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(s, total) / total)))
    loss_fn, tag_loss = nn.BCEWithLogitsLoss(), nn.CrossEntropyLoss(ignore_index=-100)
    t0, step = time.time(), 0
    for epoch in range(1, opts.epochs + 1):
        words, tags, targets, source = _epoch_examples(tagged, rng, opts.second_error, opts.class_weights)
        order = rng.permutation(len(words))
        n_batches, losses = -(-len(words) // opts.batch_size), []
        for b in range(n_batches):
            idx = order[b * opts.batch_size:(b + 1) * opts.batch_size]
            ids, feats, lengths = detector.encode([words[i] for i in idx], opts.unk_rate, rng,
                                                  counts=[own_counts[source[i]] for i in idx])
            x = net.encode(ids, feats)
            loss = loss_fn(net.classify(x, ids, lengths), torch.from_numpy(targets[idx]))
            if opts.tag_weight > 0:
                tag_logits = net.tagger(x)  # (B, tags, T)
                loss = loss + opts.tag_weight * tag_loss(tag_logits, _tag_batch([tags[i] for i in idx], ids.size(1)))
            optim.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 5.0)
            optim.step()
            sched.step()
            step += 1
            losses.append(loss.item())
            if step % opts.log_interval == 0 or b == n_batches - 1:
                rate = step / max(time.time() - t0, 1e-9)
                logging.info("epoch %d/%d step %d/%d loss=%.4f | %.2f steps/s, ETA %s", epoch, opts.epochs,
                             b + 1, n_batches, float(np.mean(losses[-opts.log_interval:])), rate,
                             _fmt_time((total - step) / rate))
    net.eval()


def set_threshold(detector: FluencyDetector, clean: Sequence[Sequence[str]], target_fpr: float) -> float:
    """Set (and return) ``detector.threshold`` so that about ``target_fpr`` of ``clean`` is flagged."""
    if clean:
        p = detector.probabilities(clean)[:, LABELS.index("error")]
        detector.threshold = float(np.clip(np.quantile(p, 1.0 - target_fpr), 0.05, 0.999))
    return detector.threshold


def train_detector(captions: Sequence[str], opts: Optional[FluencyTrainOptions] = None) -> FluencyDetector:
    """Train a :class:`~captionlib.metrics.fluency.FluencyDetector` on clean captions (module docstring).

    Args:
        captions: raw clean captions (at least 2).
        opts: the options (``None``: the defaults).

    Returns:
        The trained detector, its threshold set, its ``meta`` holding the options and counts.

    Raises:
        ValueError: fewer than 2 captions with words, or an option out of range.
    """
    opts = FluencyTrainOptions() if opts is None else opts
    if len(opts.class_weights) != len(ERROR_CLASSES) or min(opts.class_weights) < 0 or sum(opts.class_weights) <= 0:
        raise ValueError(f"class_weights needs {len(ERROR_CLASSES)} weights >= 0 ({', '.join(ERROR_CLASSES)})")
    if opts.epochs < 1 or opts.batch_size < 1 or not 0 <= opts.tune_fraction < 1 or not 0 < opts.target_fpr < 1:
        raise ValueError("need epochs >= 1, batch_size >= 1, 0 <= tune_fraction < 1, 0 < target_fpr < 1")
    torch.manual_seed(opts.seed)
    t0 = time.time()
    tagged = [t for t in (tag_caption(c) for c in captions) if t]
    if len(tagged) < 2:
        raise ValueError(f"need at least 2 training captions with words, got {len(tagged)}")
    # whole blocks of 5 consecutive captions are held out: Clotho's 5 captions of a clip are
    # consecutive in its CSV and in a data dir's text, and a clip's other captions in the training
    # set would make the held-out ones look easier than new captions
    blocks = np.random.default_rng(opts.seed).permutation(-(-len(tagged) // 5))
    tune_blocks = set(blocks[:int(round(opts.tune_fraction * len(blocks)))].tolist())
    tune = [t for i, t in enumerate(tagged) if i // 5 in tune_blocks]
    train = [t for i, t in enumerate(tagged) if i // 5 not in tune_blocks]
    logging.info("tagged %d captions in %.1f s: %d to train, %d to set the threshold", len(tagged),
                 time.time() - t0, len(train), len(tune))
    vocab = build_vocab(train, opts.min_count)
    net = FluencyNet(len(vocab), embed_dim=opts.embed_dim, channels=opts.channels, layers=opts.layers)
    net.tag_lexicon.copy_(build_tag_lexicon(train, vocab))
    detector = FluencyDetector(vocab, net)
    logging.info("vocabulary %d words, %d parameters", len(vocab), sum(p.numel() for p in net.parameters()))
    _fit(detector, train, opts)
    threshold = set_threshold(detector, [[w for w, _ in t] for t in tune], opts.target_fpr)
    logging.info("threshold %.4f (%.1f%% of %d held-out clean training captions flagged at most)", threshold,
                 100 * opts.target_fpr, len(tune))
    detector.meta = {"options": dataclasses.asdict(opts), "train_captions": len(train), "tune_captions": len(tune)}
    return detector


def _flaggers(detector: Optional[FluencyDetector]) -> Dict[str, Any]:
    """``{"rules": f, "detector": f}`` (no ``detector`` without one): word lists -> bool flags."""
    flaggers = {"rules": lambda caps: rule_flags(caps).any(axis=1)}
    if detector is not None:
        flaggers["detector"] = lambda caps: detector.flag(caps)[0]
    return flaggers


def evaluate_detector(detector: Optional[FluencyDetector], captions: Sequence[str], seed: int = 0) -> Dict[str, Any]:
    """Held-out measurement: clean false-positive rate and per-class recall (module docstring).

    Args:
        detector: the detector (``None``: the rules alone).
        captions: raw clean held-out captions.
        seed: seeds the corruptions (``add_tail``'s tail, ``repeat_event``'s event).

    Returns:
        ``{"clean": n, "classes": {class: n damaged}, "detector": {"clean_fpr", "recall": {class: r}},
        "rules": {...}}`` (``detector`` absent without one); rates are fractions in [0, 1].
    """
    rng = np.random.default_rng(seed)
    tagged = [t for t in (tag_caption(c) for c in captions) if t]
    sets = {"clean": [[w for w, _ in t] for t in tagged]}
    for kind in ERROR_CLASSES:
        bad = (corrupt_tokens(t, kind, rng) for t in tagged)
        sets[kind] = [[w for w, _ in b] for b in bad if b is not None]
    out: Dict[str, Any] = {"clean": len(sets["clean"]), "classes": {k: len(sets[k]) for k in ERROR_CLASSES}}
    for name, flagger in _flaggers(detector).items():
        rate = {k: float(np.mean(flagger(v))) if v else float("nan") for k, v in sets.items()}
        out[name] = {"clean_fpr": rate["clean"], "recall": {k: rate[k] for k in ERROR_CLASSES}}
    return out


JUDGEMENTS_HEADER = ("file_name", "caption", "form", "judgement")
JUDGED_FORMS = ("clean",) + ERROR_CLASSES


def read_judgements(path: str) -> List[Tuple[str, int, str, bool]]:
    """Read a judgements file: tab-separated, a header starting ``file_name caption form judgement``
    (more columns allowed), one row per judged caption: its Clotho clip, its number (1-5), the form
    judged (``clean`` or one of :data:`ERROR_CLASSES`, applied alone as :func:`evaluate_detector`
    applies it) and ``fluent`` or ``disfluent``.

    Returns:
        ``(file_name, caption number, form, judged fluent)`` per row.

    Raises:
        FileNotFoundError: no such file. ValueError: a malformed row, naming file and line.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such judgements file")
    out: List[Tuple[str, int, str, bool]] = []
    with open(path, encoding="utf-8") as fh:
        for num, line in enumerate(fh, 1):
            cells = line.rstrip("\n").split("\t")
            if num == 1:
                if tuple(cells[:4]) != JUDGEMENTS_HEADER:
                    raise ValueError(f"{path}:1: the header must start with {' '.join(JUDGEMENTS_HEADER)} (tabs)")
                continue
            if not line.strip():
                continue
            if len(cells) < 4 or not cells[1].isdigit() or not 1 <= int(cells[1]) <= 5 or \
                    cells[2] not in JUDGED_FORMS or cells[3] not in ("fluent", "disfluent"):
                raise ValueError(f"{path}:{num}: need <file_name> <caption 1-5> <form: {'|'.join(JUDGED_FORMS)}> "
                                 f"<fluent|disfluent>, got {line.strip()!r}")
            out.append((cells[0], int(cells[1]), cells[2], cells[3] == "fluent"))
    return out


def evaluate_judged(detector: Optional[FluencyDetector], judgements: Sequence[Tuple[str, int, str, bool]],
                    clotho_csvs: Sequence[str], seed: int = 0) -> Dict[str, Any]:
    """Recall on the damaged captions judged disfluent, and false positives on the clean ones judged fluent.

    Args:
        detector: the detector (``None``: the rules alone).
        judgements: rows of :func:`read_judgements`.
        clotho_csvs: the Clotho captions CSVs that hold the judged clips.
        seed: seeds the corruptions that draw (as in :func:`evaluate_detector`).

    Returns:
        ``{form: {"judged": n, "fluent": n judged fluent, "detector": rate, "rules": rate}}`` for each
        form judged; the rate is the fraction flagged of the judged-disfluent captions of a damaged
        form (the recall that a detector can reach), of the judged-fluent ones for ``clean``.

    Raises:
        ValueError: a judged clip missing from ``clotho_csvs``, or a form that does not apply to its caption.
    """
    captions: Dict[str, List[str]] = {}
    for path in clotho_csvs:
        for _, cells in read_csv_rows(path, CLOTHO_HEADER, what="Clotho captions CSV"):
            captions[cells[0]] = cells[1:]
    rng = np.random.default_rng(seed)
    texts: Dict[str, List[Tuple[List[str], bool]]] = {}
    for name, num, form, fluent in judgements:
        if name not in captions:
            raise ValueError(f"judged clip {name} is in none of {', '.join(clotho_csvs)}")
        toks = tag_caption(captions[name][num - 1])
        damaged = toks if form == "clean" else corrupt_tokens(toks, form, rng)
        if damaged is None:
            raise ValueError(f"judged clip {name} caption {num}: {form} does not apply to it")
        texts.setdefault(form, []).append(([w for w, _ in damaged], fluent))
    flaggers = _flaggers(detector)
    out: Dict[str, Any] = {}
    for form in (f for f in JUDGED_FORMS if f in texts):
        rows = texts[form]
        keep = [words for words, fluent in rows if fluent == (form == "clean")]
        out[form] = {"judged": len(rows), "fluent": sum(f for _, f in rows)}
        for name, flagger in flaggers.items():
            out[form][name] = float(np.mean(flagger(keep))) if keep else float("nan")
    return out


def format_judged(ev: Dict[str, Any]) -> str:
    """The table of :func:`evaluate_judged` as Markdown."""
    lines = ["| form | judged | judged fluent | measured on | detector | rules |", "|---|---:|---:|---|---:|---:|"]
    for form, r in ev.items():
        what = "the fluent ones (flagged)" if form == "clean" else "the disfluent ones (recall)"
        det = f"{100 * r['detector']:.1f}%" if "detector" in r else "-"
        lines.append(f"| {form} | {r['judged']} | {r['fluent']} | {what} | {det} | {100 * r['rules']:.1f}% |")
    return "\n".join(lines)


def format_evaluation(ev: Dict[str, Any]) -> str:
    """The table of :func:`evaluate_detector` as Markdown (class, n, detector recall, rules recall)."""
    has_det = "detector" in ev
    lines = ["| class | captions | detector | rules |", "|---|---:|---:|---:|"]
    for k in ERROR_CLASSES:
        det = f"{100 * ev['detector']['recall'][k]:.1f}%" if has_det else "-"
        lines.append(f"| {k} (recall) | {ev['classes'][k]} | {det} | {100 * ev['rules']['recall'][k]:.1f}% |")
    det = f"{100 * ev['detector']['clean_fpr']:.1f}%" if has_det else "-"
    lines.append(f"| clean (flagged) | {ev['clean']} | {det} | {100 * ev['rules']['clean_fpr']:.1f}% |")
    return "\n".join(lines)
