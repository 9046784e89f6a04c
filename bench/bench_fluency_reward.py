#!/usr/bin/env python3
"""Cost of the RL reward's fluency penalty against an SCST update, on the CPU (issue 51, item 3).

The fluency penalty (``--fluency_penalty p``, :class:`captionlib.rl.rewards.Reward`) flags each
sampled caption and each greedy baseline of a batch, beside CIDEr-D, and multiplies a flagged
caption's reward by (1 - p). The flags come from the fluency error detector
(:class:`captionlib.metrics.fluency.FluencyDetector`, ``--fluency_model``) or, without one, from the
rule checks (:func:`captionlib.metrics.fluency_rules.rule_flags`). Target: the detector costs at
most 20% of an SCST update.

Setting, all real:

* the model: the soundscapes recipe's CRNN-GRU, the shipped packed model
  ``egs/soundscapes/model/soundscapes_crnn_gru_reinforce_plus.zip`` (its token list and the
  CIDEr-D document frequencies of the recipe's training captions come with it), read by
  :meth:`captionlib.packed.PretrainedCaptioner.from_pretrained`, put in training mode;
* the batch: the recipe's first ``--batch_size`` (32, as ``egs/soundscapes/conf/train_scst.yaml``)
  development clips, mixed from ``../shared/data/event_library`` by the recipe's own stage 0
  (:func:`captionlib.soundscapes.corpus.make_soundscape_corpus`, corpus seed 0) into a temporary
  directory, their log-mel features computed by the packed model's front end (10 s: 126 frames of
  32 bands) and their 5 captions each the references;
* the SCST update: :meth:`captionlib.rl.policy_gradient.SCST.from_options` (through
  :func:`captionlib.rl.check_rl_options`, as ``caption_rl_train``) with the options of
  ``train_scst.yaml`` (:class:`captionlib.rl.options.RLOptions`), the reward
  ``Reward("cider_d:1.0", ...)`` without the penalty, forward (encoding, greedy baseline, sampling,
  CIDEr-D, loss) + backward + Adam step (``make_optimizer``), as ``caption_rl_train`` does it;
* the detector: ``--fluency_model PATH``, or (default) one trained briefly by
  ``caption_train_fluency``'s own ``main`` at its default architecture (``--train_epochs 1`` over
  the first ``--train_captions`` Clotho development captions): for cost only the architecture
  and sizes matter, not the weights, so its flags are not those of a fully trained detector;
* the fluency part: ``Reward.fluency_flags`` of the update's own candidates (its samples and greedy
  baselines, 2 x batch captions, as ``Reward.__call__`` passes them), with the detector and with the
  rules; also a whole SCST update with ``--fluency_penalty`` and the detector, for comparison.

Each step runs the plain update, the fluency parts on its captions and the penalised update, round
robin; medians over ``--steps`` after ``--warmup``. Prints the medians, the ratios fluency part /
SCST update, and whether the 20% target holds (a printed verdict, no assertion). ``--profile``
also prints ``cProfile``'s top entries of the detector's flagging.

Usage:
    python bench/bench_fluency_reward.py [--threads 2] [--steps 20] [--warmup 3]
        [--fluency_model exp/fluency/detector.pth] [--profile]
"""

