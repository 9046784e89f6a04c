#!/usr/bin/env python3
"""The cost of one batch of each RL objective against an XE update, on the same model and batch.

Each objective is built as ``caption_rl_train`` builds it (its class's ``from_options`` with the
``rl_conf`` block of a recipe config, ``egs/soundscapes/conf/train_<algo>.yaml`` by default), on
the model, real features, captions and CIDEr-D reward of ``bench_train.py`` (its ``Setup``). A
batch is what the trainer does with one batch of clips: for PPO its ``ppo_epochs`` optimizer
steps on one rollout (the objective called ``updates_per_batch`` times), for the others one
forward, backward and Adam step. It prints, per objective, the mean time of a batch and its ratio
to the XE update, and the time per optimizer step: the "per update and per second" costs that
``egs/soundscapes/README.md`` weighs against each objective's gain.

Usage:
    python bench/bench_objectives.py [--algos scst reinforce_plus ppo grpo dpo] [--reps 5] [--num_threads 2]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from captionlib.models.captioner import xe_loss, xe_targets  # noqa: E402
from captionlib.rl import RL_OBJECTIVES, objective_class, objective_conf  # noqa: E402
from captionlib.rl.options import RLOptions  # noqa: E402
import bench_train  # noqa: E402

CONF_DIR = HERE.parent / "egs" / "soundscapes" / "conf"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_train.setup_arguments(p, 2, 5, "timed batches per objective (after two warm-ups)")
    p.add_argument("--algos", nargs="+", default=["scst", "reinforce_plus", "ppo", "grpo", "dpo"],
                   choices=sorted(RL_OBJECTIVES), help="objectives timed (each with --conf_dir/train_<algo>.yaml)")
    p.add_argument("--conf_dir", default=str(CONF_DIR), help="where the train_<algo>.yaml RL configs are")
    return p


def build(algo: str, conf_dir: Path, model, reward, tok):
    """The objective of ``--rl_algo algo`` with the ``rl_conf``, ``max_len`` and ``temperature`` of its config."""
    cfg = yaml.safe_load((conf_dir / f"train_{algo}.yaml").read_text()) or {}
    opts = RLOptions(rl_algo=algo, max_len=int(cfg.get("max_len", RLOptions().max_len)),
                     temperature=float(cfg.get("temperature", RLOptions().temperature)))
    cls = objective_class(algo)
    conf = objective_conf(cls, cfg.get("rl_conf") or {}, algo)
    return cls.from_options(opts, conf, model, reward, tok, None), cfg.get("rl_conf") or {}


def step(loss, opt) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def round_robin(fns: Dict[str, Callable[[], None]], reps: int) -> Dict[str, float]:
    """Mean seconds of each of ``fns`` over ``reps`` rounds (one call of each per round, in turn,
    so that a change of the machine's load reaches all of them), after two warm-up rounds; the
    device is synchronised around each call."""
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for rep in range(reps + 2):
        for name, fn in fns.items():
            bench_train.sync()
            t0 = time.perf_counter()
            fn()
            bench_train.sync()
            if rep >= 2:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.mean(t) for name, t in times.items()}


def main(argv=None) -> None:
    """Time XE and each objective's batch and print the table."""
    args = get_parser().parse_args(argv)
    s = bench_train.warmed_setup(args)
    model = s.model
    clips, feats, lens, ys, ys_lens = s.batch("random")
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)  # tiny steps: the model stays as it is
    model.train()
    reward = bench_train.cider_reward(s)

    def xe_update():
        v = model.encode(feats, lens)
        step(xe_loss(model.decoder.forward_teacher(v, ys), xe_targets(ys, ys_lens, model.eos_id)), opt)

    fns: Dict[str, Callable[[], None]] = {"XE": xe_update}
    info = {"XE": ("", 1)}
    for algo in args.algos:
        obj, conf = build(algo, Path(args.conf_dir), model, reward, s.tok)
        updates = int(getattr(obj, "updates_per_batch", 1))

        def rl_batch(obj=obj, updates=updates):
            for _ in range(updates):
                loss, _ = obj(model, (clips, feats, lens))
                step(loss, opt)

        fns[algo] = rl_batch
        info[algo] = (", ".join(f"{k}: {v}" for k, v in conf.items()), updates)
    secs = round_robin(fns, args.reps)
    print(f"# bench_objectives: torch {torch.__version__}, device {bench_train.DEVICE}, {torch.get_num_threads()} "
          f"threads, batch {args.batch_size} clips; mean of {args.reps} rounds (XE and each objective in turn) after "
          f"two warm-up rounds; configs {args.conf_dir}")
    print("\n| objective | rl_conf | optimizer steps per batch | ms per batch | batch / XE update | ms per step |")
    print("|---|---|---:|---:|---:|---:|")
    for name, t in secs.items():
        conf_s, updates = info[name]
        print(f"| {name} | {conf_s} | {updates} | {t * 1e3:.0f} | {t / secs['XE']:.2f} | {t / updates * 1e3:.0f} |")


if __name__ == "__main__":
    main()
