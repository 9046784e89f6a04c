#!/usr/bin/env python3
"""Host memory and speed of XE training under glibc heap settings, on a recipe's dump.

Training fixes glibc's mmap threshold at 4 MiB (:func:`captionlib.utils.memory.limit_heap_growth`,
called by every training stage) because the activations of batches of varying length fragment
glibc's heap: at Clotho's size the seed XE stage's RSS rose to 7.7 GiB over an epoch with
glibc's default. This benchmark runs the recipe's XE stage (``caption_train --config
conf/train_xe.yaml``) for ``--steps`` updates in a fresh process per setting, one setting after
the other (never two at once: they would share the cores), and prints per setting the time of
the updates after the first ``--warmup``, the peak RSS, and their ratios to glibc's default:

* ``default``: glibc's dynamic threshold (training before ``limit_heap_growth``);
* ``mmap<N>m``: a fixed threshold of N MiB (``mmap4m`` is what training does);
* ``trim<K>``: glibc's dynamic threshold and ``malloc_trim(0)`` after every K-th update,
  which hands the heap's free pages back to the system.

Every setting trains on the same batches from the same seed, so the train loss of the epoch
(``history.json``) must agree; it is printed beside the times. The update times come from a
``torch.optim`` step hook in the training process (``time.perf_counter`` after each optimizer
step), the peak RSS from ``os.wait4`` (the largest resident set of the process).

The recipe dir must hold what stages 1-4 of ``egs/clotho`` leave (``dump/logmel/development``
and ``validation``, the word token list, ``exp/stats_logmel``): for a corpus of Clotho's size,
the recipe copy of ``bench/bench_pipeline.py`` (``<work_dir>/recipe/egs/clotho``). Validation
runs on the first ``--valid_clips`` clips of the validation dump (copied with
``utils/subset_data_dir.sh``) and is not in the update times.

Usage:
    python bench/bench_pipeline.py --work_dir /data/bp --stop_stage 4
    python bench/bench_heap.py --recipe_dir /data/bp/recipe/egs/clotho --out_dir /data/bench_heap \\
        [--steps 60] [--settings default,mmap4m,trim1]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_pipeline import run_measured  # noqa: E402

#: what the recipe dir must hold (relative paths)
NEEDED = ("conf/train_xe.yaml", "dump/logmel/development/feats.scp", "dump/logmel/validation/feats.scp",
          "data/token_list/word/tokens.txt", "exp/stats_logmel/feats_stats.npz", "utils/subset_data_dir.sh")
SETTING = re.compile(r"^(default|mmap([1-9][0-9]*)m|trim([1-9][0-9]*))$")


@dataclass
class HeapResult:
    """One setting's run.

    Attributes:
        setting: ``default``, ``mmap<N>m`` or ``trim<K>``.
        update_s: seconds of each update after the warm-up (optimizer step to step).
        peak_rss_mib: largest resident set of the training process (MiB).
        train_loss: the epoch's train loss from ``history.json`` (``None`` when missing).
        returncode: exit status of the training process.
    """

    setting: str
    update_s: List[float]
    peak_rss_mib: float
    train_loss: Optional[float]
    returncode: int


def parse_setting(name: str) -> tuple:
    """``(mmap_threshold_bytes or None, trim_every or None)`` of a setting name.

    Raises:
        ValueError: not ``default``, ``mmap<N>m`` (N >= 1, at most 32: glibc's maximum) or
            ``trim<K>`` (K >= 1).
    """
    m = SETTING.match(name)
    if m is None:
        raise ValueError(f"unknown setting {name!r}: use default, mmap<N>m (N MiB) or trim<K> (every K updates)")
    if m.group(2) is not None:
        mib = int(m.group(2))
        if mib > 32:
            raise ValueError(f"{name}: glibc's mmap threshold is at most 32 MiB")
        return mib << 20, None
    return None, (int(m.group(3)) if m.group(3) is not None else None)


def child(setting: str, stats_path: str, train_argv: Sequence[str]) -> None:
    """The training process of one setting: install it, record the update times, train."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    import captionlib.train.fit as fit_module
    from captionlib.utils import memory

    threshold, trim_every = parse_setting(setting)
    libc = memory.glibc()
    if setting != "default" and libc is None:
        raise SystemExit(f"{setting}: needs glibc (this C library is not glibc)")
    # fit() calls fit_module.limit_heap_growth(): replace it by the setting's own
    fit_module.limit_heap_growth = (lambda: memory.limit_heap_growth(threshold)) if threshold else (lambda: False)
    stamps: List[float] = []

    def hook(optimizer, args, kwargs):
        stamps.append(time.perf_counter())
        if trim_every and len(stamps) % trim_every == 0:
            libc.malloc_trim(0)

    register_optimizer_step_post_hook(hook)
    from captionbin.caption_train import main
    try:
        main(list(train_argv))
    finally:
        Path(stats_path).write_text(json.dumps({"stamps": stamps, "threads": torch.get_num_threads()}))


def run_setting(setting: str, args: argparse.Namespace, recipe: Path, out: Path, valid: Path) -> HeapResult:
    """Train ``args.steps`` updates with ``setting`` in a fresh process, measured."""
    exp = out / setting
    shutil.rmtree(exp, ignore_errors=True)
    exp.mkdir(parents=True)
    train = ["--config", "conf/train_xe.yaml", "--train_data_dir", "dump/logmel/development",
             "--valid_data_dir", str(valid), "--token_list", "data/token_list/word/tokens.txt",
             "--feats_stats", "exp/stats_logmel/feats_stats.npz", "--output_dir", str(exp / "exp"),
             "--ngpu", "0", "--max_epoch", "1", "--num_iters_per_epoch", str(args.steps), "--log_interval", "10"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in [env.get("PYTHONPATH")] if p])
    if args.num_threads:
        env["OMP_NUM_THREADS"] = str(args.num_threads)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", setting, str(exp / "stamps.json"), "--", *train]
    r = run_measured(cmd, recipe, env, exp / "train.log", 0, setting, False)
    stamps = json.loads((exp / "stamps.json").read_text())["stamps"] if (exp / "stamps.json").is_file() else []
    steps = [b - a for a, b in zip(stamps[args.warmup:], stamps[args.warmup + 1:])]
    history = exp / "exp" / "history.json"
    loss = None
    if history.is_file():
        epochs = json.loads(history.read_text())
        loss = epochs[0].get("train_loss") if epochs else None
    return HeapResult(setting, steps, r.peak_rss_mib, loss, r.returncode)