import argparse
import cProfile
import glob
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import torch
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from captionlib.data.datasets import pad_feats  # noqa: E402
from captionlib.io.datadir import read_csv_rows  # noqa: E402
from captionlib.rl import check_rl_options  # noqa: E402
from captionlib.rl.options import RLOptions  # noqa: E402
from captionlib.rl.rewards import Reward  # noqa: E402
from captionlib.text.cleaner import clean_words  # noqa: E402
from captionlib.train.schedule import make_optimizer, param_groups  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
DEFAULT_MODEL = ROOT / "egs" / "soundscapes" / "model" / "soundscapes_crnn_gru_reinforce_plus.zip"
DEFAULT_CONFIG = ROOT / "egs" / "soundscapes" / "conf" / "train_scst.yaml"
CLOTHO_DEV = SHARED / "clotho_captions_v2.1" / "clotho_captions_development.csv"
TARGET = 0.20


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="packed captioner (the soundscapes CRNN-GRU)")
    p.add_argument("--rl_config", default=str(DEFAULT_CONFIG), help="RL options (YAML) of the SCST update")
    p.add_argument("--event_library", default=str(SHARED / "event_library"), help="the soundscapes' event library")
    p.add_argument("--batch_size", type=int, default=None, help="clips per update (default: the RL config's)")
    p.add_argument("--fluency_model", default=None,
                   help="a trained detector (caption_train_fluency); default: train one briefly here")
    p.add_argument("--train_captions", type=int, default=4000,
                   help="brief training: the first N Clotho development captions")
    p.add_argument("--train_epochs", type=int, default=1, help="brief training: epochs")
    p.add_argument("--clotho_csv", default=str(CLOTHO_DEV), help="brief training: the caption file")
    p.add_argument("--fluency_penalty", type=float, default=0.9, help="p of the penalised update (SPIDEr-FL: 0.9)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="also print cProfile's top entries of the detector")
    return p


class RecordingReward:
    """A :class:`Reward` that keeps the candidates of its last call (the update's samples and baselines)."""

    def __init__(self, reward: Reward):
        self.reward, self.keys, self.candidates = reward, None, None

    def __call__(self, keys, candidates):
        self.keys, self.candidates = list(keys), [list(c) for c in candidates]
        return self.reward(keys, candidates)


def soundscape_batch(pc, event_library: str, n: int, tmp: str):
    """The recipe's first ``n`` development clips (stage 0, corpus seed 0): ``(clip_ids, feats, lens, refs)``."""
    from captionlib.soundscapes.corpus import make_soundscape_corpus

    corpus = os.path.join(tmp, "corpus")
    make_soundscape_corpus(event_library, corpus, {"development": n}, seed=0)
    rows = read_csv_rows(os.path.join(corpus, "clotho_captions_development.csv"),
                         ("file_name", *(f"caption_{k}" for k in range(1, 6))), what="captions CSV")
    refs = {Path(name).stem: [clean_words(c) for c in cells] for _, (name, *cells) in rows}
    files = sorted(glob.glob(os.path.join(corpus, "development", "*.flac")))
    clips = [Path(f).stem for f in files]
    feats, lens = pad_feats([pc.features(f) for f in files])
    return clips, feats, lens, refs


def train_detector_briefly(args, tmp: str) -> str:
    """``caption_train_fluency`` at its default architecture, ``--train_epochs`` over ``--train_captions``."""
    from captionbin.caption_train_fluency import main as train_main

    out = os.path.join(tmp, "fluency", "detector.pth")
    train_main(["--captions", args.clotho_csv, "--max_captions", str(args.train_captions), "--epochs",
                str(args.train_epochs), "--output", out, "--threads", str(args.threads), "--seed", str(args.seed),
                "--log_interval", "1000000"])
    return out


def objective_builder(opts: RLOptions, model, tokenizer):
    """``reward -> objective`` as ``caption_rl_train`` builds it: :func:`check_rl_options` (the class
    and its ``rl_conf`` block), then the class's ``from_options``."""
    cls, conf = check_rl_options(opts)
    return lambda reward: cls.from_options(opts, conf, model, reward, tokenizer, None)


def short_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from captionlib.packed import PretrainedCaptioner

    with open(args.rl_config, encoding="utf-8") as f:
        conf = yaml.safe_load(f) or {}
    opts = RLOptions(**conf)
    if args.batch_size is not None:
        opts.batch_size = args.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        pc = PretrainedCaptioner.from_pretrained(args.model)
        with zipfile.ZipFile(args.model) as z:
            z.extract("cider_df.npz", tmp)
        cider_df = os.path.join(tmp, "cider_df.npz")
        clips, feats, lens, refs = soundscape_batch(pc, args.event_library, opts.batch_size, tmp)
        if args.fluency_model:
            model_path, how = args.fluency_model, f"trained detector {args.fluency_model}"
        else:
            t0 = time.perf_counter()
            model_path = train_detector_briefly(args, tmp)
            how = (f"caption_train_fluency's default architecture trained briefly here ({args.train_epochs} epoch(s) "
                   f"over {args.train_captions} Clotho development captions, {time.perf_counter() - t0:.0f} s): "
                   "weights not those of a full training, sizes and code path the same")
        plain = Reward(opts.reward, refs, cider_df)
        with_detector = Reward(opts.reward, refs, cider_df, fluency_penalty=args.fluency_penalty,
                               fluency_model=model_path)
        with_rules = Reward(opts.reward, refs, cider_df, fluency_penalty=args.fluency_penalty)
        det = with_detector.detector
        recorder = RecordingReward(plain)
        model = pc.model.train()
        make = objective_builder(opts, model, pc.tokenizer)
        scst, scst_det = make(recorder), make(with_detector)
        optimizer = make_optimizer(opts, param_groups(opts, model))
        batch = (clips, feats, lens)

        def update(obj) -> float:
            t0 = time.perf_counter()
            loss, _ = obj(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            return time.perf_counter() - t0

        def timed(fn, *a) -> float:
            t0 = time.perf_counter()
            fn(*a)
            return time.perf_counter() - t0

        times = {k: [] for k in ("scst", "detector", "rules", "scst_det")}
        flagged = {"detector": [], "rules": []}
        lengths = []
        for step in range(args.warmup + args.steps):
            t_scst = update(scst)
            cands = recorder.candidates
            t_det = timed(with_detector.fluency_flags, cands)
            t_rules = timed(with_rules.fluency_flags, cands)
            t_scst_det = update(scst_det)
            if step >= args.warmup:
                for k, t in zip(times, (t_scst, t_det, t_rules, t_scst_det)):
                    times[k].append(t)
                flagged["detector"].append(int(with_detector.fluency_flags(cands).sum()))
                flagged["rules"].append(int(with_rules.fluency_flags(cands).sum()))
                lengths += [len(c) for c in cands]

        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        spread = {k: (min(v) * 1e3, max(v) * 1e3) for k, v in times.items()}
        n_params = sum(p.numel() for p in det.net.parameters())
        print(f"# bench_fluency_reward: commit {short_head()}, torch {torch.__version__}, {torch.get_num_threads()} "
              f"thread(s), {os.cpu_count()} CPU(s) visible; medians of {args.steps} steps after {args.warmup} warm-up")
        print(f"model: {args.model} (CRNN-GRU, {sum(p.numel() for p in model.parameters())} parameters); "
              f"RL options {args.rl_config}: batch {opts.batch_size}, lr {opts.lr}, max_len {opts.max_len}, "
              f"reward {opts.reward}")
        print(f"batch: {len(clips)} soundscapes clips, features {tuple(feats.shape)}; the fluency part flags "
              f"{len(cands)} captions per update (samples and greedy baselines), {np.mean(lengths):.1f} words on mean")
        print(f"detector: {how}; config {det.config()}, {n_params} parameters, {len(det.counts.keys)} bigrams")
        print(f"flagged per update (median): detector {statistics.median(flagged['detector'])}, "
              f"rules {statistics.median(flagged['rules'])}")
        print("\n| what | median ms | min-max ms | / SCST update |\n|---|---:|---:|---:|")
        rows = [("SCST update (forward + backward + Adam; CIDEr-D reward)", "scst"),
                ("fluency flags by the detector (Reward.fluency_flags)", "detector"),
                ("fluency flags by the rules (Reward.fluency_flags)", "rules"),
                (f"SCST update with --fluency_penalty {args.fluency_penalty} and the detector", "scst_det")]
        for name, k in rows:
            print(f"| {name} | {med[k]:.2f} | {spread[k][0]:.2f}-{spread[k][1]:.2f} | {med[k] / med['scst']:.3f} |")
        ratio = med["detector"] / med["scst"]
        print(f"\ndetector / SCST update: {ratio:.3f} ({100 * ratio:.1f}%); rules / SCST update: "
              f"{med['rules'] / med['scst']:.4f} ({100 * med['rules'] / med['scst']:.2f}%)")
        print(f"ratios of the fastest steps (least disturbed on a shared machine): detector "
              f"{spread['detector'][0] / spread['scst'][0]:.3f}, rules {spread['rules'][0] / spread['scst'][0]:.4f}")
        verdict = "holds" if ratio <= TARGET else "MISSED"
        print(f"target: detector at most {100 * TARGET:.0f}% of an SCST update: {verdict}")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(50):
                det.flag(cands)
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
            print(f"\n# cProfile of 50 detector flag calls on {len(cands)} captions\n{buf.getvalue()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
