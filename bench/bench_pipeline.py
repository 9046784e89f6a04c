#!/usr/bin/env python3
"""The Clotho recipe's stages 1-10, end to end, on a corpus of Clotho v2.1's size.

Makes (or completes) the corpus of ``captionbin.caption_make_clotho_sized`` (3839 / 1045 /
1045 clips of 15-30 s, times ``--scale``: Clotho's real captions, audio mixed from the event
library; **the captions do not describe the audio, so this measures speed, not learning**),
copies ``egs/clotho`` (with ``egs/TEMPLATE`` and ``utils``) into ``<work_dir>/recipe`` so
that the repository's recipe stays clean, and runs ``./run.sh --stage N --stop_stage N`` for
each stage there: the recipe's own defaults (seed 000's CRNN + GRU, SCST, 5 diversity
samples, the XE + SCST ensemble), with ``--xe_args "--max_epoch N"``, ``--rl_args
"--max_epoch M"``, beam 5 decoding and no SPICE (``--metrics``) unless told otherwise.
Stage 0 (download) is never run and no stage needs the network. SPICE and SPIDEr are left
out by default (they need Java and the CoreNLP jars of ``tools/install_spice.sh``; asked for
without them, ``caption_score`` reports them as skipped with the reason). ``--ngpu`` is for
training; decoding runs on the CPU unless ``--recipe_args "--gpu_inference true"``.

Per stage it measures, on the stage's whole process tree (``os.wait4`` on the ``run.sh``
process: the resource usage of it and every descendant it waited for, as GNU time reports):

* wall time (s);
* CPU time: user + system of the stage and its children (s);
* peak RSS: the largest resident set of any one process of the stage (MiB);
* peak GPU memory, with ``--ngpu`` > 0: the largest ``memory.used`` of any GPU that
  ``nvidia-smi`` reports, polled every 0.5 s (the whole device, so other users count too).

It prints the table as Markdown (also written to ``<work_dir>/bench_pipeline.md``), then
projects the seed recipe's 25 XE + 25 SCST epochs from stages 5 and 6:
``T_stage(E) = T_stage(N) * E / N`` (the measured per-epoch time, start-up included, times E)
and the total as the other stages plus both projections.

``--stage 1`` (the default) starts from a fresh copy of the recipe (the corpus is kept);
a later ``--stage`` reuses ``<work_dir>/recipe`` as an earlier run left it, so the recipe
may skip work it finds done.

Usage:
    python bench/bench_pipeline.py --work_dir /data/bench_pipeline             # full size, CPU
    python bench/bench_pipeline.py --work_dir /data/bench_pipeline --ngpu 1    # training on a GPU
    # a quick look: 1 % of Clotho, 2-4 s clips, stages 1-4
    python bench/bench_pipeline.py --work_dir /tmp/bp --scale 0.01 --min_duration_s 2 \\
        --max_duration_s 4 --stop_stage 4
"""

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
STAGE_NAMES = {
    1: "data prep", 2: "feature dump", 3: "token list", 4: "statistics (CMVN, CIDEr-D df)",
    5: "XE training", 6: "SCST fine-tuning", 7: "checkpoint averaging", 8: "decoding",
    9: "scoring, RESULTS.md", 10: "packing",
}
RECIPE_PARTS = ("egs/TEMPLATE", "egs/clotho", "utils")
GENERATED = ("data", "dump", "exp", "downloads", "RESULTS.md", "__pycache__")
MARKER = ".bench_pipeline"


@dataclass
class StageResult:
    """The cost of one stage (or of the corpus generator, ``stage`` 0).

    Attributes:
        stage: recipe stage number (0: corpus generator).
        name: what it does.
        wall_s: wall time in seconds.
        cpu_s: user + system CPU seconds of the process tree.
        peak_rss_mib: largest resident set of one of its processes, MiB.
        peak_gpu_mib: largest GPU ``memory.used`` seen (MiB), ``None`` when not polled.
        returncode: exit status of ``run.sh`` (0: success).
    """

    stage: int
    name: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    peak_gpu_mib: Optional[float]
    returncode: int


