#!/usr/bin/env python3
"""Training and decoding speed of the seed system at Clotho scale, old paths against new.

Everything runs on real clips: the WAVs of ``../shared/data/clotho_subset`` become 64-d
log-mel features (the Clotho recipe's ``conf/feats_logmel.yaml``: 20 ms hop), tiled to
Clotho's clip lengths (15-30 s, uniform), with real Clotho development captions and their
4.4k-word vocabulary. The model is seed 000's CRNN + GRU-512 captioner, batches are 32 items.
Each ratio below is measured side by side in this one run, the old path still reachable as
an option:

* XE, SCST and REINFORCE+ (5 samples) updates;
* the encoder: the packed BiGRU (``encoder_conf: {bigru: packed}``) against the split one;
  eval-mode encoding of a batch at once against chunks (``captioner.EVAL_CHUNK``: chunks on
  CPU, one call on a GPU);
* padded (``batch_type: random``) against length-bucketed (``bucket``) batches: the mean
  padded length of each schedule over a full Clotho epoch, and an update at that length;
* the SCST greedy baseline: a second encoder pass (``baseline_encoding: separate``) against
  the sampling pass's encoding (``shared``);
* greedy, beam 5 and a per-clip beam-5 loop, search only;
* the feature dump against a per-file librosa script (:mod:`bench_dump`).

It prints the arithmetic lower bound of the XE update (its FLOPs from
``torch.utils.flop_counter.FlopCounterMode`` over this machine's ``torch.mm`` FLOP/s,
measured here) and the projected wall time of a full Clotho run (25 XE + 25 SCST epochs
with validation every epoch), old and new. An SCST epoch is 600 updates: egs/clotho's SCST
config iterates (clip, caption) pairs (``rl_unit: caption``); ``--rl_unit clip`` projects
120 (one per clip).

``--decode_compile MODE`` adds the SCST and REINFORCE+ updates with the decoder step and the
draw of their sampling compiled as graphs (``reduce-overhead``: CUDA graphs; the training
option of the same name), timed beside the eager ones. Both updates are also timed with
``--sample_logprobs recompute`` (sampling without gradients, then one teacher-forced decoder
pass for the gradient), eager and, with ``--decode_compile``, compiled. On a device where the
RL objectives decode the greedy baseline and the samples in one pass
(``SampledObjective.joint_pass_devices``: GPUs), or with ``--one_pass``, the SCST update with
recompute is timed with two passes too.

On a GPU (``--device cuda``) every timing synchronises the device before reading the
clock, the bound uses the GPU's float32 ``torch.mm`` rate (TF32 off, PyTorch's default), and
the peak GPU memory is printed beside the host's RSS.

Usage:
    python bench/bench_train.py [--num_threads N] [--reps 2] [--device cuda] [--skip_dump]
        [--decode_compile reduce-overhead] [--rl_unit caption]
"""

import argparse
import csv
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from captionlib.audio.features import logmel  # noqa: E402
from captionlib.data import UNITS  # noqa: E402
from captionlib.data.datasets import pad_feats, pad_ids  # noqa: E402
from captionlib.decode.options import COMPILE_MODES  # noqa: E402
from captionlib.decode.search import beam_search, greedy_search  # noqa: E402
from captionlib.metrics.cider_d import DocumentFrequency  # noqa: E402
from captionlib.models import captioner as captioner_module  # noqa: E402
from captionlib.models.captioner import Captioner, xe_loss, xe_targets  # noqa: E402
from captionlib.rl.policy_gradient import PolicyGradient  # noqa: E402
from captionlib.rl.rewards import Reward  # noqa: E402
from captionlib.text.cleaner import clean_words  # noqa: E402
from captionlib.text.tokenizer import Tokenizer  # noqa: E402
from captionlib.train.batching import epoch_batches  # noqa: E402
from captionlib.train.options import TrainOptions  # noqa: E402

SHARED = HERE.parent.parent / "shared" / "data"
HOP_S = 0.02  # egs/clotho/conf/feats_logmel.yaml
# Clotho v2.1: development 3839 clips x 5 captions, validation 1045 clips
CLOTHO_DEV_CLIPS, CLOTHO_VALID_CLIPS, CAPTIONS_PER_CLIP = 3839, 1045, 5
EPOCHS_XE, EPOCHS_RL = 25, 25


