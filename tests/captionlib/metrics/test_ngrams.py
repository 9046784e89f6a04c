"""Integer n-gram encoding and the hash index behind the CIDEr-D engine."""

import numpy as np
import pytest

from captionlib.metrics.ngrams import (
    MAX_WORD_ID,
    KeyIndex,
    WordIds,
    count_keys,
    decode_key,
    encode_tuple,
    key_order,
    ngram_keys,
)


def test_keys_roundtrip_and_order():
    table = WordIds()
    sents = [["a", "b", "a", "b"], [], ["c"]]
    ids, lengths = table.encode(sents)
    rows, keys = ngram_keys(ids, lengths, 4)
    got = sorted((int(r), decode_key(k, table.words)) for r, k in zip(rows, keys))
    want = sorted(
        (i, tuple(s[j : j + n])) for i, s in enumerate(sents) for n in range(1, 5) for j in range(len(s) - n + 1)
    )
    assert got == want
    np.testing.assert_array_equal(key_order(keys), [len(decode_key(k, table.words)) for k in keys])
    assert encode_tuple(("a", "b"), table) == int(keys[(rows == 0) & (key_order(keys) == 2)][0])
    assert encode_tuple(("a", "zz"), table) is None
    r, k, tf = count_keys(rows, keys)
    assert dict(zip([decode_key(x, table.words) for x in k[r == 0]], tf[r == 0]))[("a", "b")] == 2


def test_temporary_ids_do_not_grow_table():
    table = WordIds(["a"])
    ids, _ = table.encode([["a", "new", "new", "other"]], grow=False)
    assert len(table) == 1
    assert ids[0, 1] == ids[0, 2] != ids[0, 3]
    assert ids[0, 1] > 1


def test_vocabulary_limit():
    table = WordIds()
    table.words = ["w"] * MAX_WORD_ID  # simulate a full table
    with pytest.raises(ValueError, match="distinct words"):
        table.add("one-more")


def test_key_index():
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**63, 5000).astype(np.uint64))
    index = KeyIndex(keys)
    queries = np.concatenate([keys[rng.integers(0, keys.size, 3000)], rng.integers(1, 2**63, 1000).astype(np.uint64)])
    pos = np.searchsorted(keys, queries)
    want = np.where(keys[np.minimum(pos, keys.size - 1)] == queries, pos, -1)
    np.testing.assert_array_equal(index.lookup(queries), want)
    assert KeyIndex(np.zeros(0, np.uint64)).lookup(queries[:3]).tolist() == [-1, -1, -1]
