#!/usr/bin/env python3
"""Fine-tuning a pretrained encoder with and without the training option ``gradient_checkpointing``:
the memory and time of one training step of the encoder.

Setting: BEATs (``encoder: beats``, 90.7M parameters) and the audio ConvNeXt-Tiny (``encoder:
convnext``, 28.2M) at their published sizes, random weights (the cost does not depend on their
values), in training mode with their dropouts; a batch of ``--batch_size`` clips of ``--seconds``
(Clotho's longest is 30 s) of random features of their front ends (128 Kaldi fbank bands /
224 log-mel bins, 10 ms hop). A step is the forward pass, a loss on both outputs (clip vector
and frames) and the backward pass; the optimizer's step is left out (the same either way).

Each (encoder, checkpointing) pair runs in a process of its own, so that its peak memory is its
own: on the CPU the peak RSS of the process and its rise over the RSS after the model was built
(the step's activations and gradients); on a GPU ``torch.cuda.max_memory_allocated``. The table
gives the mean seconds of ``--reps`` steps after a warm-up, then for each encoder how much less
memory the step takes with checkpointing and how much more time.

Usage:
    python bench/bench_gradient_checkpointing.py [--encoders beats convnext] [--device cpu|cuda]
        [--batch_size 2] [--seconds 30] [--reps 2] [--num_threads N]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from captionlib.models.beats import BEATsEncoder  # noqa: E402
from captionlib.models.convnext import ConvNeXtEncoder  # noqa: E402
from captionlib.models.encoders import set_gradient_checkpointing  # noqa: E402

#: encoder -> (class, feature dim of its front end)
ENCODERS = {"beats": (BEATsEncoder, 128), "convnext": (ConvNeXtEncoder, 224)}
HOP_S = 0.01


def get_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=list(ENCODERS))
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:N)")
    p.add_argument("--num_threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=2, help="timed steps (after a warm-up)")
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--seconds", type=float, default=30.0, help="clip length (s)")
    p.add_argument("--child", nargs=2, metavar=("ENCODER", "CHECKPOINTING"), help=argparse.SUPPRESS)
    return p


def _rss_mib() -> float:
    """Peak RSS of this process so far (MiB; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mib() -> float:
    """Current RSS of this process (MiB), from /proc (0 where there is none)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        return 0.0


def child(args) -> dict:
    """One encoder, checkpointing on or off: seconds per step and peak memory (a JSON line)."""
    name, on = args.child[0], args.child[1] == "1"
    cls, dim = ENCODERS[name]
    device = torch.device(args.device)
    torch.manual_seed(0)
    enc = cls().to(device).train()
    set_gradient_checkpointing(enc, on)
    frames = int(args.seconds / HOP_S)
    feats = torch.randn(args.batch_size, frames, dim, device=device)
    lens = torch.full((args.batch_size,), frames, device=device)
    base = _current_rss_mib()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base_gpu = torch.cuda.memory_allocated(device)

    def step():
        enc.zero_grad(set_to_none=True)
        v, out = enc(feats, lens)
        (v.square().mean() + out.square().mean()).backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step()
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    peak = _rss_mib()
    out = {"s": sum(times) / len(times), "peak_rss": peak, "rise": peak - base,
           "tokens": int(enc.output_lengths(lens, frames)[0])}
    if device.type == "cuda":
        out["gpu_peak"] = torch.cuda.max_memory_allocated(device) / 2 ** 20
        out["gpu_rise"] = (torch.cuda.max_memory_allocated(device) - base_gpu) / 2 ** 20
    return out


def main(argv=None) -> None:
    """Run every (encoder, checkpointing) pair in a process of its own; print the table."""
    args = get_parser().parse_args(argv)
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    if args.child:
        print(json.dumps(child(args)))
        return
    t_start = time.time()
    results = {}
    for name in args.encoders:
        for on in (0, 1):
            cmd = [sys.executable, __file__, "--child", name, str(on), "--device", args.device, "--num_threads",
                   str(args.num_threads), "--reps", str(args.reps), "--batch_size", str(args.batch_size),
                   "--seconds", str(args.seconds)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"bench_gradient_checkpointing: {name} (checkpointing {on}) failed:\n{r.stderr[-4000:]}")
            results[name, on] = json.loads(r.stdout.strip().splitlines()[-1])
    gpu = args.device.startswith("cuda")
    print(f"# bench_gradient_checkpointing: torch {torch.__version__}, device {args.device}, {args.num_threads} "
          f"threads; a training step (forward, loss, backward) of the encoder on {args.batch_size} clips of "
          f"{args.seconds:g} s; mean of {args.reps} after a warm-up; each row in a process of its own")
    print()
    mem = ("peak GPU memory allocated (MiB) | its rise over the model's" if gpu
           else "peak RSS (MiB) | its rise over the model's")
    print(f"| encoder | gradient_checkpointing | s per step | {mem} |")
    print("|---|---|---:|---:|---:|")
    for (name, on), r in results.items():
        peak, rise = (r["gpu_peak"], r["gpu_rise"]) if gpu else (r["peak_rss"], r["rise"])
        print(f"| {name} | {'true' if on else 'false'} | {r['s']:.2f} | {peak:.0f} | {rise:.0f} |")
    print()
    for name in args.encoders:
        off, on = results[name, 0], results[name, 1]
        key = "gpu_rise" if gpu else "rise"
        print(f"{name}: with checkpointing the step takes {off[key] / max(on[key], 1.0):.1f}x less memory (rise) "
              f"and {on['s'] / off['s']:.2f}x the time")
    print(f"benchmark wall time {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
