"""Integer encoding of word n-grams shared by the CIDEr-D engine and the document frequencies.

Words get integer ids ``1 .. MAX_WORD_ID`` (0 is reserved). An n-gram ``(w1, ..., wn)``
of word ids is encoded as the unsigned 64-bit integer ``w1*B^(n-1) + ... + wn`` with
``B = 2**16``. Because word ids are at least 1, keys of order ``n`` lie in
``[B^(n-1), B^n)``: the order can be read from the key and keys of different orders
never collide. With ``n <= 4`` every key fits in ``uint64``.

The encoding is exact (no hashing), so scores computed on keys equal scores computed on
word tuples. The price is a vocabulary limit of ``MAX_WORD_ID = 65535`` distinct words per
:class:`WordIds` table, far above the few thousand words of Clotho or AudioCaps.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

BASE_BITS = 16
BASE = np.uint64(1 << BASE_BITS)
MAX_WORD_ID = (1 << BASE_BITS) - 1
MAX_ORDER = 4
# _BOUNDS[k] = B**k: smallest key of order k + 1
_BOUNDS = [np.uint64(1 << (BASE_BITS * k)) for k in range(MAX_ORDER)]


class WordIds:
    """A growing ``word -> id`` table (ids start at 1).

    Args:
        words: initial words, given ids ``1..len(words)`` in that order.

    Raises:
        ValueError: when more than :data:`MAX_WORD_ID` words are added.
    """

    def __init__(self, words: Iterable[str] = ()) -> None:
        self.word2id: Dict[str, int] = {}
        self.words: List[str] = []
        for w in words:
            self.add(w)

    def __len__(self) -> int:
        return len(self.words)

    def add(self, word: str) -> int:
        """Return the id of ``word``, giving it the next free id if it is new."""
        wid = self.word2id.get(word)
        if wid is None:
            if len(self.words) >= MAX_WORD_ID:
                raise ValueError(
                    f"more than {MAX_WORD_ID} distinct words: the exact 64-bit n-gram "
                    "encoding of captionlib.metrics cannot hold this vocabulary"
                )
            self.words.append(word)
            wid = len(self.words)
            self.word2id[word] = wid
        return wid

    def encode(
        self, sentences: Sequence[Sequence[str]], grow: bool = True
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Turn word lists into a padded id matrix.

        Args:
            sentences: ``S`` word lists.
            grow: add unknown words permanently (``True``) or give them temporary ids
                above the table, distinct per word and valid for this call only
                (``False``; used for candidates so that a long RL run cannot fill the
                table with one-off words).

        Returns:
            ``(ids, lengths)``: ``ids`` uint64 ``(S, T)`` zero-padded, ``T = max length``
            (at least 1); ``lengths`` int64 ``(S,)``.
        """
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
        width = max(1, int(lengths.max())) if len(sentences) else 1
        ids = np.zeros((len(sentences), width), dtype=np.uint64)
        get = self.word2id.get
        flat = [get(w, 0) for s in sentences for w in s]
        if 0 in flat:
            words = [w for s in sentences for w in s]
            temp: Dict[str, int] = {}
            for i in np.flatnonzero(np.asarray(flat) == 0).tolist():
                w = words[i]
                if grow:
                    flat[i] = self.add(w)
                    continue
                wid = temp.get(w)
                if wid is None:
                    wid = len(self.words) + 1 + len(temp)
                    if wid > MAX_WORD_ID:
                        raise ValueError(f"more than {MAX_WORD_ID} distinct words in one call")
                    temp[w] = wid
                flat[i] = wid
        if flat:
            mask = np.arange(width)[None, :] < lengths[:, None]
            ids[mask] = np.asarray(flat, dtype=np.uint64)
        return ids, lengths


def ngram_keys(
    ids: np.ndarray, lengths: np.ndarray, n: int = MAX_ORDER
) -> Tuple[np.ndarray, np.ndarray]:
    """All n-grams (orders 1..n) of each row of a padded id matrix, as uint64 keys.

    Args:
        ids: uint64 ``(S, T)`` word ids (see :class:`WordIds`), rows padded with 0.
        lengths: int ``(S,)`` number of valid words per row.
        n: highest order (1..4).

    Returns:
        ``(rows, keys)``: int64 ``(E,)`` row index and uint64 ``(E,)`` key of every n-gram
        occurrence (duplicates kept; ``E = sum_k sum_rows max(0, len - k + 1)``).
    """
    if not 1 <= n <= MAX_ORDER:
        raise ValueError(f"n must be in 1..{MAX_ORDER}, got {n}")
    num, width = ids.shape
    rows_out, keys_out = [], []
    key = ids.copy()
    pos = np.arange(width)[None, :]
    for k in range(1, n + 1):
        if k > 1:
            if width - k + 1 <= 0:
                break
            key = key[:, :-1] * BASE + ids[:, k - 1 :]
        valid = pos[:, : key.shape[1]] + k <= lengths[:, None]
        r, _ = np.nonzero(valid)
        rows_out.append(r)
        keys_out.append(key[valid])
    if not rows_out:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    return np.concatenate(rows_out).astype(np.int64), np.concatenate(keys_out)


