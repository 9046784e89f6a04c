#!/usr/bin/env python3
"""Where the time of an SCST update goes, phase by phase, beside an XE update on the same batch.

``bench_train.py`` times whole updates; this splits them, with the device synchronised at each
phase's end (so each phase is charged its own GPU work; the sum is a little above the whole
update, which overlaps host and device), on the same model, real features, captions and CIDEr-D
reward as ``bench_train.py`` (its ``Setup``):

- XE: encoder forward, decoder forward (teacher forcing) and loss, backward, Adam step;
- SCST with ``--sample_logprobs recompute`` (the cheapest RL path): encoder forward, greedy
  baseline (eval mode, no gradients), its words (device-to-host copy), the samples (no
  gradients), their words, the CIDEr-D reward (CPU), the teacher-forced pass of the samples,
  backward, Adam step; eager, and with each ``--decode_compile MODE`` given. Where the objective
  decodes the baseline and the samples in one pass (``SampledObjective.one_pass``: on a GPU, or
  with ``--one_pass``), that pass and its words are one phase each;
- two one-off costs for comparison: one sampling pass over twice the rows (what decoding the
  greedy baseline and the samples in one batched pass would cost) and one over the rows alone.

With ``--profile FILE`` it also writes ``torch.profiler``'s tables (self CPU time, device time)
of a few SCST updates of the last mode given to FILE.

Usage:
    python bench/bench_rl_phases.py [--device cuda] [--decode_compile reduce-overhead cuda-graph] [--reps 10]
        [--profile FILE] [--one_pass]
"""

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from captionlib.decode.options import COMPILE_MODES  # noqa: E402
from captionlib.decode.search import greedy_search, sample, trimmed  # noqa: E402
from captionlib.models.captioner import xe_loss, xe_targets  # noqa: E402
from captionlib.rl.policy_gradient import PolicyGradient, policy_gradient_loss, teacher_forced_logprobs  # noqa: E402
import bench_train  # noqa: E402


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_train.setup_arguments(p, 2, 5, "timed repetitions per path (after two warm-ups)")
    p.add_argument("--decode_compile", choices=COMPILE_MODES, nargs="+", default=["none"],
                   help="also split the SCST update with its sampling compiled so (one or more modes)")
    p.add_argument("--profile", help="write torch.profiler tables of SCST updates here")
    p.add_argument("--one_pass", action="store_true",
                   help="decode SCST's greedy baseline and samples in one pass on any device (by default where the "
                        "objective does so: SampledObjective.joint_pass_devices, GPUs)")
    return p


class Clock:
    """Wall seconds of named phases, the device synchronised at each mark."""

    def __init__(self):
        self.times = defaultdict(list)
        self.t = 0.0

    def start(self) -> None:
        bench_train.sync()
        self.t = time.perf_counter()

    def mark(self, name: str) -> None:
        bench_train.sync()
        now = time.perf_counter()
        self.times[name].append(now - self.t)
        self.t = now


def xe_phases(model, opt, batch, clock: Clock) -> None:
    """One XE update of ``batch`` (clips, feats, lens, ys, ys_lens), phase by phase."""
    _, feats, lens, ys, ys_lens = batch
    clock.start()
    v = model.encode(feats, lens)
    clock.mark("encoder forward")
    loss = xe_loss(model.decoder.forward_teacher(v, ys), xe_targets(ys, ys_lens, model.eos_id))
    clock.mark("decoder forward (teacher forcing) and loss")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clock.mark("backward")
    opt.step()
    clock.mark("Adam step")


def scst_phases(obj: PolicyGradient, model, opt, batch, clock: Clock) -> None:
    """One SCST update (``sample_logprobs: recompute``) of ``batch``, phase by phase: the steps
    of ``PolicyGradient.loss_from_embedding``."""
    clips, feats, lens, _, _ = batch
    clock.start()
    v = model.encode(feats, lens)
    clock.mark("encoder forward")
    if obj.one_pass(model, v):
        with torch.no_grad():
            both = sample(model, torch.cat([v.detach(), v]), obj.max_len, temperature=obj.temperature,
                          greedy_rows=len(clips))
        clock.mark("greedy baseline and samples, one pass (decoding)")
        out = trimmed(both.rows(slice(len(clips), None)))
        words = obj.words(both.tokens)
        greedy_words, words = words[: len(clips)], words[len(clips):]
        clock.mark("greedy baseline and samples, one pass (words)")
    else:
        model.eval()
        with torch.no_grad():
            greedy = greedy_search(model, v.detach(), obj.max_len)
        model.train()
        clock.mark("greedy baseline (decoding)")
        greedy_words = obj.words(greedy)
        clock.mark("greedy baseline (words)")
        with torch.no_grad():
            out = sample(model, v, obj.max_len, temperature=obj.temperature)
        clock.mark("samples (decoding)")
        words = obj.words(out.tokens)
        clock.mark("samples (words)")
    r_all = obj.rewards(clips + clips, words + greedy_words, v.device)
    clock.mark("CIDEr-D reward")
    out = teacher_forced_logprobs(model, v, out, obj.max_len)
    loss = policy_gradient_loss(out.logprobs, out.mask, r_all[: len(clips)] - r_all[len(clips):])
    clock.mark("teacher-forced pass of the samples and loss")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clock.mark("backward")
    opt.step()
    clock.mark("Adam step")


