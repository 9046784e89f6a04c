"""Run by test_distributed.py under ``torchrun --nproc_per_node 2`` (gloo, CPU): each check
compares what the two ranks compute on their blocks with one process on the whole batch.
Rank 0 writes ``<out>/ok`` when every check passed (an assertion ends the rank with an error).
"""

import atexit
import logging
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from captionlib.utils import distributed as du

torch.set_num_threads(1)
du.init_distributed(0)
RANK, WORLD = du.rank_and_world()
assert WORLD == 2
ROWS = [3, 2]  # rank 0 holds rows 0-2 of the global batch, rank 1 rows 3-4
START = sum(ROWS[:RANK])
BLOCK = slice(START, START + ROWS[RANK])


def close(a, b, tol=1e-5):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.allclose(a, b, rtol=tol, atol=tol), (a - b).abs().max()


def check_batchnorm():
    torch.manual_seed(0)
    x = torch.randn(5, 4, 6, 3) * 3 + 1
    ref_bn, bn = nn.BatchNorm2d(4), du.BatchNorm2d(4)
    with torch.no_grad():
        ref_bn.weight.uniform_(0.5, 1.5)
        ref_bn.bias.uniform_(-1, 1)
    bn.load_state_dict(ref_bn.state_dict())
    x_ref = x.clone().requires_grad_(True)
    w = torch.randn(5, 4, 6, 3)
    y_ref = ref_bn(x_ref)  # one process, the whole batch
    (y_ref * w).sum().backward()
    x_loc = x[BLOCK].clone().requires_grad_(True)
    y = bn(x_loc)
    close(y, y_ref[BLOCK].detach())
    (y * w[BLOCK]).sum().backward()
    close(x_loc.grad, x_ref.grad[BLOCK])  # the gradient reaches each rank's rows through the global statistics
    du.all_reduce_gradients(list(bn.parameters()))
    close(bn.weight.grad, ref_bn.weight.grad)
    close(bn.bias.grad, ref_bn.bias.grad)
    close(bn.running_mean, ref_bn.running_mean)
    close(bn.running_var, ref_bn.running_var)
    assert int(bn.num_batches_tracked) == 1
    bn.eval()  # eval mode: running statistics, no collective
    close(bn(x_loc.detach()), nn.BatchNorm2d.forward(bn, x_loc.detach()))
    # half-precision input (autocast on GPUs): statistics in float32, so a count of 150k per
    # channel and its sums do not overflow float16; the output keeps the input's dtype
    big = torch.randn(5, 2, 150, 200) * 2 + 3
    ref = nn.BatchNorm2d(2)(big)
    out = du.BatchNorm2d(2)(big[BLOCK].half())
    assert out.dtype == torch.float16
    close(out.float(), ref[BLOCK].detach(), tol=1e-2)


def check_random_draws():
    for channels_last in (False, True):
        torch.manual_seed(1)
        x = torch.randn(5, 4, 6, 3)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        drop = du.Dropout(0.4)
        torch.manual_seed(2)
        ref = nn.functional.dropout(x, 0.4, training=True)
        torch.manual_seed(2)
        with du.row_sharded_randomness():
            out = drop(x[BLOCK])
        assert torch.equal(out, ref[BLOCK]), channels_last
    torch.manual_seed(3)
    ref = torch.rand(5, 2, dtype=torch.float64)
    torch.manual_seed(3)
    with du.row_sharded_randomness():
        assert torch.equal(du.rows_rand(ROWS[RANK], 2, dtype=torch.float64), ref[BLOCK])
        assert du.all_ranks(RANK == 0) is False and du.all_ranks(True) is True
    torch.manual_seed(3)
    assert torch.equal(du.rows_rand(ROWS[RANK], 2, dtype=torch.float64), ref[: ROWS[RANK]])  # outside: local draw
    assert du.all_ranks(RANK == 0) is (RANK == 0)
    # objectives without row-sharded draws: each rank its own stream, the shared one stays in step
    torch.manual_seed(4)
    with du.rank_random_stream(torch.device("cpu")):
        mine = torch.rand(3)
    after = torch.rand(2)
    gathered = [torch.zeros(3), torch.zeros(3)], [torch.zeros(2), torch.zeros(2)]
    dist.all_gather(gathered[0], mine)
    dist.all_gather(gathered[1], after)
    assert not torch.equal(*gathered[0]) and torch.equal(*gathered[1])


