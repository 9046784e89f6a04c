#!/usr/bin/env python3
"""Where the XE update's time goes, against its arithmetic bound (FLOPs / ``torch.mm`` rate).

``bench_train.py`` prints the bound of the seed system's XE update (CRNN + BiGRU encoder, GRU-512
decoder, 4.4k-word output, 32 captions of Clotho-length real clips) and the update's time as a
multiple of it. This script says what stands between the two. It runs the same update
(``bench_train.Setup``, ``bench_train.xe_update``, the ``random`` batch of the padded mean length)
under ``torch.profiler`` and under ``torch.utils.flop_counter.FlopCounterMode``, and groups each
aten operator's self time and FLOPs into

* ``matmul`` (mm, addmm, bmm, ...: the linear layers, the GRU gates' products, attention),
* ``convolution`` (forward and backward),
* ``no FLOPs counted`` (every other operator of the forward and backward passes: element-wise
  gate arithmetic, batch norm, dropout, copies, concatenation, the log-softmax of the output
  layer, ...),
* ``optimizer`` (every operator of the Adam step, profiled on its own);

and prints, per group, its time, its FLOPs, its rate against ``torch.mm``'s, and the seconds it
costs over the bound (its time less its FLOPs at the ``torch.mm`` rate). The wall time of the
update without the profiler is timed too, round robin with ``torch.mm`` (the bound's rate) and
with the same update through ``nn.LPPool2d`` in place of the encoder's :class:`L4Pool2d`; the
profiler's own overhead is the difference between the profiled sum and that time, and the table
scales the groups to the unprofiled time.
The largest operators of each group follow, so a user sees which kernel a fix has to target.

Most of the time that no FLOPs are counted for is spent faulting in freshly mapped memory:
training maps every tensor of 4 MiB or more afresh (:func:`captionlib.utils.memory.limit_heap_growth`),
and the feature maps of the CRNN's first blocks are hundreds of MiB. PyTorch's allocator asks the
kernel for transparent huge pages (2 MiB) for tensors of 2 MiB or more when
``THP_MEM_ALLOC_ENABLE=1`` is in the environment, as the recipes' ``path.sh`` sets it, which
makes those faults several times cheaper. ``--thp both`` (the default) runs the measurement
in two fresh processes, without and with it (the setting is read once, at a process's first
allocation), and prints both tables and the ratio of their update times; ``--thp on`` or
``off`` runs one, in this process.

Usage:
    python bench/bench_xe_bound.py [--num_threads N] [--reps 3] [--top 8] [--batch random|bucket]
        [--thp both|on|off]
"""

import argparse
import os
import re
import resource
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from captionlib.models.encoders import L4Pool2d  # noqa: E402
import bench_train  # noqa: E402

#: aten operators (profiler names, without ``aten::``) of each group; any other: "no FLOPs counted"
GROUPS = {
    "matmul": ("mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot", "_addmm_activation"),
    "convolution": ("mkldnn_convolution", "convolution_backward", "_convolution", "convolution",
                    "mkldnn_convolution_backward", "_slow_conv2d_forward", "_slow_conv2d_backward",
                    "thnn_conv2d"),
}

#: the table's rows
GROUP_ORDER = ("matmul", "convolution", "no FLOPs counted", "optimizer")


def group_of(name: str) -> str:
    """The group (see the module docstring) of an operator: a profiler name such as ``aten::addmm``
    or a FLOP counter key such as ``aten.addmm``."""
    op = name.split("::", 1)[-1]
    op = op[len("aten."):] if op.startswith("aten.") else op
    op = op.split(".")[0]
    for group, ops in GROUPS.items():
        if op in ops:
            return group
    return "no FLOPs counted"


