"""captionlib.utils.distributed: batch sharding here, and the collectives under a real
2-rank gloo ``torchrun`` (ddp_checks.py) against one process on the whole batch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from captionlib.models.captioner import Captioner
from captionlib.utils.distributed import Dropout, eval_rows, eval_rows_exact, finish, shard_batches

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
    uniforms, the loop-stop vote, padding, loss weighting, gradient sums and broadcasts, and the
    greedy baseline and samples decoded in one pass."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parents[2]))
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(HERE / "ddp_checks.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert r.returncode == 0 and (tmp_path / "ok").exists(), (r.stdout + r.stderr)[-6000:]
    # du.finish() at its end: the process group left and the process ended with status 0
    for rank in range(2):
        assert (tmp_path / f"log.{rank}").read_text() == f"rank {rank} logged before finish\n"
        assert (tmp_path / f"atexit.{rank}").exists()
        assert f"rank {rank} printed before finish" in r.stdout
        assert not (tmp_path / f"after_finish.{rank}").exists()


def test_finish_returns_without_a_process_group():
    """A binary's main() called in-process (no torchrun) goes on after finish()."""
    assert finish() is None


def test_eval_rows_leave_the_first_rows_and_draw_the_others_alone():
    """Dropout inside eval_rows(k): rows < k pass unchanged, the others get the mask a call on
    them alone draws, and k >= rows draws nothing; eval_rows_exact tells where that equals eval
    mode for the first rows."""
    x, drop = torch.randn(5, 3, 4) + 3, Dropout(0.5).train()
    torch.manual_seed(1)
    fresh, want, after = torch.rand(1), drop(x[2:]), torch.rand(1)
    with eval_rows(2):
        torch.manual_seed(1)
        torch.rand(1)
        got = drop(x)
        assert torch.equal(got[:2], x[:2]) and torch.equal(got[2:], want) and not torch.equal(got[2:], x[2:])
        assert torch.equal(torch.rand(1), after)
        torch.manual_seed(1)
        assert torch.equal(drop(x[:2]), x[:2]) and torch.equal(torch.rand(1), fresh)  # no draw at all
    assert not torch.equal(drop(x), x)  # the block restores every row's dropout
    decoders = [Captioner(9, decoder=d, decoder_conf=c) for d, c in (
        ("gru", {}), ("att_lstm", {"hidden_size": 8}), ("transformer", {"num_layers": 1, "d_model": 16, "nhead": 2}))]
    assert all(eval_rows_exact(m.decoder) for m in decoders)
    attention = Captioner(9, decoder="transformer", decoder_conf={"num_layers": 1, "d_model": 16, "nhead": 2,
                                                                   "attention_dropout": 0.1})
    assert not eval_rows_exact(attention.decoder)
    for other in (nn.Dropout(0.1), nn.Dropout2d(0.1), nn.AlphaDropout(0.1), nn.BatchNorm1d(2), nn.RReLU(),
                  nn.GRU(2, 2, num_layers=2, dropout=0.1), nn.InstanceNorm1d(2, track_running_stats=True),
                  type("Custom", (nn.Module,), {})()):  # a leaf of unknown kind
        assert not eval_rows_exact(nn.Sequential(nn.Linear(2, 2), other)), other
    assert eval_rows_exact(nn.Sequential(nn.Dropout(0.0), Dropout(0.3), nn.LayerNorm(2), nn.GELU(),
                                         nn.LSTM(2, 2, num_layers=2), nn.GRU(2, 2, dropout=0.0)))
    with pytest.raises(ValueError, match="rows >= 0"):
        with eval_rows(-1):
            pass