def setup_arguments(p: argparse.ArgumentParser, num_threads: int, reps: int, reps_help: str) -> None:
    """Add the options of :class:`Setup` and :func:`use_device` (data, sizes, device, threads,
    repetitions) to ``p``: the ones every benchmark on this setup shares."""
    p.add_argument("--data", default=str(SHARED), help="the shared data dir (clotho_subset, clotho_captions_v2.1)")
    p.add_argument("--num_threads", type=int, default=num_threads, help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=reps, help=reps_help)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--min_s", type=float, default=15.0, help="shortest clip (s)")
    p.add_argument("--max_s", type=float, default=30.0, help="longest clip (s)")
    p.add_argument("--warm_up_steps", type=int, default=100,
                   help="decoder-only steps on the real captions before measuring (realistic caption lengths)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="torch device of the model and batches (cpu, cuda, cuda:N)")


def get_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    setup_arguments(p, os.cpu_count(), 3, "timed repetitions per measurement (after a warm-up)")
    p.add_argument("--skip_dump", action="store_true", help="leave out the feature-dump comparison")
    p.add_argument("--decode_compile", default="none", choices=COMPILE_MODES,
                   help="also time the SCST and REINFORCE+ updates with their sampling compiled so (the training "
                        "option --decode_compile; reduce-overhead: CUDA graphs on a GPU)")
    p.add_argument("--one_pass", action="store_true",
                   help="time SCST with the greedy baseline and the samples decoded in one pass against two passes "
                        "on any device (by default where the objectives decode so: "
                        "SampledObjective.joint_pass_devices)")
    p.add_argument("--rl_unit", default="caption", choices=UNITS,
                   help="what an SCST epoch of the projection iterates: (clip, caption) pairs, as egs/clotho's SCST "
                        "config (rl_unit: caption, the seed authors' code), or clips")
    return p


DEVICE = torch.device("cpu")


def sync() -> None:
    """Wait for queued GPU work (no-op on CPU), so that a host clock reads the work's end."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def timed(fn, reps: int) -> float:
    """Mean wall seconds of ``fn()`` over ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.mean(times)


def timed_round_robin(fns, reps: int):
    """Mean wall seconds of each of ``fns`` (``{name: fn}``), measured side by side: after a
    warm-up call of each, ``reps`` rounds that call every function once in turn, so slow
    phases of a shared machine hit all of them alike."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.mean(t) for name, t in times.items()}


def real_features(data: Path):
    """Log-mel (frames, 64) of every clip of clotho_subset, concatenated along time."""
    wavs = sorted((data / "clotho_subset").glob("*/*.wav"))
    if not wavs:
        raise FileNotFoundError(f"{data / 'clotho_subset'}: no WAV files")
    feats = []
    for w in wavs:
        wave, fs = sf.read(str(w), dtype="float32", always_2d=True)
        feats.append(logmel(wave.mean(1), fs))
    return np.concatenate(feats), len(wavs)


def tile(stream: np.ndarray, frames: int, offset: int) -> np.ndarray:
    """``frames`` consecutive frames of the (cyclic) real-feature stream from ``offset``."""
    idx = (offset + np.arange(frames)) % len(stream)
    return stream[idx]


def clotho_captions(data: Path):
    """Cleaned development captions (lists of words) of Clotho v2.1, 5 per clip."""
    path = data / "clotho_captions_v2.1" / "clotho_captions_development.csv"
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [[clean_words(r[f"caption_{k}"]) for k in range(1, 6)] for r in rows]


def caption_tokenizer(caps) -> Tokenizer:
    """The word tokenizer of ``caps`` (per clip, lists of words): padding, unk, the sorted words, eos."""
    vocab = sorted({w for c in caps for cap in c for w in cap})
    return Tokenizer(["<blank>", "<unk>"] + vocab + ["<sos/eos>"])


class Setup:
    """The model, tokenizer, reward and real-feature batches of the benchmark."""

    def __init__(self, args):
        rng = np.random.default_rng(args.seed)
        self.batch_size = args.batch_size
        self.stream, self.num_wavs = real_features(Path(args.data))
        self.caps = clotho_captions(Path(args.data))
        self.tok = caption_tokenizer(self.caps)
        # clip lengths of a Clotho-sized development set and its epoch schedules
        lo, hi = round(args.min_s / HOP_S), round(args.max_s / HOP_S)
        self.clip_frames = rng.integers(lo, hi + 1, size=CLOTHO_DEV_CLIPS)
        self.cap_frames = np.repeat(self.clip_frames, CAPTIONS_PER_CLIP).tolist()
        n = len(self.cap_frames)
        self.schedules = {
            kind: epoch_batches(n, self.batch_size, args.seed, 1, lengths=None if kind == "random" else self.cap_frames,
                                bucket_pool=TrainOptions().bucket_pool)
            for kind in ("random", "bucket")
        }
        self.padded = {k: float(np.mean([self.padded_frames(b) for b in s])) for k, s in self.schedules.items()}
        self.real = float(np.mean(self.cap_frames))
        self.refs = {f"clip{i}": c for i, c in enumerate(self.caps)}
        torch.manual_seed(args.seed)
        self.model = Captioner(self.tok.vocab_size, n_mels=64)
        self.model.set_normalization(self.stream.mean(0), self.stream.std(0))
        self.model.to(DEVICE)

    def padded_frames(self, batch) -> int:
        """Frames of a batch of caption indices padded to its longest clip."""
        return max(self.cap_frames[i] for i in batch)

    def batch(self, kind: str):
        """A batch of ``kind`` (random / bucket) whose padded length is the schedule's mean:
        (clip ids, feats (B, T, 64), lens (B,), ys (B, L), ys_lens (B,)), tensors on ``--device``."""
        best = min(self.schedules[kind], key=lambda b: abs(self.padded_frames(b) - self.padded[kind]))
        clip_idx = [i // CAPTIONS_PER_CLIP for i in best]
        feats, lens = pad_feats([tile(self.stream, int(self.clip_frames[c]), 7919 * c) for c in clip_idx])
        ids = [self.tok.text2ids(" ".join(self.caps[c % len(self.caps)][i % CAPTIONS_PER_CLIP]))
               for c, i in zip(clip_idx, best)]
        ys, ys_lens = pad_ids([np.asarray(x, dtype=np.int64) for x in ids])
        clips = [f"clip{c % len(self.caps)}" for c in clip_idx]
        return (clips, *(x.to(DEVICE) for x in (feats, lens, ys, ys_lens)))


def cider_reward(setup: "Setup") -> Reward:
    """The CIDEr-D reward of the RL updates: the real captions as references, their document
    frequencies as stage 4 computes them."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        df_path = os.path.join(tmp, "cider_df.npz")
        DocumentFrequency.from_references(setup.refs, n=4).save(df_path)
        return Reward("cider_d:1.0", setup.refs, df_path)


def use_device(args) -> None:
    """Set the benchmark's device (``--device``) and threads (``--num_threads``).

    Raises:
        SystemExit: a CUDA device asked for but none visible.
    """
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA device is visible")
    torch.set_num_threads(args.num_threads)


def xe_backward(model, feats, lens, ys, ys_lens) -> None:
    """The XE loss's forward and backward pass (gradients added to the parameters')."""
    xe_loss(model(feats, lens, ys), xe_targets(ys, ys_lens, model.eos_id)).backward()


def xe_update(model, opt, feats, lens, ys, ys_lens):
    """One XE update (forward, backward, Adam step)."""
    opt.zero_grad(set_to_none=True)
    xe_backward(model, feats, lens, ys, ys_lens)
    opt.step()


def rl_update(objective, model, opt, clips, feats, lens):
    """One RL update of ``objective``."""
    loss, _ = objective(model, (clips, feats, lens))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def warmed_setup(args) -> "Setup":
    """:func:`use_device`, then the :class:`Setup` of ``args`` with its decoder warmed up
    (:func:`warm_up_decoder`, ``--warm_up_steps``): what every update benchmark starts from."""
    use_device(args)
    setup = Setup(args)
    warm_up_decoder(setup, args.warm_up_steps, args.seed)
    return setup


def warm_up_decoder(setup, steps: int, seed: int) -> float:
    """Train the decoder alone on the real captions for ``steps`` Adam steps (64 captions
    each, fixed embeddings of real clips), so that captions end like real ones: an untrained
    decoder never emits eos, which would make every decode run to ``max_len``. Returns the
    last loss."""
    model, rng = setup.model, np.random.default_rng(seed)
    _, feats, lens, _, _ = setup.batch("random")
    model.eval()
    with torch.no_grad():
        bank = model.encode(feats, lens)
    model.train()
    opt = torch.optim.Adam(model.decoder.parameters(), lr=3e-3)
    for _ in range(steps):
        picks = rng.integers(0, len(setup.caps), size=64)
        ids = [np.asarray(setup.tok.text2ids(" ".join(setup.caps[c][c % CAPTIONS_PER_CLIP])), dtype=np.int64)
               for c in picks]
        ys, ys_lens = (x.to(DEVICE) for x in pad_ids(ids))
        v = bank[torch.as_tensor(picks % len(bank), device=DEVICE)]
        loss = xe_loss(model.decoder.forward_teacher(v, ys), xe_targets(ys, ys_lens, model.eos_id))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


def set_bigru(model, impl: str) -> None:
    """Switch the encoder's BiGRU between ``split`` and ``packed`` (same parameters)."""
    model.encoder.rnn.impl = impl


def mm_work(calls: int = 1):
    """``(fn, flops)``: ``fn()`` runs ``calls`` float32 ``torch.mm`` of 2048 x 2048 matrices on the
    device, ``flops`` of them in all (the bound's rate is ``flops`` over ``fn``'s seconds)."""
    a, b = torch.randn(2048, 2048, device=DEVICE), torch.randn(2048, 2048, device=DEVICE)

    def fn():
        for _ in range(calls):
            torch.mm(a, b)

    return fn, calls * 2 * 2048 ** 3


def mm_flops_per_s(reps: int) -> float:
    """This device's float32 ``torch.mm`` throughput (FLOP/s) on 2048 x 2048 matrices."""
    fn, flops = mm_work()
    return flops / timed(fn, max(reps, 3))


def xe_flop_counts(model, feats, lens, ys, ys_lens) -> dict:
    """FLOPs of one XE forward + backward per aten operator, ``{operator: flops}``
    (``FlopCounterMode``; cuDNN off, since the counter has no formula for its fused RNN kernels
    and would leave out the GRUs)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.backends.cudnn.flags(enabled=False):
        xe_backward(model, feats, lens, ys, ys_lens)
    model.zero_grad(set_to_none=True)
    return {op: float(f) for op, f in counter.get_flop_counts()["Global"].items()}


def xe_flops(model, feats, lens, ys, ys_lens) -> float:
    """FLOPs of one XE forward + backward (the sum of :func:`xe_flop_counts`)."""
    return sum(xe_flop_counts(model, feats, lens, ys, ys_lens).values())


def main(argv=None) -> None:
    """Run the benchmark and print its table."""
    args = get_parser().parse_args(argv)
    use_device(args)
    t_start = time.time()
    s = Setup(args)
    model, reps = s.model, args.reps
    gpu = f", {torch.cuda.get_device_name(DEVICE)}" if DEVICE.type == "cuda" else ""
    print(f"# bench_train: torch {torch.__version__}, {args.num_threads} threads, {os.cpu_count()} CPUs, "
          f"device {DEVICE}{gpu}, THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')} "
          f"(the recipes' path.sh sets 1); mean of {reps} timed repetitions")
    print(f"real features: {s.num_wavs} clotho_subset WAVs, {len(s.stream)} frames; vocabulary {s.tok.vocab_size}; "
          f"model {sum(p.numel() for p in model.parameters())} parameters")
    for k in ("random", "bucket"):
        print(f"{k:>6} batches: mean padded length {s.padded[k] * HOP_S:.1f} s over a Clotho epoch "
              f"({len(s.schedules[k])} batches; real audio {s.real * HOP_S:.1f} s per item)")
    rows = []  # (what, old label, old s, new label, new s)

    t0 = time.perf_counter()
    loss = warm_up_decoder(s, args.warm_up_steps, args.seed)
    print(f"decoder warmed up on the real captions: {args.warm_up_steps} steps, "
          f"cross-entropy {loss:.2f}, {time.perf_counter() - t0:.0f} s")
    clips_r, feats_r, lens_r, ys_r, ys_lens_r = s.batch("random")
    clips_b, feats_b, lens_b, ys_b, ys_lens_b = s.batch("bucket")
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)
    model.train()

    reward = cider_reward(s)
    scst = {enc: PolicyGradient(reward, s.tok, baseline_encoding=enc) for enc in ("separate", "shared")}
    rplus = PolicyGradient(reward, s.tok, num_samples=5, baseline="mean")
    # --sample_logprobs recompute: sampled under no_grad, one teacher-forced pass for the gradient
    scst_re = PolicyGradient(reward, s.tok, sample_logprobs="recompute")
    rplus_re = PolicyGradient(reward, s.tok, num_samples=5, baseline="mean", sample_logprobs="recompute")
    # where the greedy baseline and the samples share a decoding pass (joint_pass_devices): the two passes too
    joint = args.one_pass or DEVICE.type in PolicyGradient.joint_pass_devices
    scst_re.joint_pass_devices = (DEVICE.type,) if joint else ()
    scst_two = PolicyGradient(reward, s.tok, sample_logprobs="recompute")
    scst_two.joint_pass_devices = ()

    def with_bigru(impl, fn):
        def run():
            set_bigru(model, impl)
            fn()
            set_bigru(model, "split")
        return run

    def compiled_sampling(fn):
        def run():
            model.decode_compile = args.decode_compile
            try:
                fn()
            finally:
                model.decode_compile = "none"
        return run

    # every update, old and new paths, round robin
    updates = {
        "xe_packed": with_bigru("packed", lambda: xe_update(model, opt, feats_r, lens_r, ys_r, ys_lens_r)),
        "xe": lambda: xe_update(model, opt, feats_r, lens_r, ys_r, ys_lens_r),
        "xe_bucket": lambda: xe_update(model, opt, feats_b, lens_b, ys_b, ys_lens_b),
        "scst_separate": lambda: rl_update(scst["separate"], model, opt, clips_r, feats_r, lens_r),
        "scst": lambda: rl_update(scst["shared"], model, opt, clips_r, feats_r, lens_r),
        "scst_bucket": lambda: rl_update(scst["shared"], model, opt, clips_b, feats_b, lens_b),
        "reinforce_plus": lambda: rl_update(rplus, model, opt, clips_r, feats_r, lens_r),
        "scst_recompute": lambda: rl_update(scst_re, model, opt, clips_r, feats_r, lens_r),
        "reinforce_plus_recompute": lambda: rl_update(rplus_re, model, opt, clips_r, feats_r, lens_r),
    }
    compiled_keys = ["scst", "reinforce_plus", "scst_recompute", "reinforce_plus_recompute"]
    if joint:
        updates["scst_two_passes"] = lambda: rl_update(scst_two, model, opt, clips_r, feats_r, lens_r)
        compiled_keys.append("scst_two_passes")
    if args.decode_compile != "none":
        for key in compiled_keys:
            updates[f"{key}_compiled"] = compiled_sampling(updates[key])
            # the first calls compile, then CUDA graph trees run a call eagerly and record the
            # next (timed_round_robin warms each up once more)
            updates[f"{key}_compiled"]()
            updates[f"{key}_compiled"]()
    t = timed_round_robin(updates, reps)
    xe_old, xe_split, xe_new = t["xe_packed"], t["xe"], t["xe_bucket"]
    scst_old, scst_new, scst_bucket, rplus_t = t["scst_separate"], t["scst"], t["scst_bucket"], t["reinforce_plus"]
    rows.append(("XE update, padded batch", "packed BiGRU", xe_old, "split BiGRU", xe_split))
    rows.append(("XE update (split BiGRU)", "padded batch", xe_split, "bucketed batch", xe_new))
    rows.append(("SCST update, padded batch", "separate baseline encoding", scst_old, "shared", scst_new))
    recompute = "--sample_logprobs recompute"
    rows.append(("SCST update, padded batch", "log-probs of the sampling loop", scst_new, recompute,
                 t["scst_recompute"]))
    rows.append(("REINFORCE+ update, padded batch", "log-probs of the sampling loop", rplus_t, recompute,
                 t["reinforce_plus_recompute"]))
    compile_opt = f"--decode_compile {args.decode_compile}"
    if joint:  # the greedy baseline and the samples decoded in two passes, or in one
        variants = [("", recompute)] + ([("_compiled", f"{recompute}, {compile_opt}")]
                                        if args.decode_compile != "none" else [])
        for suffix, how in variants:
            rows.append((f"SCST update ({how})", "baseline, samples: two passes", t[f"scst_two_passes{suffix}"],
                         "one pass", t[f"scst_recompute{suffix}"]))
    # the other ways to an RL update, each as a ratio to the XE update below
    other_rl = {f"{name} ({recompute})": t[f"{key}_recompute"]
                for name, key in (("SCST", "scst"), ("REINFORCE+", "reinforce_plus"))}
    if args.decode_compile != "none":
        rows.append(("SCST update, padded batch", "eager sampling", scst_new, compile_opt, t["scst_compiled"]))
        rows.append(("REINFORCE+ update, padded batch", "eager sampling", rplus_t, compile_opt,
                     t["reinforce_plus_compiled"]))
        for name, key in (("SCST", "scst"), ("REINFORCE+", "reinforce_plus")):
            other_rl[f"{name} ({compile_opt})"] = t[f"{key}_compiled"]
            other_rl[f"{name} ({compile_opt}, {recompute})"] = t[f"{key}_recompute_compiled"]
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    peak_gpu_gib = torch.cuda.max_memory_allocated(DEVICE) / 2 ** 30 if DEVICE.type == "cuda" else 0.0

    # the BiGRU alone, forward + backward on the encoder's real input shapes
    x = torch.randn(feats_r.size(0), feats_r.size(1) // 4, model.encoder.rnn.input_size, device=DEVICE)
    glens = (lens_r // 4).clamp(min=1, max=x.size(1))

    def bigru_step(impl):
        set_bigru(model, impl)
        xi = x.clone().requires_grad_(True)
        model.encoder.rnn(xi, glens).sum().backward()

    t = timed_round_robin({"packed": lambda: bigru_step("packed"), "split": lambda: bigru_step("split")}, reps)
    rows.append(("BiGRU forward + backward", "packed", t["packed"], "split", t["split"]))
    set_bigru(model, "split")
    model.zero_grad(set_to_none=True)

    # eval mode: encoding, search, teacher forcing
    model.eval()
    with torch.no_grad():
        default_chunks = captioner_module.EVAL_CHUNK  # {device type: clips per call}
        chunk = default_chunks.get("cpu", 8)

        def encode_with(chunks):
            def run():
                captioner_module.EVAL_CHUNK = chunks
                try:
                    model.encode(feats_r, lens_r)
                finally:
                    captioner_module.EVAL_CHUNK = default_chunks
            return run

        v = model.encode(feats_r, lens_r)
        ys5 = ys_r.repeat(CAPTIONS_PER_CLIP, 1)
        t = timed_round_robin({
            "enc_whole": encode_with({}),
            "enc_chunks": encode_with({DEVICE.type: chunk}),
            "greedy": lambda: greedy_search(model, v, 30),
            "beam": lambda: beam_search(model, v, 5, 30),
            "beam_per_clip": lambda: [beam_search(model, v[i: i + 1], 5, 30) for i in range(v.size(0))],
            "tf_32": lambda: model(feats_r, lens_r, ys_r),  # old validation: one encoding per caption
            "tf_160": lambda: model.decoder.forward_teacher(v.repeat(CAPTIONS_PER_CLIP, 1), ys5),
        }, reps)
        enc_whole, enc_chunks, greedy_t, beam_t = t["enc_whole"], t["enc_chunks"], t["greedy"], t["beam"]
        per_clip_t, tf_32, tf_160 = t["beam_per_clip"], t["tf_32"], t["tf_160"]
        rows.append(("eval encoding, padded batch", "one call", enc_whole, f"chunks of {chunk}", enc_chunks))
        rows.append(("beam 5, search only", "per-clip loop", per_clip_t, "batched", beam_t))
        # the default of this device type: chunks on CPU, one call on a GPU
        enc_default = enc_chunks if default_chunks.get(DEVICE.type) else enc_whole
        batched = beam_search(model, v, 5, 30)
        alone = [beam_search(model, v[i: i + 1], 5, 30)[0] for i in range(v.size(0))]
        same = sum(a.numel() <= b.numel() and torch.equal(a, b[: a.numel()]) and not b[a.numel():].any()
                   for a, b in zip(alone, batched))
        lengths = (greedy_search(model, v, 30) != 0).sum(1).float()
    print(f"beam 5: batched and per-clip outputs identical for {same}/{len(alone)} clips")
    print(f"greedy captions: {lengths.mean():.1f} tokens (min {lengths.min():.0f}, max {lengths.max():.0f})")

    # the arithmetic bound of the XE update
    model.train()
    flops = xe_flops(model, feats_r, lens_r, ys_r, ys_lens_r)
    mm = mm_flops_per_s(reps)

    if not args.skip_dump:
        from bench_dump import measure_dump

        d = measure_dump()
        rows.append(("feature dump", "per-file librosa", d["librosa_s"], "caption_dump_feats", d["ours_s"]))

    print()
    print("| what | old | old s | new | new s | speed-up |")
    print("|---|---|---:|---|---:|---:|")
    for what, a, ta, b, tb in rows:
        print(f"| {what} | {a} | {ta:.3f} | {b} | {tb:.3f} | {ta / tb:.2f}x |")
    print(f"| REINFORCE+ (5 samples, mean baseline) / XE update, padded batch | XE | {xe_split:.3f} | "
          f"REINFORCE+ | {rplus_t:.3f} | {rplus_t / xe_split:.2f}x XE |")
    print(f"| SCST / XE update, padded batch (new paths) | XE | {xe_split:.3f} | SCST | {scst_new:.3f} | "
          f"{scst_new / xe_split:.2f}x XE |")
    for name, seconds in other_rl.items():
        print(f"| {name} / XE update, padded batch | XE | {xe_split:.3f} | {name.split()[0]} | {seconds:.3f} | "
              f"{seconds / xe_split:.2f}x XE |")
    print(f"| beam 5 (batched) / greedy, search only | greedy | {greedy_t:.3f} | beam 5 | {beam_t:.3f} | "
          f"{beam_t / greedy_t:.2f}x greedy |")
    print()
    bound = flops / mm
    print(f"XE update bound: {flops / 1e9:.0f} GFLOP / {mm / 1e9:.0f} GFLOP/s (torch.mm 2048^2) = {bound:.2f} s; "
          f"measured {xe_split:.2f} s = {xe_split / bound:.2f}x the bound (padded batch, split BiGRU)")
    gpu_peak = f"; peak GPU memory allocated {peak_gpu_gib:.2f} GiB" if DEVICE.type == "cuda" else ""
    print(f"peak RSS after the XE and RL updates: {peak_gib:.2f} GiB{gpu_peak}")

    # projection: 25 XE + 25 SCST epochs of full Clotho, validation on 1045 clips each epoch
    nb = s.batch_size
    xe_batches = len(s.schedules["random"])
    rl_items = CLOTHO_DEV_CLIPS * (CAPTIONS_PER_CLIP if args.rl_unit == "caption" else 1)
    rl_batches = -(-rl_items // nb)
    valid_batches = -(-CLOTHO_VALID_CLIPS // nb)
    valid_caption_batches = -(-CLOTHO_VALID_CLIPS * CAPTIONS_PER_CLIP // nb)
    # old: each validation caption encoded with teacher forcing, then every clip encoded
    # again (one call per batch) for the greedy decode; new: one pass per clip (chunked on CPU)
    valid_old = valid_caption_batches * tf_32 + valid_batches * (enc_whole + greedy_t)
    valid_new = valid_batches * (enc_default + greedy_t + tf_160)
    valid_rl_old, valid_rl_new = valid_batches * (enc_whole + greedy_t), valid_batches * (enc_default + greedy_t)
    old_h = (EPOCHS_XE * (xe_batches * xe_old + valid_old) + EPOCHS_RL * (rl_batches * scst_old + valid_rl_old)) / 3600
    new_h = (EPOCHS_XE * (xe_batches * xe_new + valid_new)
             + EPOCHS_RL * (rl_batches * scst_bucket + valid_rl_new)) / 3600
    print(f"projected full Clotho ({CLOTHO_DEV_CLIPS} clips x {CAPTIONS_PER_CLIP} captions, "
          f"{EPOCHS_XE} XE + {EPOCHS_RL} SCST epochs of rl_unit {args.rl_unit}, validation on {CLOTHO_VALID_CLIPS} "
          f"clips each epoch):")
    print(f"  old paths (random batches, packed BiGRU, separate baseline encoding, validation per caption): "
          f"{old_h:.2f} h")
    print(f"  new paths (bucketed batches, split BiGRU, shared baseline encoding, one pass per clip): {new_h:.2f} h "
          f"({old_h / new_h:.2f}x)")
    print(f"  per epoch: XE {xe_batches} x {xe_new:.2f} s + valid {valid_new:.0f} s; "
          f"SCST {rl_batches} x {scst_bucket:.2f} s + valid {valid_rl_new:.0f} s")
    print(f"benchmark wall time {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