def check_checkpointed_row_sharded_draws():
    """Activation checkpointing (encoder_conf.gradient_checkpointing): the recomputation, in the
    backward pass outside row_sharded_randomness, draws the forward pass's row-sharded masks, so
    each rank's rows and the summed gradients are one process's on the whole batch."""
    from captionlib.models.encoders import checkpointed

    torch.manual_seed(6)
    net, x = nn.Sequential(nn.Linear(7, 7), du.Dropout(0.5), nn.Tanh()), torch.randn(5, 7)
    x_ref = x.clone().requires_grad_()
    torch.manual_seed(7)
    ref = net(x_ref)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    x_loc = x[BLOCK].clone().requires_grad_()
    torch.manual_seed(7)
    with du.row_sharded_randomness():
        out = checkpointed(net, x_loc)
    out.square().sum().backward()
    close(out, ref[BLOCK].detach())
    close(x_loc.grad, x_ref.grad[BLOCK])
    for p, want in zip(net.parameters(), ref_grads):
        dist.all_reduce(p.grad)
        close(p.grad, want)


def check_padding_and_reduction():
    feats = torch.ones(ROWS[RANK], 4 + RANK * 3, 2)
    ids = torch.ones(ROWS[RANK], 5 - RANK, dtype=torch.long)
    names = [f"clip{i}" for i in range(ROWS[RANK])]
    out = du.pad_to_global((names, feats, torch.tensor([1]), ids))
    assert out[0] == names and out[1].shape == (ROWS[RANK], 7, 2) and out[3].shape == (ROWS[RANK], 5)
    assert float(out[1][:, feats.size(1):].abs().sum()) == 0 and int(out[3][:, ids.size(1):].sum()) == 0
    # loss means over 3 and 2 units: the weighted loss sums to the global mean
    loss = torch.tensor(2.0 + RANK)
    scaled, stats, nonfinite = du.reduce_step(loss, {"acc": 0.5 + RANK * 0.25}, float(ROWS[RANK]))
    assert not nonfinite
    total = du.all_reduce_sum(scaled.detach().clone())
    close(total, torch.tensor((2.0 * 3 + 3.0 * 2) / 5))
    close(torch.tensor(stats["acc"]), torch.tensor((0.5 * 3 + 0.75 * 2) / 5))
    _, _, nonfinite = du.reduce_step(torch.tensor(float("nan") if RANK == 1 else 1.0), {}, 1.0)
    assert nonfinite  # seen by both ranks, so both stop
    # gradients: summed; a parameter without a gradient on any rank keeps none
    used, unused, half = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    loss = (used * (RANK + 1)).sum() + ((half * 3).sum() if RANK == 0 else 0)
    loss.backward()
    du.all_reduce_gradients([used, unused, half])
    close(used.grad, torch.full((2,), 3.0))
    assert unused.grad is None
    close(half.grad, torch.full((2,), 3.0))
    # rank 0's weights everywhere
    m = nn.Linear(2, 2)
    with torch.no_grad():
        m.weight.fill_(RANK)
    du.broadcast_state(m)
    assert float(m.weight.abs().sum()) == 0
    assert du.broadcast_object({"rank": RANK}) == {"rank": 0}


