"""CIDEr-D: exact, batched and cached, for RL rewards and for scoring.

CIDEr-D (Vedantam, Zitnick and Parikh, "CIDEr: Consensus-based Image Description
Evaluation", CVPR 2015, with the "-D" changes of the COCO evaluation server) is computed
here exactly as the reference implementation ``pycocoevalcap.cider.CiderScorer`` does:

* every sentence is a bag of its 1..n-grams (n = 4), with term frequency ``tf``;
* ``idf(g) = log(N) - log(max(1, df(g)))`` where ``df(g)`` is the number of *documents*
  (one document = all references of one clip) containing ``g`` and ``N`` the number of
  documents (pycocoevalcap's ``ref_len``);
* for each order k, candidate vector ``v_c = tf_c * idf`` and reference vector
  ``v_r = tf_r * idf``; similarity ``sum_g min(v_c(g), v_r(g)) * v_r(g) / (|v_c| |v_r|)``
  (the clipping of CIDEr-D; 0 when a norm is 0), times the Gaussian length penalty
  ``exp(-(l_c - l_r)^2 / (2 sigma^2))`` with sigma = 6 and ``l`` the number of bigrams of
  the sentence (``max(0, words - 1)``: pycocoevalcap counts the order-2 terms; the
  difference only matters for empty sentences);
* score = 10 * mean over orders of (sum over references of the similarity) / #references.

:func:`corpus_cider_d` takes the document frequencies from the references being scored,
which is what ``pycocoevalcap.cider.Cider().compute_score`` does;
:func:`mean_cider_d_of_sets` scores several captions per clip (e.g. 5 samples, seed 001)
with those same statistics. For rewards, :class:`DocumentFrequency` is built once from
the train references (stage 4 of the recipe writes it as ``exp/stats_<feats_tag>/cider_df.npz``) and
:class:`CiderD` scores all candidates of a batch (samples and greedy baseline) in one
vectorised call, with each clip's reference tf matrix and norms cached.
:func:`batch_cider_d` is the per-mini-batch alternative of seed 000 (document frequencies
of the batch's own references, as ``Cider().compute_score`` called on the batch).

The implementation is our own (integer-encoded n-grams, see
:mod:`captionlib.metrics.ngrams`, and numpy); tests check it against pycocoevalcap to
1e-6 on the real Clotho captions.
"""

import logging
import math
import os
import pickle
from typing import Any, BinaryIO, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from captionlib.metrics.ngrams import (
    MAX_ORDER,
    KeyIndex,
    WordIds,
    count_keys,
    decode_key,
    encode_tuple,
    key_order,
    ngram_keys,
)

_DF_FORMAT = "captionlib.cider_df"
_DF_VERSION = 1


