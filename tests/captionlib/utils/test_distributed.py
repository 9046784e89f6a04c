"""captionlib.utils.distributed: batch sharding here, and the collectives under a real
2-rank gloo ``torchrun`` (ddp_checks.py) against one process on the whole batch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from captionlib.utils.distributed import shard_batches

HERE = Path(__file__).resolve().parent


def test_shard_batches_gives_contiguous_blocks_larger_first():
    batches = [[5, 3, 8, 1, 0], [2, 7], [4, 6, 9]]
    assert shard_batches(batches, 0, 1) == batches
    assert shard_batches(batches, 0, 2) == [[5, 3, 8], [2], [4, 6]]
    assert shard_batches(batches, 1, 2) == [[1, 0], [7], [9]]
    # blocks of all ranks, in rank order, are the global batch
    for rank_batches in zip(*(shard_batches(batches, r, 3) for r in range(3))):
        assert all(rank_batches)
    assert [sum(blocks, []) for blocks in zip(*(shard_batches(batches, r, 2) for r in range(2)))] == batches


def test_shard_batches_merges_a_batch_smaller_than_the_ranks():
    # 3 ranks: [9] would leave two ranks idle, so it joins the batch before it
    assert [shard_batches([[0, 1, 2], [9], [3, 4, 5]], r, 3) for r in range(3)] == [
        [[0, 1], [3]], [[2], [4]], [[9], [5]]]
    # a short first batch joins the next one
    assert shard_batches([[9], [0, 1]], 0, 2) == [[9, 0]]
    with pytest.raises(ValueError, match="1 training items for 2 ranks"):
        shard_batches([[0]], 0, 2)


def test_two_gloo_ranks_equal_one_process(tmp_path):
    """BatchNorm statistics and gradients, dropout masks (also channels-last), row-wise
    uniforms, the loop-stop vote, padding, loss weighting, gradient sums and broadcasts."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parents[2]))
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(HERE / "ddp_checks.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert r.returncode == 0 and (tmp_path / "ok").exists(), (r.stdout + r.stderr)[-6000:]
