#!/usr/bin/env python3
"""Benchmark of the CIDEr-D reward engine against pycocoevalcap's ``CiderScorer``.

Setting (issue 3, item 4): the Clotho v2.1 development captions (3839 clips x 5
references, cleaned with ``captionlib.text.cleaner.clean_words``) give the document
frequencies and the references; each batch holds 32 clips x 6 candidates (think 5
samples + 1 greedy baseline), the candidates being real captions of *other* clips.
Both engines score the same batches with the same document frequencies.

Prints candidates per second for ``captionlib.metrics.cider_d.CiderD`` (cold: reference
vectors cached on first use, as in the first RL epoch; warm: all cached) and for
pycocoevalcap, their ratio (target >= 30, on the warm engine) and the largest absolute
difference between the two scores (target < 1e-6).

Usage:
    python bench/bench_reward.py [--clotho_csv PATH] [--num_batches 60] [--seed 0]
"""

import argparse
import csv
import os
import sys
import time

import numpy as np

from captionlib.metrics.cider_d import CiderD, DocumentFrequency
from captionlib.metrics.pycoco import pycoco_cider_with_df
from captionlib.text.cleaner import clean_words

DEFAULT_CSV = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..", "..", "shared", "data", "clotho_captions_v2.1", "clotho_captions_development.csv",
)


def load_refs(path):
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        f"clotho-development-{i + 1:05d}": [clean_words(r[f"caption_{k}"]) for k in range(1, 6)]
        for i, r in enumerate(rows)
    }


def make_batches(refs, num_batches, clips_per_batch, cands_per_clip, seed):
    rng = np.random.default_rng(seed)
    clips = list(refs)
    batches = []
    for _ in range(num_batches):
        chosen = rng.choice(len(clips), size=clips_per_batch, replace=False)
        ids, cands = [], []
        for c in chosen:
            for _ in range(cands_per_clip):
                other = int(rng.integers(len(clips) - 1))
                other += other >= c  # a clip other than c
                ids.append(clips[c])
                cands.append(refs[clips[other]][int(rng.integers(5))])
        batches.append((ids, cands))
    return batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clotho_csv", default=os.path.normpath(DEFAULT_CSV))
    parser.add_argument("--num_batches", type=int, default=60)
    parser.add_argument("--clips_per_batch", type=int, default=32)
    parser.add_argument("--cands_per_clip", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    refs = load_refs(args.clotho_csv)
    t0 = time.perf_counter()
    df = DocumentFrequency.from_references(refs)
    t_df = time.perf_counter() - t0
    df_dict = df.to_dict()
    batches = make_batches(refs, args.num_batches, args.clips_per_batch, args.cands_per_clip, args.seed)
    num = sum(len(b[0]) for b in batches)
    print(f"{len(refs)} clips, {len(df)} n-grams in the document frequencies ({t_df:.2f} s); "
          f"{len(batches)} batches x {len(batches[0][0])} candidates")

    engine = CiderD(df, refs=refs)  # lazy: references cached when first scored
    t0 = time.perf_counter()
    ours = [engine.score(ids, cands) for ids, cands in batches]
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = [engine.score(ids, cands) for ids, cands in batches]
    t_warm = time.perf_counter() - t0

    from collections import defaultdict

    df_default = defaultdict(float, df_dict)
    t0 = time.perf_counter()
    theirs = []
    for ids, cands in batches:
        pairs = [(" ".join(c), [" ".join(r) for r in refs[i]]) for i, c in zip(ids, cands)]
        theirs.append(pycoco_cider_with_df(pairs, df_default, df.num_docs))
    t_ref = time.perf_counter() - t0

    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
    r_cold, r_warm, r_ref = num / t_cold, num / t_warm, num / t_ref
    print(f"captionlib CiderD (cold, caching refs): {r_cold:12.0f} candidates/s")
    print(f"captionlib CiderD (warm, refs cached):  {r_warm:12.0f} candidates/s")
    print(f"pycocoevalcap CiderScorer (same df):    {r_ref:12.0f} candidates/s")
    print(f"ratio (warm / pycocoevalcap): {r_warm / r_ref:.1f}  (cold: {r_cold / r_ref:.1f}; target >= 30)")
    print(f"largest |difference|: {diff:.3e}  (target < 1e-6)")
    print(f"mean reward: {np.mean(np.concatenate(ours)):.4f}")
    ok = diff < 1e-6 and r_warm / r_ref >= 30
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