def get_parser() -> argparse.ArgumentParser:
    """The options of this script (``bench_train``'s set-up options and a few of its own)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bench_train.setup_arguments(p, num_threads=2, reps=3, reps_help="profiled updates (after one warm-up)")
    p.add_argument("--batch", default="random", choices=("random", "bucket"), help="the batch schedule")
    p.add_argument("--top", type=int, default=8, help="operators listed per group")
    p.add_argument("--thp", default="both", choices=("both", "on", "off"),
                   help="THP_MEM_ALLOC_ENABLE: both (two fresh processes, without then with), on or off")
    p.set_defaults(warm_up_steps=0)
    return p


def with_pooling(model, impl: str) -> None:
    """Give the CRNN encoder's pooling layers ``impl``: ``ours`` (:class:`L4Pool2d`) or ``torch``
    (``nn.LPPool2d(4, kernel)``, the layer it replaces; the same outputs and gradients)."""
    cnn = model.encoder.cnn
    for i, layer in enumerate(cnn):
        if isinstance(layer, nn.LPPool2d):
            kernel = tuple(layer.kernel_size)
            cnn[i] = L4Pool2d(kernel) if impl == "ours" else nn.LPPool2d(4, kernel)


def flops_by_group(model, feats, lens, ys, ys_lens) -> dict:
    """FLOPs of one XE forward + backward per group: ``{group: flops}`` (``bench_train.xe_flop_counts``)."""
    out = defaultdict(float)
    for op, flops in bench_train.xe_flop_counts(model, feats, lens, ys, ys_lens).items():
        out[group_of(str(op))] += flops
    return dict(out)


def profile(forward_backward, step, reps: int):
    """Self time (s per update) and calls of each operator over ``reps`` profiled updates:
    ``{(group, operator): (s, calls)}``, the operators of ``step`` (the optimizer's) in group
    ``optimizer``, those of ``forward_backward`` in theirs (:func:`group_of`)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    out = defaultdict(lambda: [0.0, 0])
    for _ in range(reps):
        for fn, optimizer in ((forward_backward, False), (step, True)):
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                fn()
            for e in prof.key_averages():
                entry = out[("optimizer" if optimizer else group_of(e.key), e.key)]
                entry[0] += e.self_cpu_time_total / 1e6 / reps
                entry[1] += e.count
    return {k: (t, calls // reps) for k, (t, calls) in out.items()}


def compare_thp(argv) -> None:
    """Run :func:`measure` in a fresh process without and with ``THP_MEM_ALLOC_ENABLE``; print
    both outputs and the ratio of the update times.

    Raises:
        SystemExit: a child failed (its exit status and output are printed).
    """
    times = {}
    for mode in ("off", "on"):
        env = dict(os.environ, THP_MEM_ALLOC_ENABLE="1" if mode == "on" else "0")
        cmd = [sys.executable, __file__, *argv, "--thp", mode]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("USDT"))
        print(out + "\n")
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
        times[mode] = float(re.search(r"^XE update ([0-9.]+) s", out, re.M).group(1))
    print(f"THP_MEM_ALLOC_ENABLE=1: XE update {times['on']:.3f} s against {times['off']:.3f} s without "
          f"({times['on'] / times['off']:.2f}x)")


def main(argv=None) -> None:
    """With ``--thp both``, :func:`compare_thp`; else :func:`measure` in this process."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = get_parser().parse_args(argv)
    if args.thp == "both":
        compare_thp(argv)
    else:
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1" if args.thp == "on" else "0"  # before the first allocation
        measure(args)


def measure(args) -> None:
    """Print the per-group table and each group's largest operators (one process)."""
    bench_train.use_device(args)
    if bench_train.DEVICE.type != "cpu":
        raise SystemExit("bench_xe_bound.py profiles the CPU update only (--device cpu)")
    s = bench_train.Setup(args)
    model = s.model
    model.train()
    _, feats, lens, ys, ys_lens = s.batch(args.batch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)

    def update():
        bench_train.xe_update(model, opt, feats, lens, ys, ys_lens)

    def forward_backward():
        opt.zero_grad(set_to_none=True)
        bench_train.xe_backward(model, feats, lens, ys, ys_lens)

    mm, mm_flops = bench_train.mm_work(calls=8)

    def update_torch_pool():
        with_pooling(model, "torch")
        update()
        with_pooling(model, "ours")

    # round robin, so that slow phases of a shared machine hit the update and the bound alike
    times = bench_train.timed_round_robin({"update": update, "torch pool": update_torch_pool, "mm": mm}, args.reps)
    wall, rate = times["update"], mm_flops / times["mm"]
    flops = flops_by_group(model, feats, lens, ys, ys_lens)
    ops = profile(forward_backward, opt.step, args.reps)
    total_flops = sum(flops.values())
    bound = total_flops / rate
    group_time = defaultdict(float)
    for (group, _), (t, _) in ops.items():
        group_time[group] += t
    profiled = sum(group_time.values())
    scale = wall / profiled

    print(f"# bench_xe_bound: torch {torch.__version__}, {args.num_threads} threads, "
          f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}; batch {args.batch} "
          f"({int(lens.max()) * bench_train.HOP_S:.1f} s padded, {ys.size(1)} tokens), mean of {args.reps}")
    print(f"XE update {wall:.3f} s; {total_flops / 1e9:.0f} GFLOP; torch.mm {rate / 1e9:.0f} GFLOP/s; "
          f"bound {bound:.3f} s; update / bound {wall / bound:.2f}x")
    print(f"the same update with nn.LPPool2d(4, ...) for the encoder's L4Pool2d: {times['torch pool']:.3f} s "
          f"(L4Pool2d: {wall / times['torch pool']:.2f}x)")
    print(f"profiled operators' self times sum to {profiled:.3f} s (x{scale:.2f} to the unprofiled time below)\n")
    print("| group | s (scaled) | share | GFLOP | GFLOP/s | of torch.mm | s over the bound |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for group in GROUP_ORDER:
        t = group_time.get(group, 0.0) * scale
        f = flops.get(group, 0.0)
        r = f / (group_time.get(group, 0.0) * scale) if f and t else 0.0
        print(f"| {group} | {t:.3f} | {t / wall:.0%} | {f / 1e9:.1f} | {r / 1e9:.0f} | "
              f"{r / rate:.0%} | {t - f / rate:.3f} |")
    print(f"| all | {wall:.3f} | 100% | {total_flops / 1e9:.1f} | {total_flops / wall / 1e9:.0f} | "
          f"{total_flops / wall / rate:.0%} | {wall - bound:.3f} |")
    for group in GROUP_ORDER:
        top = sorted(((t, n, c) for (g, n), (t, c) in ops.items() if g == group), reverse=True)[:args.top]
        if top:
            print(f"\n{group}: " + "; ".join(f"{n} {t * scale:.3f} s ({c} calls)" for t, n, c in top))
    print(f"\npeak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB")


if __name__ == "__main__":
    main()