def get_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work_dir", required=True, help="where the corpus, the recipe copy and the logs go")
    p.add_argument("--corpus_dir", default=None, help="the corpus (default: <work_dir>/corpus); made or completed")
    p.add_argument("--scale", type=float, default=1.0, help="fraction of Clotho v2.1's clip counts, in (0, 1]")
    p.add_argument("--seed", type=int, default=0, help="corpus seed")
    p.add_argument("--min_duration_s", type=float, default=15.0, help="shortest clip (s)")
    p.add_argument("--max_duration_s", type=float, default=30.0, help="longest clip (s)")
    p.add_argument("--event_root", default=str(SHARED / "event_library"), help="event library of the audio")
    p.add_argument("--captions_dir", default=str(SHARED / "clotho_captions_v2.1"),
                   help="the official Clotho v2.1 caption CSVs and their licence")
    p.add_argument("--xe_epochs", type=int, default=1, help="XE epochs run (--xe_args \"--max_epoch N\")")
    p.add_argument("--rl_epochs", type=int, default=1, help="SCST epochs run (--rl_args \"--max_epoch M\")")
    p.add_argument("--ngpu", type=int, default=0, help="GPUs for training (caption.sh --ngpu)")
    p.add_argument("--nj", type=int, default=os.cpu_count() or 1,
                   help="parallel jobs: corpus generator, --nj and --inference_nj of caption.sh")
    p.add_argument("--stage", type=int, default=1, help="first recipe stage (1-10)")
    p.add_argument("--stop_stage", type=int, default=10, help="last recipe stage (1-10)")
    p.add_argument("--beam_size", type=int, default=5, help="decoding beam (--decode_args)")
    p.add_argument("--metrics", default="bleu,meteor,rouge_l,cider_d",
                   help="caption_score metrics (SPICE/SPIDEr need Java and the CoreNLP jars: tools/install_spice.sh)")
    p.add_argument("--recipe_args", default="",
                   help="more run.sh/caption.sh options, e.g. \"--num_diversity_samples 0\" "
                        "(one word: --recipe_args=--x)")
    p.add_argument("--project_xe_epochs", type=int, default=25, help="XE epochs of the projection")
    p.add_argument("--project_rl_epochs", type=int, default=25, help="SCST epochs of the projection")
    return p


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 through ``parser.error`` on an option out of range."""
    if not 0.0 < args.scale <= 1.0:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    if not 0.0 < args.min_duration_s <= args.max_duration_s:
        parser.error(f"need 0 < --min_duration_s <= --max_duration_s, got {args.min_duration_s}, {args.max_duration_s}")
    for name in ("xe_epochs", "rl_epochs", "nj", "beam_size", "project_xe_epochs", "project_rl_epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.ngpu < 0:
        parser.error(f"--ngpu must be >= 0, got {args.ngpu}")
    if not 1 <= args.stage <= args.stop_stage <= 10:
        parser.error(f"need 1 <= --stage <= --stop_stage <= 10, got {args.stage} and {args.stop_stage} "
                     "(stage 0, the download, is never run: the corpus is generated)")


class GpuPoller:
    """Largest ``memory.used`` (MiB) over the visible GPUs, polled with ``nvidia-smi`` in a thread."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s, self.peak = interval_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True)
            values = [float(v) for v in out.stdout.split() if v.replace(".", "", 1).isdigit()]
            self.peak = max([self.peak] + values)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "GpuPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_measured(cmd: Sequence[str], cwd: Path, env: dict, log_path: Path, stage: int, name: str,
                 poll_gpu: bool) -> StageResult:
    """Run ``cmd`` (output to ``log_path``) and measure its process tree with ``os.wait4``.

    Interrupting the benchmark terminates the command's process group.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    poller = GpuPoller() if poll_gpu else None
    t0 = time.time()
    with open(log_path, "w") as log, (poller or contextlib.nullcontext()):
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            raise
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return StageResult(stage, name, time.time() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0,
                       poller.peak if poller is not None else None, proc.returncode)


def copy_recipe(work_dir: Path, fresh: bool) -> Path:
    """The recipe copy ``<work_dir>/recipe/egs/clotho`` (with ``egs/TEMPLATE`` and ``utils``, relative
    symlinks kept, generated dirs left out); ``fresh``: remove an earlier copy and copy again.

    Raises:
        ValueError: ``<work_dir>/recipe`` exists but was not made here, or (not ``fresh``) there
            is no copy to reuse.
    """
    top = work_dir / "recipe"
    if fresh:
        if top.exists():
            if not (top / MARKER).is_file():
                raise ValueError(f"{top} exists and was not made by {Path(__file__).name}: not removing it")
            shutil.rmtree(top)
        for part in RECIPE_PARTS:
            shutil.copytree(ROOT / part, top / part, symlinks=True, ignore=shutil.ignore_patterns(*GENERATED))
        (top / MARKER).write_text(f"made by {Path(__file__).name}; its next --stage 1 run removes this dir\n")
    elif not (top / MARKER).is_file():
        raise ValueError(f"{top}: no recipe copy of an earlier run to reuse (start at --stage 1)")
    return top / "egs" / "clotho"


def corpus_command(args: argparse.Namespace, corpus: Path) -> List[str]:
    """The command that makes (or completes) the corpus."""
    return [sys.executable, "-m", "captionbin.caption_make_clotho_sized", "--event_root", args.event_root,
            "--captions_dir", args.captions_dir, "--output_dir", str(corpus), "--seed", str(args.seed),
            "--scale", str(args.scale), "--min_duration_s", str(args.min_duration_s),
            "--max_duration_s", str(args.max_duration_s), "--nj", str(args.nj), "--log_interval", "500"]


def stage_command(args: argparse.Namespace, corpus: Path, stage: int) -> List[str]:
    """``./run.sh`` of the recipe copy for one stage (the benchmark's options override run.sh's)."""
    return ["./run.sh", "--clotho_root", str(corpus), "--stage", str(stage), "--stop_stage", str(stage),
            "--ngpu", str(args.ngpu), "--nj", str(args.nj), "--inference_nj", str(args.nj),
            "--xe_args", f"--max_epoch {args.xe_epochs}", "--rl_args", f"--max_epoch {args.rl_epochs}",
            "--decode_args", f"--beam_size {args.beam_size}", "--metrics", args.metrics,
            *shlex.split(args.recipe_args)]


def format_table(rows: Sequence[StageResult]) -> str:
    """The rows as a Markdown table, with a total over the recipe stages (``stage`` > 0): summed
    wall and CPU times, the largest peaks. The GPU column appears when a row has a GPU peak."""
    gpu = any(r.peak_gpu_mib is not None for r in rows)
    header = ["stage", "what", "wall (s)", "CPU (s)", "CPU / wall", "peak RSS (MiB)"]
    header += ["peak GPU memory (MiB)"] if gpu else []
    lines = ["| " + " | ".join(header) + " |", "|---:|---|" + "---:|" * (len(header) - 2)]
    stages = [r for r in rows if r.stage > 0]
    total = StageResult(0, "**total (stages)**", sum(r.wall_s for r in stages), sum(r.cpu_s for r in stages),
                        max((r.peak_rss_mib for r in stages), default=0.0),
                        max((r.peak_gpu_mib for r in stages if r.peak_gpu_mib is not None), default=None), 0)
    for r in list(rows) + ([total] if stages else []):
        name = r.name if r.returncode == 0 else f"{r.name} (FAILED, exit {r.returncode})"
        cells = [str(r.stage) if r.stage > 0 else "", name, f"{r.wall_s:.1f}", f"{r.cpu_s:.1f}",
                 f"{r.cpu_s / max(r.wall_s, 1e-9):.2f}", f"{r.peak_rss_mib:.0f}"]
        if gpu:
            cells.append("" if r.peak_gpu_mib is None else f"{r.peak_gpu_mib:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def projection(rows: Sequence[StageResult], xe_epochs: int, rl_epochs: int, target_xe: int,
               target_rl: int) -> List[str]:
    """Lines projecting ``target_xe`` XE + ``target_rl`` SCST epochs from stages 5 and 6.

    ``T5(E) = T5 * E / N`` (N: the epochs run; the per-epoch time includes the stage's
    start-up and the validation of every epoch, so it is an upper bound for small N), the
    same for stage 6, and the total is the other measured stages plus both.
    """
    ok = {r.stage: r for r in rows if r.stage > 0 and r.returncode == 0}
    if 5 not in ok or 6 not in ok:
        return ["Projection: needs stages 5 and 6 to have run (and succeeded)."]
    t5 = ok[5].wall_s * target_xe / xe_epochs
    t6 = ok[6].wall_s * target_rl / rl_epochs
    others = sum(r.wall_s for s, r in ok.items() if s not in (5, 6))
    total = others + t5 + t6
    measured = ",".join(str(s) for s in sorted(ok) if s not in (5, 6)) or "none"
    return [
        f"Projection of {target_xe} XE + {target_rl} SCST epochs (wall time; per-epoch time = stage time / epochs run, "
        "start-up and validation included):",
        f"- stage 5: T5 x {target_xe} / {xe_epochs} = {ok[5].wall_s:.1f} x {target_xe} / {xe_epochs} = {t5:.0f} s "
        f"({t5 / 3600:.2f} h)",
        f"- stage 6: T6 x {target_rl} / {rl_epochs} = {ok[6].wall_s:.1f} x {target_rl} / {rl_epochs} = {t6:.0f} s "
        f"({t6 / 3600:.2f} h)",
        f"- total: the other stages ({measured}: {others:.0f} s) + stage 5 + stage 6 = {total:.0f} s "
        f"({total / 3600:.2f} h)",
    ]


def describe(args: argparse.Namespace, corpus: Path) -> List[str]:
    """The report's first lines: machine, corpus and options."""
    from captionlib.utils.provenance import cpu_name

    machine = f"{cpu_name()}, {os.cpu_count()} cores"
    if args.ngpu > 0 and shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True)
        machine += f"; GPU: {', '.join(out.stdout.split(chr(10))[:args.ngpu]).strip() or '?'}"
    info_path = corpus / "clotho_sized.json"
    sizes = json.loads(info_path.read_text()).get("clips", {}) if info_path.is_file() else {}
    return [
        f"Pipeline benchmark: egs/clotho stages {args.stage}-{args.stop_stage} on {machine}.",
        f"Corpus {corpus}: {' / '.join(f'{s} {n}' for s, n in sizes.items())} clips of "
        f"{args.min_duration_s:g}-{args.max_duration_s:g} s (scale {args.scale:g}); the captions do NOT describe the "
        "audio: speed only, the scores mean nothing.",
        f"Options: {args.xe_epochs} XE + {args.rl_epochs} SCST epochs, --ngpu {args.ngpu}, --nj {args.nj}, "
        f"beam {args.beam_size}, metrics {args.metrics}" + (f", {args.recipe_args}" if args.recipe_args else "")
        + ". CPU time: user + system of the stage's processes; peak RSS: the largest single process"
        + ("; GPU memory: nvidia-smi memory.used (whole device)." if args.ngpu > 0 else "."),
    ]


