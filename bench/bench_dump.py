#!/usr/bin/env python3
"""Wall time of the log-mel feature dump against a plain per-file librosa script (issue 9).

The 26 real Clotho clips of ``../shared/data/clotho_subset`` (44.1 kHz mono, 15-30 s) are
repeated to ``--num_clips`` entries of a ``wav.scp`` in a temp dir (symlinks), and, after a
warm-up on 2 clips (imports, mel filter banks), timed side by side in this one process:

(a) ``captionlib.audio.dump.dump_feats``, what ``caption_dump_feats`` runs (one job, one torch
    thread, ``dtype="float32"``, ark output);
(b) the same with ``dtype="float64"`` (the old computation);
(c) per file ``librosa.load`` at the configured rate + ``librosa.feature.melspectrogram`` with
    the same FFT/window/hop/mel settings + ``np.log(np.maximum(mel, 1e-10))``; features are
    kept in memory (nothing written). Its BLAS (the mel projection) runs on one thread like
    ours (``--librosa_blas_threads 1``, via threadpoolctl); 0 leaves numpy's default, which
    on a busy 2-core machine made it up to 3x slower.

Each is run ``--repeats`` times (interleaved) and the fastest run counts. Prints seconds (wall,
and the CPU time of the same run, steadier on a shared machine), the ratios librosa/ours (> 1:
ours is faster) and the largest absolute differences between the
feature sets. Feature settings come from ``--config`` (default the Clotho recipe's
``egs/clotho/conf/feats_logmel.yaml``: 64 mels, 2048-point FFT, 40 ms window, 20 ms hop, the
file's own 44.1 kHz). With ``--jobs 1,2`` it also times ``python -m captionbin.caption_dump_feats``
as that many concurrent processes over a split of the same clips (start-up included).

:func:`measure_dump` returns the numbers as a dict (``bench/bench_train.py`` prints them).

Usage:
    python bench/bench_dump.py [--num_clips 100] [--repeats 5] [--jobs 1,2] [--src DIR]
        [--librosa_blas_threads 1]
"""

import argparse
import glob
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SRC = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "clotho_subset"))
DEFAULT_CONF = os.path.join(HERE, "..", "egs", "clotho", "conf", "feats_logmel.yaml")
FEAT_KEYS = ("n_mels", "n_fft", "win_length_s", "hop_length_s", "fs")


def write_wav_scp(workdir, num_clips, src=DEFAULT_SRC):
    """Write ``workdir/wav.scp`` with ``num_clips`` symlinks cycling over ``src/*/*.wav``; returns its path."""
    files = sorted(glob.glob(os.path.join(src, "*", "*.wav")))
    if not files:
        raise FileNotFoundError(f"no *.wav under {src}/*/")
    lines = []
    for i in range(num_clips):
        link = os.path.join(workdir, "wav", f"clip{i:04d}.wav")
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.abspath(files[i % len(files)]), link)
        lines.append(f"bench-{i:05d} {link}\n")
    path = os.path.join(workdir, "wav.scp")
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def librosa_feats(wav_scp, n_mels, n_fft, win_length_s, hop_length_s, fs=None, floor=1e-10, blas_threads=1):
    """The plain per-file librosa path: ``{clip_id: float32 (frames, n_mels)}``.

    ``blas_threads``: BLAS threads while it runs (0: leave numpy's default).
    """
    import librosa
    from threadpoolctl import threadpool_limits

    feats = {}
    with open(wav_scp) as f, threadpool_limits(blas_threads or None, user_api="blas"):
        for line in f:
            key, path = line.rstrip("\n").split(" ", 1)
            y, sr = librosa.load(path, sr=fs)
            mel = librosa.feature.melspectrogram(
                y=y, sr=sr, n_fft=n_fft, hop_length=round(hop_length_s * sr), win_length=round(win_length_s * sr),
                window="hann", center=True, pad_mode="constant", power=2.0, n_mels=n_mels,
            )
            feats[key] = np.log(np.maximum(mel, floor)).T.astype(np.float32)
    return feats