def key_order(keys: np.ndarray) -> np.ndarray:
    """Order (1..4) of each uint64 n-gram key, as int64 ``(E,)``."""
    order = np.ones(keys.shape, dtype=np.int64)
    for k in range(1, MAX_ORDER):
        order += keys >= _BOUNDS[k]
    return order


def count_keys(rows: np.ndarray, keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Term frequencies: unique ``(row, key)`` pairs and their counts.

    Returns:
        ``(rows, keys, counts)`` sorted by row, then key (so, within a row, by order);
        counts float64.
    """
    if rows.size == 0:
        return rows, keys, np.zeros(0, np.float64)
    perm = np.lexsort((keys, rows))
    r, k = rows[perm], keys[perm]
    start = np.ones(r.size, dtype=bool)
    start[1:] = (r[1:] != r[:-1]) | (k[1:] != k[:-1])
    idx = np.flatnonzero(start)
    counts = np.diff(np.append(idx, r.size)).astype(np.float64)
    return r[idx], k[idx], counts


def decode_key(key: int, words: Sequence[str]) -> Tuple[str, ...]:
    """The word tuple of one key (``words[i-1]`` is the word of id ``i``)."""
    key = int(key)
    out: List[str] = []
    base = 1 << BASE_BITS
    while key:
        out.append(words[key % base - 1])
        key //= base
    return tuple(reversed(out))


def encode_tuple(ngram: Sequence[str], table: "WordIds") -> Optional[int]:
    """Key of a word tuple, or ``None`` when a word is not in ``table``."""
    key = 0
    for w in ngram:
        wid = table.word2id.get(w)
        if wid is None:
            return None
        key = key * (1 << BASE_BITS) + wid
    return key


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class KeyIndex:
    """Vectorised exact hash index ``uint64 key -> position`` (open addressing, linear probing).

    ``np.searchsorted`` on a table of some 10^5 keys costs about 0.1 us per query because
    of cache misses; this index answers a batch of queries with a few gathers, which is
    what makes the CIDEr-D reward fast.

    Args:
        keys: uint64 ``(G,)`` distinct non-zero keys; ``lookup`` returns positions in it.
    """

    def __init__(self, keys: np.ndarray) -> None:
        keys = np.asarray(keys, dtype=np.uint64)
        bits = max(4, int(np.ceil(np.log2(max(1, keys.size) * 2.5))))
        self._shift = np.uint64(64 - bits)
        self._mask = (1 << bits) - 1
        size = 1 << bits
        self._keys = np.zeros(size, dtype=np.uint64)  # 0 = empty slot
        self._vals = np.full(size, -1, dtype=np.int64)
        pending = np.arange(keys.size)
        slot = self._hash(keys)
        while pending.size:
            s = slot[pending]
            free = self._keys[s] == 0
            # among keys aiming at the same free slot, the first one gets it
            cand = pending[free]
            _, first = np.unique(s[free], return_index=True)
            winners = cand[first]
            self._keys[slot[winners]] = keys[winners]
            self._vals[slot[winners]] = winners
            done = np.zeros(keys.size, dtype=bool)
            done[winners] = True
            pending = pending[~done[pending]]
            slot[pending] = (slot[pending] + 1) & self._mask

    def _hash(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ((keys * _GOLDEN) >> self._shift).astype(np.int64)

    def lookup(self, queries: np.ndarray) -> np.ndarray:
        """Positions of ``queries`` in the indexed keys, -1 where absent (int64, same shape)."""
        queries = np.asarray(queries, dtype=np.uint64)
        out = np.full(queries.shape, -1, dtype=np.int64)
        active = np.arange(queries.size)
        slot = self._hash(queries)
        while active.size:
            s = slot[active]
            tk = self._keys[s]
            found = tk == queries[active]
            out[active[found]] = self._vals[s[found]]
            cont = ~found & (tk != 0)
            active = active[cont]
            slot[active] = (s[cont] + 1) & self._mask
        return out