class DocumentFrequency:
    """n-gram document frequencies of a reference corpus (the CIDEr-D "idf" statistics).

    One document is the set of all references of one clip, as in pycocoevalcap. This is
    the stage-4 artifact of the recipe (``exp/stats_<feats_tag>/cider_df.npz``, written by
    ``caption_compute_cider_df``), computed once from the *train* references and reused
    by every RL run.

    Attributes:
        n: highest n-gram order counted.
        num_docs: number of documents (clips); ``log(num_docs)`` is CIDEr-D's ``ref_len``.
        words: vocabulary; word ``words[i]`` has id ``i + 1`` in the n-gram keys.
        keys: uint64 ``(G,)`` sorted n-gram keys (:mod:`captionlib.metrics.ngrams`).
        counts: float64 ``(G,)`` number of documents containing each n-gram (>= 1).
    """

    def __init__(
        self, n: int, num_docs: int, words: List[str], keys: np.ndarray, counts: np.ndarray
    ) -> None:
        if not 1 <= n <= MAX_ORDER:
            raise ValueError(f"n must be in 1..{MAX_ORDER}, got {n}")
        if num_docs < 1:
            raise ValueError("document frequencies need at least one document")
        keys = np.asarray(keys, dtype=np.uint64)
        if keys.size > 1 and not np.all(keys[1:] > keys[:-1]):
            raise ValueError("document-frequency keys must be sorted and unique")
        self.n = int(n)
        self.num_docs = int(num_docs)
        self.words = list(words)
        self.keys = keys
        self.counts = np.asarray(counts, dtype=np.float64)
        self.log_counts = np.log(np.maximum(1.0, self.counts))
        self._index: Optional[KeyIndex] = None  # built on first lookup, not saved

    @classmethod
    def from_references(
        cls, refs: Mapping[str, Sequence[Sequence[str]]], n: int = 4
    ) -> "DocumentFrequency":
        """Count document frequencies over ``refs``.

        Args:
            refs: ``{clip_id: [reference word list, ...]}``; one document per clip.
            n: highest n-gram order.

        Returns:
            The document frequencies, ``num_docs = len(refs)``.

        Raises:
            ValueError: if ``refs`` is empty.
        """
        table = WordIds()
        sentences: List[Sequence[str]] = []
        doc_of_sentence: List[int] = []
        for d, clip in enumerate(refs):
            for ref in refs[clip]:
                sentences.append(ref)
                doc_of_sentence.append(d)
        if not refs:
            raise ValueError("no references to count document frequencies from")
        ids, lengths = table.encode(sentences, grow=True)
        rows, keys = ngram_keys(ids, lengths, n)
        docs = np.asarray(doc_of_sentence, dtype=np.int64)[rows] if rows.size else rows
        _, doc_keys, _ = count_keys(docs, keys)  # unique (document, n-gram) pairs
        uniq, counts = np.unique(doc_keys, return_counts=True)
        return cls(n, len(refs), table.words, uniq, counts.astype(np.float64))

    def __len__(self) -> int:
        return int(self.keys.size)

    def __getitem__(self, ngram: Sequence[str]) -> float:
        """Document frequency of a word tuple (0.0 when absent)."""
        table = WordIds(self.words)
        key = encode_tuple(ngram, table)
        if key is None:
            return 0.0
        pos = int(np.searchsorted(self.keys, np.uint64(key)))
        if pos < self.keys.size and int(self.keys[pos]) == key:
            return float(self.counts[pos])
        return 0.0

    def to_dict(self) -> Dict[Tuple[str, ...], float]:
        """``{word tuple: df}``, the form of pycocoevalcap's ``CiderScorer.document_frequency``."""
        return {decode_key(k, self.words): float(c) for k, c in zip(self.keys.tolist(), self.counts)}

    def index(self, keys: np.ndarray) -> np.ndarray:
        """Positions of uint64 keys in :attr:`keys`, -1 where absent (int64, same shape)."""
        if self._index is None:
            self._index = KeyIndex(self.keys)
        return self._index.lookup(keys)

    def log_df(self, keys: np.ndarray) -> np.ndarray:
        """``log(max(1, df))`` of uint64 keys in this table's word-id space; 0 for absent ones."""
        if self.keys.size == 0 or keys.size == 0:
            return np.zeros(keys.shape, np.float64)
        pos = self.index(keys)
        return np.where(pos >= 0, self.log_counts[np.maximum(pos, 0)], 0.0)

    def save(self, path: Union[str, BinaryIO]) -> None:
        """Write an ``.npz`` archive: ``format``, ``version``, ``n``, ``num_docs``, ``words`` (a
        unicode array), ``keys`` (uint64), ``counts`` (float64).

        numpy's ``.npz`` holds plain arrays only and is read with ``allow_pickle=False``, so
        the file cannot carry code (the pickles of older versions could); the uint64 keys
        stay exact and compact, which JSON would not give.

        Args:
            path: a file name (written atomically, under exactly this name) or a binary file.
        """
        if isinstance(path, (str, os.PathLike)):
            from captionlib.utils.fileio import atomic_open

            with atomic_open(path) as f:
                self.save(f)
            return
        np.savez(
            path, format=np.array(_DF_FORMAT), version=np.array(_DF_VERSION), n=np.array(self.n),
            num_docs=np.array(self.num_docs), words=np.array(self.words, dtype=str),
            keys=self.keys, counts=self.counts,
        )

    @classmethod
    def from_dict(cls, obj: Any) -> "DocumentFrequency":
        """Build from the mapping :meth:`save` writes (``format``, ``version``, ``n``,
        ``num_docs``, ``words``, ``keys``, ``counts``), as read from the ``.npz`` or from the
        pickle of an older version.

        Raises:
            ValueError: not that format or version. KeyError: a key missing.
        """
        if not isinstance(obj, dict) or obj.get("format") != _DF_FORMAT:
            raise ValueError("no captionlib.cider_df format key")
        if obj.get("version") != _DF_VERSION:
            raise ValueError(f"unsupported version {obj.get('version')}")
        return cls(obj["n"], obj["num_docs"], obj["words"], obj["keys"], obj["counts"])

    @classmethod
    def load(cls, path: str, trust_pickle: bool = False) -> "DocumentFrequency":
        """Read a file written by :meth:`save` (``.npz``, read with ``allow_pickle=False``).

        Args:
            path: the file.
            trust_pickle: also read the pickle of older captionlib versions (``cider_df.pkl``),
                with :func:`~captionlib.utils.fileio.safe_unpickle` (numpy arrays and numbers
                only, no code run); still an explicit choice, since converting once is better.

        Raises:
            FileNotFoundError: no such file.
            ValueError: naming ``path``: a pickle without ``trust_pickle`` (saying how to
                convert it), or not a captionlib document-frequency file.
        """
        from captionlib.utils.fileio import convert_command, safe_unpickle

        path = os.fspath(path)
        with open(path, "rb") as f:
            is_npz = f.read(4) == b"PK\x03\x04"  # a zip archive; a pickle starts otherwise
        if not is_npz and not trust_pickle:
            npz = (path[: -len(".pkl")] if path.endswith(".pkl") else path) + ".npz"
            raise ValueError(
                f"{path}: not an .npz CIDEr-D document-frequency file. If it is the pickle (cider_df.pkl) of an "
                "older captionlib: it is read (numpy arrays and numbers only) with --trust_pickle true, "
                "for files you made yourself; better convert it once: "
                f"`{convert_command(path, npz)}`, or recompute it with caption_compute_cider_df (recipe stage 4)")
        try:
            if is_npz:
                with np.load(path, allow_pickle=False) as z:  # object arrays are refused
                    obj = {k: z[k] for k in z.files}
                obj.update({k: obj[k].item() for k in ("format", "version", "n", "num_docs") if k in obj})
                obj["words"] = obj["words"].tolist()
            else:
                with open(path, "rb") as f:
                    obj = safe_unpickle(f.read())
            return cls.from_dict(obj)
        except (ValueError, TypeError, OSError, EOFError, KeyError, pickle.UnpicklingError) as e:
            raise ValueError(f"{path}: not a captionlib CIDEr-D document-frequency file "
                             f"({type(e).__name__}: {e})") from None