def check_recomputed_logprobs_of_trimmed_samples():
    """--sample_logprobs recompute: off the CPU each rank trims its samples to its own longest
    caption; the teacher-forced pass must still draw the one-process dropout masks."""
    from captionlib.decode.search import SampleOutput
    from captionlib.models.captioner import Captioner
    from captionlib.rl.policy_gradient import teacher_forced_logprobs

    torch.manual_seed(5)
    model = Captioner(9, decoder_conf={"hidden_size": 8, "dropout": 0.3}, encoder_conf={"dropout": 0.0}).train()
    v = torch.randn(5, model.embed_size)
    lengths = [6, 4, 5, 3, 2]  # rank 0's captions run to 6 tokens, rank 1's to 3
    tokens = torch.zeros(5, 6, dtype=torch.long)
    for i, n in enumerate(lengths):
        tokens[i, : n - 1] = torch.arange(1, n)
        tokens[i, n - 1] = model.eos_id
    mask = (torch.arange(6)[None] < torch.tensor(lengths)[:, None]).float()
    torch.manual_seed(6)
    ref = teacher_forced_logprobs(model, v, SampleOutput(tokens, None, mask, None), 6)
    width = max(lengths[BLOCK])
    mine = SampleOutput(tokens[BLOCK, :width], None, mask[BLOCK, :width], None)
    torch.manual_seed(6)
    with du.row_sharded_randomness():
        out = teacher_forced_logprobs(model, v[BLOCK], mine, 6)
    close(out.logprobs, ref.logprobs[BLOCK, :width].detach())
    close(out.entropy, ref.entropy[BLOCK, :width].detach())
    after = [torch.zeros(1), torch.zeros(1)]
    dist.all_gather(after, torch.rand(1))
    assert torch.equal(*after)  # the generators stay in step


def check_greedy_rows_of_one_pass():
    """sample(greedy_rows=...), the greedy baseline and the samples in one pass: each rank's
    baseline rows and sample rows are one process's on the global batch, also after the samples
    have all ended and the greedy rows go on alone: rank 0's had ended by then, rank 1's had not,
    so both must vote on going on (a rank deciding alone would leave the other in a collective)."""
    from captionlib.decode.search import sample
    from captionlib.models.captioner import Captioner

    torch.manual_seed(32)
    model = Captioner(9, decoder_conf={"hidden_size": 8, "dropout": 0.3}, encoder_conf={"dropout": 0.0}).train()
    v = torch.randn(5, model.embed_size)
    with torch.no_grad():
        torch.manual_seed(8)
        ref = sample(model, torch.cat([v, v]), 30, greedy_rows=5)
        ends = ref.mask.sum(1)  # rank 0's greedy rows end with the samples at the latest, rank 1's after them
        assert ends[:3].max() <= ends[5:].max() < ends[3:5].max() < 30, ends
        torch.manual_seed(8)
        with du.row_sharded_randomness():
            out = sample(model, torch.cat([v[BLOCK], v[BLOCK]]), 30, greedy_rows=ROWS[RANK])
    n = ROWS[RANK]
    assert torch.equal(out.tokens[:n], ref.tokens[BLOCK]) and torch.equal(out.tokens[n:], ref.tokens[5:][BLOCK])
    close(out.logprobs[n:], ref.logprobs[5:][BLOCK])
    after = [torch.zeros(1), torch.zeros(1)]
    dist.all_gather(after, torch.rand(1))
    assert torch.equal(*after)


check_batchnorm()
check_random_draws()
check_checkpointed_row_sharded_draws()
check_recomputed_logprobs_of_trimmed_samples()
check_greedy_rows_of_one_pass()
check_padding_and_reduction()
du.barrier()
if RANK == 0:
    (Path(sys.argv[1]) / "ok").write_text("ok\n")
# finish(): the atexit functions and the log handlers run, the streams are flushed, and the
# process ends with status 0 without returning
OUT = Path(sys.argv[1])
log = logging.getLogger("finish")
log.addHandler(logging.FileHandler(OUT / f"log.{RANK}"))  # closed by logging's atexit function
log.setLevel(logging.INFO)
log.info("rank %d logged before finish", RANK)
atexit.register(lambda: (OUT / f"atexit.{RANK}").write_text("ran\n"))
sys.stdout.write(f"rank {RANK} printed before finish")  # no newline: still in the buffer
du.finish()
(OUT / f"after_finish.{RANK}").write_text("finish() returned\n")