def _subset_scp(wav_scp, path, n):
    with open(wav_scp) as f:
        lines = f.readlines()[:n]
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def measure_dump(num_clips=100, repeats=5, src=DEFAULT_SRC, config=DEFAULT_CONF, workdir=None,
                 librosa_blas_threads=1):
    """Time our dump (float32, float64) and the librosa path on ``num_clips`` repeated real clips.

    Takes ~50 s on one core for the defaults. Leaves torch's thread count as it found it.

    Args:
        num_clips: wav.scp entries (cycling over the clips of ``src``; 100 ~ 38 min of audio).
        repeats: runs of each path (interleaved); the fastest counts.
        src: directory with ``<split>/*.wav``.
        config: feature YAML (keys of ``caption_dump_feats``).
        workdir: where to put the wav.scp and dumps (default: a temp dir, removed afterwards).
        librosa_blas_threads: BLAS threads of the librosa path (0: numpy's default).

    Returns:
        dict: ``num_clips``, ``audio_s`` (seconds of audio); wall seconds ``float32_s``,
        ``float64_s``, ``librosa_s`` and ``ours_s`` (= ``float32_s``, the default dtype);
        ``ratio_float32`` and ``ratio_float64`` (``librosa_s`` divided by ours); process CPU
        seconds of the same runs (all threads) ``float32_cpu_s``, ``float64_cpu_s``,
        ``librosa_cpu_s``; ``max_abs_diff_f32_f64``, ``max_abs_diff_f64_librosa`` and
        ``max_abs_diff_f32_librosa`` (over all clips and elements, natural-log units).

    Raises:
        FileNotFoundError: no clips under ``src``.
    """
    import soundfile as sf
    import torch

    from captionlib.audio.dump import dump_feats
    from captionlib.io.feats import FeatReader

    with open(config) as f:
        conf = {k: v for k, v in yaml.safe_load(f).items() if k in FEAT_KEYS}
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        root = workdir or tmp
        os.makedirs(root, exist_ok=True)
        wav_scp = write_wav_scp(root, num_clips, src)
        with open(wav_scp) as f:
            audio_s = sum(sf.info(line.rstrip("\n").split(" ", 1)[1]).duration for line in f)

        def ours(dtype, scp=wav_scp):
            dump_feats(scp, os.path.join(root, dtype, "feats.1"), log_interval=0, num_threads=1, dtype=dtype, **conf)

        warm = _subset_scp(wav_scp, os.path.join(root, "warm.scp"), 2)
        try:
            ours("float32", warm)
            ours("float64", warm)
            librosa_feats(warm, **conf, blas_threads=librosa_blas_threads)
            times = {"float32": [], "float64": [], "librosa": []}
            for _ in range(repeats):
                for name in times:
                    t0, c0 = time.perf_counter(), time.process_time()
                    if name == "librosa":
                        ref = librosa_feats(wav_scp, **conf, blas_threads=librosa_blas_threads)
                    else:
                        ours(name)
                    times[name].append((time.perf_counter() - t0, time.process_time() - c0))
        finally:
            torch.set_num_threads(threads)
        f32 = FeatReader(os.path.join(root, "float32", "feats.1.scp"))
        f64 = FeatReader(os.path.join(root, "float64", "feats.1.scp"))
        diffs = np.array([
            [np.abs(f32[k] - f64[k]).max(), np.abs(f64[k] - ref[k]).max(), np.abs(f32[k] - ref[k]).max()]
            for k in ref
        ]).max(axis=0)
    best = {k: min(v) for k, v in times.items()}  # (wall, cpu) of the fastest run
    return {
        "num_clips": num_clips,
        "audio_s": audio_s,
        "ours_s": best["float32"][0],
        "float32_s": best["float32"][0],
        "float64_s": best["float64"][0],
        "librosa_s": best["librosa"][0],
        "ratio_float32": best["librosa"][0] / best["float32"][0],
        "ratio_float64": best["librosa"][0] / best["float64"][0],
        "float32_cpu_s": best["float32"][1],
        "float64_cpu_s": best["float64"][1],
        "librosa_cpu_s": best["librosa"][1],
        "max_abs_diff_f32_f64": float(diffs[0]),
        "max_abs_diff_f64_librosa": float(diffs[1]),
        "max_abs_diff_f32_librosa": float(diffs[2]),
    }