def sampling_passes(obj: PolicyGradient, model, batch, clock: Clock) -> None:
    """One sampling pass (no gradients) over the batch's rows, and one over twice as many."""
    _, feats, lens, _, _ = batch
    with torch.no_grad():
        v = model.encode(feats, lens)
        clock.start()
        sample(model, v, obj.max_len, temperature=obj.temperature)
        clock.mark("one sampling pass, B rows")
        sample(model, torch.cat([v, v]), obj.max_len, temperature=obj.temperature)
        clock.mark("one sampling pass, 2B rows (greedy and samples batched)")


def table(times, total_name: str) -> list:
    """Markdown rows: phase, ms, share of the phases' sum."""
    means = {k: statistics.mean(v) * 1e3 for k, v in times.items()}
    total = sum(means.values())
    rows = [f"| {k} | {ms:.2f} | {100 * ms / total:.0f}% |" for k, ms in means.items()]
    return rows + [f"| **{total_name}** | **{total:.2f}** | |"]


def main(argv=None) -> None:
    """Time the phases and print the tables."""
    args = get_parser().parse_args(argv)
    s = bench_train.warmed_setup(args)
    model = s.model
    batch = s.batch("random")
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)
    model.train()
    scst = PolicyGradient(bench_train.cider_reward(s), s.tok, sample_logprobs="recompute")
    if args.one_pass:
        scst.joint_pass_devices = (bench_train.DEVICE.type,)
    gpu = f", {torch.cuda.get_device_name(bench_train.DEVICE)}" if bench_train.DEVICE.type == "cuda" else ""
    print(f"# bench_rl_phases: torch {torch.__version__}, device {bench_train.DEVICE}{gpu}, batch {args.batch_size}; "
          f"mean of {args.reps} after two warm-ups; the device synchronised at each phase's end")
    modes = ["none"] + [m for m in dict.fromkeys(args.decode_compile) if m != "none"]
    clocks = {"XE": Clock(), **{m: Clock() for m in modes}, "passes": Clock()}
    for rep in range(args.reps + 2):
        if rep == 2:  # the first two are warm-ups (compilation, CUDA graph recording)
            clocks = {k: Clock() for k in clocks}
        xe_phases(model, opt, batch, clocks["XE"])
        for m in modes:
            model.decode_compile = m
            scst_phases(scst, model, opt, batch, clocks[m])
            if m == modes[-1]:
                sampling_passes(scst, model, batch, clocks["passes"])
            model.decode_compile = "none"
    xe_total = sum(statistics.mean(v) for v in clocks["XE"].times.values())
    print("\n| XE update phase | ms | share |\n|---|---:|---:|")
    print("\n".join(table(clocks["XE"].times, "XE update (sum of phases)")))
    for m in modes:
        print(f"\n| SCST update phase (--sample_logprobs recompute, --decode_compile {m}) | ms | share |"
              "\n|---|---:|---:|")
        print("\n".join(table(clocks[m].times, "SCST update (sum of phases)")))
        total = sum(statistics.mean(v) for v in clocks[m].times.values())
        print(f"\nSCST (--decode_compile {m}) / XE, sums of phases: {total / xe_total:.2f}x")
    print(f"\n| sampling pass (--decode_compile {modes[-1]}, no gradients) | ms | |\n|---|---:|---:|")
    print("\n".join(f"| {k} | {statistics.mean(v) * 1e3:.2f} | |" for k, v in clocks["passes"].times.items()))
    if args.profile:
        profile(scst, model, opt, batch, modes[-1], args.profile)


def profile(obj, model, opt, batch, mode: str, path: str) -> None:
    """torch.profiler tables of three SCST updates with ``--decode_compile mode`` to ``path``."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if bench_train.DEVICE.type == "cuda" else [])
    model.decode_compile = mode
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            scst_phases(obj, model, opt, batch, Clock())
    model.decode_compile = "none"
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"# three SCST updates, --sample_logprobs recompute, --decode_compile {mode}\n")
        f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40) + "\n")
        if bench_train.DEVICE.type == "cuda":
            f.write(prof.key_averages().table(sort_by="self_device_time_total", row_limit=30) + "\n")
    print(f"profile: {path}")


if __name__ == "__main__":
    main()