class _ClipRefs:
    """Cached reference statistics of one clip (R references, U distinct n-grams)."""

    __slots__ = ("keys", "tf", "norms", "lengths", "num_refs")

    def __init__(
        self, keys: np.ndarray, tf: np.ndarray, norms: np.ndarray, lengths: np.ndarray
    ) -> None:
        self.keys = keys  # uint64 (U,) sorted
        self.tf = tf  # float64 (U, R)
        self.norms = norms  # float64 (R, n)
        self.lengths = lengths  # float64 (R,) bigram counts
        self.num_refs = int(lengths.size)


class CiderD:
    """Batched CIDEr-D with fixed document frequencies and cached reference vectors.

    Args:
        df: document frequencies (normally of the train references, stage 4).
        n: highest n-gram order (<= ``df.n``).
        sigma: standard deviation of the Gaussian length penalty.
        refs: optional ``{clip_id: [reference word list, ...]}`` whose clips are cached
            lazily, the first time they are scored.

    Example:
        >>> refs = {"a": [["a", "dog", "barks"], ["a", "dog", "is", "barking"]],
        ...         "b": [["rain", "falls"]]}
        >>> cider = CiderD(DocumentFrequency.from_references(refs), refs=refs)
        >>> cider.score(["a", "a"], [["a", "dog", "barks"], ["rain"]]).shape
        (2,)
    """

    def __init__(
        self,
        df: DocumentFrequency,
        n: int = 4,
        sigma: float = 6.0,
        refs: Optional[Mapping[str, Sequence[Sequence[str]]]] = None,
    ) -> None:
        if n > df.n:
            raise ValueError(f"n={n} exceeds the order of the document frequencies ({df.n})")
        self.df = df
        self.n = int(n)
        self.sigma = float(sigma)
        self.ref_len = math.log(float(df.num_docs))
        self._table = WordIds(df.words)
        self._clips: Dict[str, _ClipRefs] = {}
        self._lazy_refs = refs
        self._lut_key: Optional[Tuple[int, int]] = None
        self._lut: Optional[np.ndarray] = None

    def __contains__(self, clip_id: str) -> bool:
        return clip_id in self._clips

    def __len__(self) -> int:
        return len(self._clips)

    # ------------------------------------------------------------------ references
    def add_refs(self, refs: Mapping[str, Sequence[Sequence[str]]]) -> None:
        """Cache the reference vectors of some clips (replacing earlier ones of the same id).

        Args:
            refs: ``{clip_id: [reference word list, ...]}``; each clip needs >= 1 reference.

        Raises:
            ValueError: if a clip has no reference.
        """
        clips = list(refs)
        sentences: List[Sequence[str]] = []
        bounds = [0]
        for clip in clips:
            rs = refs[clip]
            if len(rs) == 0:
                raise ValueError(f"clip {clip!r} has no reference")
            sentences.extend(rs)
            bounds.append(len(sentences))
        if not clips:
            return
        ids, lengths = self._table.encode(sentences, grow=True)
        rows, keys = ngram_keys(ids, lengths, self.n)
        rows, keys, tf = count_keys(rows, keys)
        vec = tf * (self.ref_len - self.df.log_df(keys))
        order = key_order(keys) - 1
        norms = np.sqrt(
            np.bincount(rows * self.n + order, weights=vec * vec, minlength=len(sentences) * self.n)
        ).reshape(len(sentences), self.n)
        blen = np.maximum(lengths - 1, 0).astype(np.float64)
        ent = np.searchsorted(rows, np.asarray(bounds))  # entry range of each clip
        for c, clip in enumerate(clips):
            a, b = bounds[c], bounds[c + 1]
            ea, eb = ent[c], ent[c + 1]
            uniq, inv = np.unique(keys[ea:eb], return_inverse=True)
            mat = np.zeros((uniq.size, b - a), dtype=np.float64)
            mat[inv, rows[ea:eb] - a] = tf[ea:eb]
            self._clips[clip] = _ClipRefs(uniq, mat, norms[a:b], blen[a:b])

    def _get_clip(self, clip: str) -> _ClipRefs:
        cached = self._clips.get(clip)
        if cached is None:
            if self._lazy_refs is None or clip not in self._lazy_refs:
                raise KeyError(f"no references cached for clip {clip!r} (call add_refs first)")
            self.add_refs({clip: self._lazy_refs[clip]})
            cached = self._clips[clip]
        return cached

    # ------------------------------------------------------------------ scoring
    def score(self, clip_ids: Sequence[str], candidates: Sequence[Sequence[str]]) -> np.ndarray:
        """CIDEr-D of each candidate against the references of its clip.

        Args:
            clip_ids: ``C`` clip ids (repeated for several candidates of one clip).
            candidates: ``C`` word lists (e.g. 5 samples + 1 greedy caption per clip).

        Returns:
            float64 ``(C,)`` scores (pycocoevalcap scale, i.e. already x10).

        Raises:
            ValueError: if the lengths differ. KeyError: for a clip without references.
        """
        if len(clip_ids) != len(candidates):
            raise ValueError(f"{len(clip_ids)} clip ids but {len(candidates)} candidates")
        ids, lengths = self._table.encode(candidates, grow=False)
        return self._score_encoded(clip_ids, ids, lengths)

    def score_ids(
        self,
        clip_ids: Sequence[str],
        token_ids: Union[np.ndarray, Sequence[Sequence[int]]],
        token_list: Sequence[str],
        stop_ids: Iterable[int] = (),
        ignore_ids: Iterable[int] = (),
    ) -> np.ndarray:
        """CIDEr-D of token-id candidates (model output) without building word lists.

        Args:
            clip_ids: ``C`` clip ids.
            token_ids: int ``(C, T)`` array or tensor (or ``C`` sequences); each row is read
                up to (excluding) its first stop id or negative id.
            token_list: id -> word (``tokens.txt``); must stay the same object between
                calls for the lookup table to be reused.
            stop_ids: ids ending a caption (``<sos/eos>``, the padding id).
            ignore_ids: ids dropped wherever they occur (e.g. ``<blank>``).

        Returns:
            float64 ``(C,)`` scores.
        """
        if hasattr(token_ids, "detach"):
            token_ids = token_ids.detach().cpu().numpy()
        if not isinstance(token_ids, np.ndarray):
            width = max([len(t) for t in token_ids] + [1])
            arr = np.full((len(token_ids), width), -1, dtype=np.int64)
            for i, t in enumerate(token_ids):
                arr[i, : len(t)] = t
            token_ids = arr
        tok = np.asarray(token_ids, dtype=np.int64)
        if tok.ndim != 2 or tok.shape[0] != len(clip_ids):
            raise ValueError(f"token_ids must be (C={len(clip_ids)}, T), got {tok.shape}")
        key = (id(token_list), len(token_list))
        if self._lut_key != key:
            self._lut = np.asarray(
                [self._table.add(w) for w in token_list], dtype=np.uint64
            )
            self._lut_key = key
        stop = tok < 0
        for s in stop_ids:
            stop |= tok == s
        stop = np.cumsum(stop, axis=1) > 0
        keep = ~stop
        for s in ignore_ids:
            keep &= tok != s
        lengths = keep.sum(axis=1).astype(np.int64)
        width = max(1, int(lengths.max())) if tok.shape[0] else 1
        ids = np.zeros((tok.shape[0], width), dtype=np.uint64)
        # left-align the kept tokens
        dest = np.cumsum(keep, axis=1) - 1
        r, c = np.nonzero(keep)
        ids[r, dest[r, c]] = self._lut[tok[r, c]]
        return self._score_encoded(clip_ids, ids, lengths)

    def _score_encoded(
        self, clip_ids: Sequence[str], ids: np.ndarray, lengths: np.ndarray
    ) -> np.ndarray:
        num_cand = len(clip_ids)
        n = self.n
        if num_cand == 0:
            return np.zeros(0, np.float64)
        # group the candidates by clip: "position" = index in the grouped order
        slot_of: Dict[str, int] = {}
        slots = np.fromiter(
            (slot_of.setdefault(c, len(slot_of)) for c in clip_ids), dtype=np.int64, count=num_cand
        )
        missing = [c for c in slot_of if c not in self._clips]
        if missing and self._lazy_refs is not None:
            self.add_refs({c: self._lazy_refs[c] for c in missing if c in self._lazy_refs})
        clips = [self._get_clip(c) for c in slot_of]
        perm = np.argsort(slots, kind="stable")
        inv = np.empty_like(perm)
        inv[perm] = np.arange(num_cand)

        rows, keys = ngram_keys(ids, lengths, n)
        rows, keys, tf, log_df = self._count(inv[rows], keys)  # sorted by (position, order)
        idf = self.ref_len - log_df
        vec = tf * idf
        group = rows * n + (key_order(keys) - 1)

        max_refs = max(cl.num_refs for cl in clips)
        match = np.zeros((keys.size, max_refs), dtype=np.float64)
        ref_norms = np.zeros((len(clips), max_refs, n))
        ref_lens = np.zeros((len(clips), max_refs))
        ref_mask = np.zeros((len(clips), max_refs), dtype=bool)
        slot_sorted = slots[perm]
        cand_bounds = np.searchsorted(slot_sorted, np.arange(len(clips) + 1))
        ent_bounds = np.searchsorted(rows, cand_bounds)
        for s, cl in enumerate(clips):
            nr = cl.num_refs
            ref_norms[s, :nr] = cl.norms
            ref_lens[s, :nr] = cl.lengths
            ref_mask[s, :nr] = True
            ea, eb = ent_bounds[s], ent_bounds[s + 1]
            if eb == ea or cl.keys.size == 0:
                continue
            k = keys[ea:eb]
            pos = np.searchsorted(cl.keys, k)
            np.minimum(pos, cl.keys.size - 1, out=pos)
            hit = np.flatnonzero(cl.keys[pos] == k)
            match[ea + hit, :nr] = cl.tf[pos[hit]]

        ref_vec = match * idf[:, None]
        contrib = np.minimum(vec[:, None], ref_vec) * ref_vec  # (E, R)
        num = np.zeros((num_cand * n, max_refs))
        norm2 = np.zeros(num_cand * n)
        if keys.size:
            starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
            gid = group[starts]
            num[gid] = np.add.reduceat(contrib, starts, axis=0)
            norm2[gid] = np.add.reduceat(vec * vec, starts)
        num = num.reshape(num_cand, n, max_refs).transpose(0, 2, 1)  # (C, R, n)
        cand_norm = np.sqrt(norm2).reshape(num_cand, n)

        s = slot_sorted
        denom = cand_norm[:, None, :] * ref_norms[s]
        ok = denom != 0
        # pycocoevalcap divides only when both norms are non-zero
        val = np.where(ok, num / np.where(ok, denom, 1.0), num)
        cand_len = np.maximum(lengths[perm] - 1, 0).astype(np.float64)
        delta = cand_len[:, None] - ref_lens[s]
        penalty = np.exp(-(delta**2) / (2.0 * self.sigma**2))
        val = val * (penalty * ref_mask[s])[:, :, None]
        nrefs = ref_mask[s].sum(axis=1)
        score_sorted = val.sum(axis=1).mean(axis=1) / nrefs * 10.0
        out = np.empty(num_cand)
        out[perm] = score_sorted
        return out

    def _count(
        self, rows: np.ndarray, keys: np.ndarray
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Unique (row, n-gram) pairs sorted by (row, order), with tf and log(max(1, df))."""
        if keys.size == 0:
            z = np.zeros(0, np.float64)
            return rows, keys, z, z
        num_df = len(self.df)
        gidx = self.df.index(keys)
        absent = gidx < 0
        space = num_df
        if absent.any():
            uniq, uinv = np.unique(keys[absent], return_inverse=True)
            gidx[absent] = num_df + uinv
            space += uniq.size
        comp = (rows * self.n + (key_order(keys) - 1)) * space + gidx
        order = np.argsort(comp)
        comp = comp[order]
        starts = np.flatnonzero(np.r_[True, comp[1:] != comp[:-1]])
        tf = np.diff(np.r_[starts, comp.size]).astype(np.float64)
        first = order[starts]
        g = gidx[first]
        log_df = np.where(g < num_df, self.df.log_counts[np.minimum(g, max(num_df - 1, 0))], 0.0)
        return rows[first], keys[first], tf, log_df


def _cider_d_with_df_of(
    docs: Mapping[object, Sequence[Sequence[str]]],
    refs: Mapping[str, Sequence[Sequence[str]]],
    clip_ids: Sequence[str],
    candidates: Sequence[Sequence[str]],
    n: int,
    sigma: float,
) -> np.ndarray:
    """CIDEr-D (C,) of ``candidates`` against ``refs[clip_ids[i]]``, document frequencies of ``docs``."""
    scorer = CiderD(DocumentFrequency.from_references(docs, n=n), n=n, sigma=sigma, refs=refs)
    return scorer.score(clip_ids, candidates)


def corpus_cider_d(
    refs: Mapping[str, Sequence[Sequence[str]]],
    hyps: Mapping[str, Sequence[str]],
    n: int = 4,
    sigma: float = 6.0,
) -> Tuple[float, Dict[str, float]]:
    """Corpus CIDEr-D with document frequencies taken from ``refs`` (as pycocoevalcap's ``Cider``).

    Args:
        refs: ``{clip_id: [reference word list, ...]}`` (tokenized, e.g. by the PTB tokenizer).
        hyps: ``{clip_id: hypothesis word list}``, same clips as ``refs``.
        n, sigma: CIDEr-D parameters.

    Returns:
        ``(mean score, {clip_id: score})``; equals ``Cider().compute_score`` on the same
        tokens (joined by spaces).

    Raises:
        ValueError: if the clip sets differ or are empty.
    """
    mean, per = mean_cider_d_of_sets(refs, {c: [h] for c, h in hyps.items()}, n, sigma)
    logging.debug("CIDEr-D over %d clips", len(per))
    return mean, per


def mean_cider_d_of_sets(
    refs: Mapping[str, Sequence[Sequence[str]]],
    hyp_sets: Mapping[str, Sequence[Sequence[str]]],
    n: int = 4,
    sigma: float = 6.0,
) -> Tuple[float, Dict[str, float]]:
    """Mean CIDEr-D of several captions per clip (seed 001 sec. 5.4: "the average of the
    CIDEr scores of the 5 sampled captions").

    Every caption of ``hyp_sets[c]`` is scored as a candidate against all references of
    clip ``c``, with the document frequencies of ``refs`` (one document per clip, as
    :func:`corpus_cider_d`); a clip's score is the mean over its captions, the result the
    mean over clips. With K captions for every clip this equals the mean over k of
    ``Cider().compute_score(gts, {c: [hyp_sets[c][k]]})``: K ordinary test-set scorings.

    Args:
        refs: ``{clip_id: [reference word list, ...]}``.
        hyp_sets: ``{clip_id: [caption word list, ...]}`` (>= 1 caption), same clips as ``refs``.
        n, sigma: CIDEr-D parameters.

    Returns:
        ``(mean over clips, {clip_id: mean over the clip's captions})``.

    Raises:
        ValueError: if the clip sets differ or are empty, or a clip has no caption.
    """
    if set(refs) != set(hyp_sets):
        missing = sorted(set(refs) - set(hyp_sets))[:5]
        extra = sorted(set(hyp_sets) - set(refs))[:5]
        raise ValueError(f"refs and hyps differ: missing hyps {missing}, hyps without refs {extra}")
    if not refs:
        raise ValueError("nothing to score")
    empty = [c for c, hs in hyp_sets.items() if len(hs) == 0]
    if empty:
        raise ValueError(f"{len(empty)} clips have no caption to score, e.g. {empty[:5]}")
    clips = list(refs)
    clip_ids = [c for c in clips for _ in hyp_sets[c]]
    scores = _cider_d_with_df_of(refs, refs, clip_ids, [h for c in clips for h in hyp_sets[c]], n, sigma)
    bounds = np.cumsum([0] + [len(hyp_sets[c]) for c in clips])
    per = {c: float(np.mean(scores[a:b])) for c, a, b in zip(clips, bounds[:-1], bounds[1:])}
    return float(np.mean(list(per.values()))), per


def batch_cider_d(
    refs: Mapping[str, Sequence[Sequence[str]]],
    clip_ids: Sequence[str],
    candidates: Sequence[Sequence[str]],
    n: int = 4,
    sigma: float = 6.0,
) -> np.ndarray:
    """CIDEr-D with the document frequencies of one mini-batch (seed 000's per-batch IDF).

    Xu et al. 2020 (seed 000, sec. 4) note that "optimizing CIDEr score in a mini-batch
    means that the estimated IDF can be inaccurate": their reward, like the usual SCST
    code, calls ``Cider().compute_score(gts, res)`` on the batch with one entry per
    candidate, ``gts = {i: references of clip_ids[i]}``, ``res = {i: [candidates[i]]}``.
    pycocoevalcap then counts one *document per entry*: a clip with M samples and a greedy
    caption in the batch counts M + 1 times in ``df`` and in ``N = len(candidates)``
    (``ref_len = log(N)``). This function computes exactly that (tested to 1e-6), so
    ``idf`` depends on what else is in the batch; :class:`CiderD` with the train-set
    :class:`DocumentFrequency` is the default reward.

    Args:
        refs: ``{clip_id: [reference word list, ...]}``; must hold every id of ``clip_ids``.
        clip_ids: ``C`` clip ids, repeated for several candidates of one clip.
        candidates: ``C`` word lists (everything scored in one reward call).
        n, sigma: CIDEr-D parameters.

    Returns:
        float64 ``(C,)`` scores (pycocoevalcap scale, x10).

    Raises:
        ValueError: if the lengths differ. KeyError: for a clip without references.
    """
    if len(clip_ids) != len(candidates):
        raise ValueError(f"{len(clip_ids)} clip ids but {len(candidates)} candidates")
    if not clip_ids:
        return np.zeros(0, np.float64)
    docs = {i: refs[c] for i, c in enumerate(clip_ids)}
    return _cider_d_with_df_of(docs, refs, clip_ids, candidates, n, sigma)


def read_clip_references(text: str, utt2spk: Optional[str] = None) -> Dict[str, List[List[str]]]:
    """Cleaned train references grouped per clip, from a data dir ``text`` file.

    Captions are cleaned with :func:`captionlib.text.cleaner.clean_words` (the words the
    model emits). Caption ids map to clips through ``utt2spk`` (default: the ``utt2spk``
    next to ``text`` when present), else through the caption-id form ``<clip-id>-<k>``.

    Raises:
        ValueError: for malformed lines (file and line named), a caption id missing from
            ``utt2spk``, a caption id not of the form ``<clip-id>-<k>`` without utt2spk, or a
            caption without a word after cleaning (only punctuation).
    """
    from captionlib.io.datadir import read_text, read_utt2spk
    from captionlib.text.cleaner import clean_words

    captions = read_text(text)
    if utt2spk is None:
        beside = os.path.join(os.path.dirname(os.path.abspath(text)), "utt2spk")
        utt2spk = beside if os.path.isfile(beside) else None
    mapping = read_utt2spk(utt2spk) if utt2spk else None
    refs: Dict[str, List[List[str]]] = {}
    for utt, caption in captions.items():
        if mapping is not None:
            if utt not in mapping:
                raise ValueError(f"{text}: caption id {utt!r} is not in {utt2spk}")
            clip = mapping[utt]
        else:
            clip, sep, k = utt.rpartition("-")
            if not sep or not clip or not k.isdigit():
                raise ValueError(
                    f"{text}: caption id {utt!r} is not <clip-id>-<k> and there is no utt2spk"
                )
        words = clean_words(caption)
        if not words:  # caption_prepare_* and caption_score refuse one too: it would count as a document
            raise ValueError(f"{text}: caption {utt!r} has no word left after cleaning: {caption!r}")
        refs.setdefault(clip, []).append(words)
    return refs


def compute_cider_df(
    text: str, output: str, utt2spk: Optional[str] = None, n: int = 4
) -> DocumentFrequency:
    """Stage 4: CIDEr-D document frequencies of the train references, saved to ``output``.

    Args:
        text: ``data/<train>/text``.
        output: e.g. ``exp/stats_<feats_tag>/cider_df.npz`` (written atomically, parent directories created).
        utt2spk: caption -> clip map (default: next to ``text``, else caption-id prefix).
        n: highest n-gram order.

    Returns:
        The document frequencies written.
    """
    refs = read_clip_references(text, utt2spk)
    df = DocumentFrequency.from_references(refs, n=n)
    df.save(output)
    logging.info(
        "%d clips, %d references, %d n-grams (n<=%d) -> %s",
        df.num_docs, sum(len(v) for v in refs.values()), len(df), n, output,
    )
    return df
