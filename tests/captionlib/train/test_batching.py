"""Epoch batching of captionlib.train.batching (one pass, or ESPnet2-style num_iters_per_epoch)."""

import numpy as np
import pytest

from captionlib.train.batching import epoch_batches


def test_one_pass_per_epoch_covers_every_item_once():
    b = epoch_batches(10, 4, seed=0, epoch=1)
    assert [len(x) for x in b] == [4, 4, 2]
    assert sorted(i for x in b for i in x) == list(range(10))
    assert b != epoch_batches(10, 4, seed=0, epoch=2)  # reshuffled each epoch
    assert b == epoch_batches(10, 4, seed=0, epoch=1)  # reproducible (resume)


def test_num_iters_per_epoch_continues_through_reshuffled_passes():
    # 3 batches per pass; epochs of 5 batches: epoch 1 = pass 1 + 2 batches of pass 2, ...
    stream = [epoch_batches(10, 4, 0, e, num_iters_per_epoch=5) for e in (1, 2, 3)]
    assert all(len(s) == 5 for s in stream)
    flat = [x for s in stream for x in s]
    passes = [flat[i: i + 3] for i in range(0, 15, 3)]
    for p in passes:  # every pass is a permutation of all items
        assert sorted(i for x in p for i in x) == list(range(10))
    assert passes[0] == epoch_batches(10, 4, 0, 1)
    assert passes[0] != passes[1]


def test_num_iters_per_epoch_shorter_than_a_pass():
    b = epoch_batches(100, 10, 0, 1, num_iters_per_epoch=3)
    assert len(b) == 3 and len({i for x in b for i in x}) == 30


def test_batch_larger_than_corpus_repeats_the_corpus():
    b = epoch_batches(3, 32, 0, 2, num_iters_per_epoch=4)
    assert len(b) == 4 and all(sorted(x) == [0, 1, 2] for x in b)


@pytest.mark.parametrize("args", [(0, 4, 0, 1, None), (5, 0, 0, 1, None), (5, 2, 0, 1, 0)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        epoch_batches(*args)


def _padding(batches, lengths):
    return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)


def test_bucketed_batches_cut_padding_and_stay_shuffled_and_reproducible():
    rng = np.random.default_rng(0)
    lengths = rng.integers(15 * 25, 30 * 25, size=1000).tolist()  # Clotho: 15-30 s
    b = epoch_batches(1000, 32, 0, 1, lengths=lengths, bucket_pool=8)
    assert sorted(i for x in b for i in x) == list(range(1000))
    assert sum(len(x) < 32 for x in b) == 1  # only the pass's last pool ends short
    assert _padding(b, lengths) < 0.2 * _padding(epoch_batches(1000, 32, 0, 1), lengths)
    assert b == epoch_batches(1000, 32, 0, 1, lengths=lengths, bucket_pool=8)  # resume
    b2 = epoch_batches(1000, 32, 0, 2, lengths=lengths, bucket_pool=8)
    assert {tuple(x) for x in b} != {tuple(x) for x in b2}  # new bins every pass
    firsts = [max(lengths[i] for i in x) for x in b]
    assert firsts != sorted(firsts)  # the batch order is shuffled, not by length
    # bucket_pool 0: ESPnet2's sorted batches, the same bins every pass in a new order
    s1 = epoch_batches(1000, 32, 0, 1, lengths=lengths, bucket_pool=0)
    s2 = epoch_batches(1000, 32, 0, 2, lengths=lengths, bucket_pool=0)
    assert {tuple(x) for x in s1} == {tuple(x) for x in s2} and s1 != s2


def test_bucketed_batches_with_num_iters_per_epoch():
    lengths = list(range(50))
    stream = [epoch_batches(50, 8, 3, e, num_iters_per_epoch=4, lengths=lengths, bucket_pool=2) for e in (1, 2, 3, 4)]
    flat = [x for s in stream for x in s]
    assert sorted(i for x in flat[:7] for i in x) == list(range(50))  # 7 batches per pass
    assert flat[:7] == epoch_batches(50, 8, 3, 1, lengths=lengths, bucket_pool=2)
    with pytest.raises(ValueError, match="lengths"):
        epoch_batches(50, 8, 3, 1, lengths=lengths[:-1])
    with pytest.raises(ValueError, match="bucket_pool"):
        epoch_batches(50, 8, 3, 1, lengths=lengths, bucket_pool=-1)