def format_table(results: Sequence[HeapResult], warmup: int) -> str:
    """The results as a Markdown table, ratios against the ``default`` row when there is one."""
    base = next((r for r in results if r.setting == "default" and r.update_s), None)
    lines = [f"| setting | updates timed | s / update (mean after {warmup}) | vs default | peak RSS (MiB) | "
             "vs default | train loss |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        mean = statistics.mean(r.update_s) if r.update_s else float("nan")
        t_ratio = mean / statistics.mean(base.update_s) if base else float("nan")
        m_ratio = r.peak_rss_mib / base.peak_rss_mib if base else float("nan")
        name = r.setting if r.returncode == 0 else f"{r.setting} (FAILED, exit {r.returncode})"
        loss = "" if r.train_loss is None else f"{r.train_loss:.4f}"
        lines.append(f"| {name} | {len(r.update_s)} | {mean:.3f} | {t_ratio:.3f} | {r.peak_rss_mib:.0f} | "
                     f"{m_ratio:.3f} | {loss} |")
    return "\n".join(lines)


def get_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe_dir", required=True, help="an egs/clotho dir after stages 1-4")
    p.add_argument("--out_dir", required=True, help="where each setting's training dir and log go")
    p.add_argument("--settings", default="default,mmap4m,trim1", help="comma-separated settings")
    p.add_argument("--steps", type=int, default=60, help="updates per setting")
    p.add_argument("--warmup", type=int, default=10, help="first updates left out of the times")
    p.add_argument("--valid_clips", type=int, default=16, help="validation clips (the first of the dump)")
    p.add_argument("--num_threads", type=int, default=0, help="OMP_NUM_THREADS (0: torch's default)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run every setting, print (and write ``<out_dir>/bench_heap.md``) the table; the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], argv[4:])
        return 0
    parser = get_parser()
    args = parser.parse_args(argv)
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    try:
        for s in settings:
            parse_setting(s)
    except ValueError as e:
        parser.error(str(e))
    if args.steps <= args.warmup + 1 or args.warmup < 0:
        parser.error("need 0 <= --warmup < --steps - 1")
    recipe = Path(args.recipe_dir).resolve()
    missing = [n for n in NEEDED if not (recipe / n).exists()]
    if missing:
        parser.error(f"{recipe} lacks {', '.join(missing)}: run stages 1-4 of egs/clotho there first")
    out = Path(args.out_dir).resolve()
    valid = out / "valid"
    shutil.rmtree(valid, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["utils/subset_data_dir.sh", "--first", str(args.valid_clips), "dump/logmel/validation",
                    str(valid)], cwd=recipe, check=True)
    results = []
    for s in settings:
        print(f"{s}: {args.steps} updates (log: {out / s / 'train.log'})", flush=True)
        results.append(run_setting(s, args, recipe, out, valid))
    table = format_table(results, args.warmup)
    print(table)
    (out / "bench_heap.md").write_text(table + "\n")
    return 0 if all(r.returncode == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