def _tail(path: Path, n: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Make the corpus, run the stages, print (and write) the report; returns the exit status."""
    parser = get_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    work = Path(args.work_dir).resolve()
    corpus = Path(args.corpus_dir).resolve() if args.corpus_dir else work / "corpus"
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")  # python3: this one
    poll_gpu = args.ngpu > 0 and shutil.which("nvidia-smi") is not None
    if args.ngpu > 0 and not poll_gpu:
        print("note: no nvidia-smi: peak GPU memory not measured", file=sys.stderr)
    try:
        recipe = copy_recipe(work, fresh=args.stage == 1)
    except ValueError as e:
        parser.error(str(e))
    if "spice" in args.metrics or "spider" in args.metrics:
        print("note: SPICE/SPIDEr need Java and the CoreNLP jars (tools/install_spice.sh); without them "
              "caption_score reports them as skipped", file=sys.stderr)
    print(f"corpus {corpus}: making or completing it (log: {work / 'logs' / 'corpus.log'})", flush=True)
    rows = [run_measured(corpus_command(args, corpus), ROOT, env, work / "logs" / "corpus.log", 0,
                         "corpus generator (not a recipe stage)", False)]
    if rows[0].returncode == 0:
        for stage in range(args.stage, args.stop_stage + 1):
            log = work / "logs" / f"stage{stage}.log"
            print(f"stage {stage} ({STAGE_NAMES[stage]}): running (log: {log})", flush=True)
            rows.append(run_measured(stage_command(args, corpus, stage), recipe, env, log, stage,
                                     STAGE_NAMES[stage], poll_gpu))
            print(f"  {rows[-1].wall_s:.1f} s wall, {rows[-1].cpu_s:.1f} s CPU, {rows[-1].peak_rss_mib:.0f} MiB "
                  f"peak RSS, exit {rows[-1].returncode}", flush=True)
            if rows[-1].returncode != 0:
                break
    failed = next((r for r in rows if r.returncode != 0), None)
    if failed is not None:
        log = work / "logs" / ("corpus.log" if failed.stage == 0 else f"stage{failed.stage}.log")
        print(f"{failed.name} failed (exit {failed.returncode}); the end of {log}:\n{_tail(log)}", file=sys.stderr)
    report = describe(args, corpus) + ["", format_table(rows), ""] + projection(
        rows, args.xe_epochs, args.rl_epochs, args.project_xe_epochs, args.project_rl_epochs)
    print("\n".join(report))
    (work / "bench_pipeline.md").write_text("\n".join(report) + "\n")
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