def measure_jobs(nj, num_clips=100, src=DEFAULT_SRC, config=DEFAULT_CONF, dtype="float32"):
    """``(wall, cpu)`` seconds of ``nj`` concurrent ``caption_dump_feats`` processes over ``num_clips`` clips.

    The clips are split round-robin into ``nj`` wav.scp shards, as a JOB array would get them;
    process start-up and imports are included; ``cpu`` is the user+system time of all jobs.

    Raises:
        subprocess.CalledProcessError: a job failed.
    """
    with tempfile.TemporaryDirectory() as root:
        with open(write_wav_scp(root, num_clips, src)) as f:
            lines = f.readlines()
        procs = []
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        for j in range(nj):
            shard = os.path.join(root, f"wav.{j + 1}.scp")
            with open(shard, "w") as f:
                f.writelines(lines[j::nj])
            cmd = [sys.executable, "-m", "captionbin.caption_dump_feats", "--config", config, "--wav_scp", shard,
                   "--out_prefix", os.path.join(root, "dump", f"feats.{j + 1}"), "--dtype", dtype,
                   "--log_level", "WARNING"]
            procs.append((cmd, subprocess.Popen(cmd, cwd=os.path.dirname(HERE))))
        for cmd, p in procs:
            if p.wait() != 0:
                raise subprocess.CalledProcessError(p.returncode, cmd)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main(argv=None):
    """Run :func:`measure_dump` (and :func:`measure_jobs` for ``--jobs``) and print the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num_clips", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--src", default=DEFAULT_SRC, help="directory with <split>/*.wav")
    parser.add_argument("--config", default=DEFAULT_CONF, help="feature YAML")
    parser.add_argument("--jobs", default="", help="comma-separated job counts to time as processes, e.g. 1,2")
    parser.add_argument("--workdir", default=None, help="keep the files here (default: a temp dir)")
    parser.add_argument("--librosa_blas_threads", type=int, default=1, help="0: numpy's default")
    args = parser.parse_args(argv)
    r = measure_dump(args.num_clips, args.repeats, args.src, args.config, args.workdir, args.librosa_blas_threads)
    print(f"log-mel dump of {r['num_clips']} clips ({r['audio_s'] / 60:.1f} min of audio), one process, "
          f"best of {args.repeats}:")
    for dt in ("float32", "float64"):
        wall, cpu, ratio = r[dt + "_s"], r[dt + "_cpu_s"], r["ratio_" + dt]
        print(f"  ours {dt} {wall:7.2f} s ({cpu:.2f} s CPU)   librosa/ours {ratio:.2f}x "
              f"({r['librosa_cpu_s'] / cpu:.2f}x in CPU time)")
    print(f"  librosa      {r['librosa_s']:7.2f} s ({r['librosa_cpu_s']:.2f} s CPU)   "
          f"BLAS threads: {args.librosa_blas_threads or 'default'}")
    print(f"  max |diff|: f32-f64 {r['max_abs_diff_f32_f64']:.2e}, f64-librosa {r['max_abs_diff_f64_librosa']:.2e}, "
          f"f32-librosa {r['max_abs_diff_f32_librosa']:.2e}")
    jobs = [int(j) for j in args.jobs.split(",") if j]
    if jobs:
        wall, cpu = measure_jobs(1, 1, args.src, args.config)
        print(f"caption_dump_feats processes (float32); start-up (1 job, 1 clip): {wall:.2f} s, {cpu:.2f} s CPU")
        res = {nj: measure_jobs(nj, args.num_clips, args.src, args.config) for nj in jobs}
        for nj, (wall, cpu) in res.items():
            print(f"  {args.num_clips} clips, nj={nj}: {wall:6.2f} s ({cpu:.2f} s CPU, all jobs)   "
                  f"speed-up over nj={jobs[0]}: {res[jobs[0]][0] / wall:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
