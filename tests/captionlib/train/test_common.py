"""Epoch batching of captionlib.train.common (one pass, or ESPnet2-style num_iters_per_epoch)."""

import pytest

from captionlib.train.common import epoch_batches


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
