#!/usr/bin/env python3
"""Wall time of ``caption_score`` with all metrics on the 1045 Clotho v2.1 evaluation clips.

Builds a data dir from ``clotho_captions_evaluation.csv`` (captions 2-5 of each clip as
references, caption 1 as the hypothesis, clip ids ``clotho-evaluation-NNNNN``), runs
``python -m captionbin.caption_score`` on it as the recipe does (a fresh process, so JVM
start-ups are included) and prints the wall time and the scores. SPICE runs only when the
CoreNLP jars are given (``--spice_lib_dir`` or ``$CAPTIONLIB_SPICE_LIB``); otherwise it is
reported as skipped and the time excludes it.

Usage:
    python bench/bench_score.py [--clotho_csv PATH] [--spice_lib_dir DIR] [--workdir DIR]
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

DEFAULT_CSV = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..", "..", "shared", "data", "clotho_captions_v2.1", "clotho_captions_evaluation.csv",
)


def write_data(csv_path, root):
    with open(csv_path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    data = os.path.join(root, "data", "evaluation")
    os.makedirs(data)
    text, utt2spk, hyp = [], [], []
    for i, r in enumerate(rows):
        clip = f"clotho-evaluation-{i + 1:05d}"
        hyp.append(f"{clip} {r['caption_1']}")
        for k in range(2, 6):
            text.append(f"{clip}-{k} {r[f'caption_{k}']}")
            utt2spk.append(f"{clip}-{k} {clip}")
    for name, lines in (("text", text), ("utt2spk", utt2spk)):
        with open(os.path.join(data, name), "w", encoding="utf-8") as f:
            f.write("\n".join(sorted(lines, key=lambda x: x.split()[0].encode())) + "\n")
    decode = os.path.join(root, "decode")
    os.makedirs(decode)
    with open(os.path.join(decode, "text"), "w", encoding="utf-8") as f:
        f.write("\n".join(hyp) + "\n")
    return data, os.path.join(decode, "text"), len(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clotho_csv", default=os.path.normpath(DEFAULT_CSV))
    parser.add_argument("--spice_lib_dir", default=None)
    parser.add_argument("--metrics", default="bleu,meteor,rouge_l,cider_d,spice,spider")
    parser.add_argument("--workdir", default=None, help="keep the files here (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or tmp
        os.makedirs(root, exist_ok=True)
        data, hyp, num = write_data(args.clotho_csv, root)
        out = os.path.join(os.path.dirname(hyp), "score.json")
        cmd = [sys.executable, "-m", "captionbin.caption_score", "--ref_dir", data, "--hyp", hyp,
               "--output", out, "--metrics", args.metrics, "--log_level", "WARNING"]
        if args.spice_lib_dir:
            cmd += ["--spice_lib_dir", args.spice_lib_dir]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t0
        with open(out) as f:
            result = json.load(f)
    print(f"caption_score on {num} clips ({args.metrics}): {wall:.1f} s wall")
    for k, v in result.items():
        if k != "skipped":
            print(f"  {k:<8s} {'skipped' if v is None else f'{v:.4f}'}")
    for k, reason in result["skipped"].items():
        print(f"  skipped {k}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
