#!/usr/bin/env python3
"""Cached step-wise decoding of the Transformer decoder against recomputing the prefix at every step.

Setting (issue 24): a CoNeTTE-sized decoder (:class:`captionlib.models.transformer.TransformerDecoder`
with its defaults: 6 layers, d_model 256, 8 heads, feed-forward 2048), a 4.4k-word vocabulary
(Clotho's), a batch of 32 clips whose memory is the CRNN's frame outputs of 15-30 s clips
(256-d, 12.5 frames per second: 20 ms hop, time pooling 4), padded to the longest, and 20
tokens decoded greedily (eos ignored, so every row decodes all 20), in eval mode without
gradients. The weights are random: the cost of a step does not depend on them.

* ``recompute``: at each of the 20 steps, the whole prefix goes through ``forward_teacher``
  and the last position's logits choose the next token: a decoder without a cache, as
  CoNeTTE's greedy search runs (Labbeti/conette-audio-captioning,
  ``src/conette/nn/decoding/greedy.py``);
* ``kept_memory``: the same, but the memory's cross-attention keys/values are computed once,
  so the difference to ``cached`` is what the self-attention cache alone saves;
* ``cached``: ``first_step`` then 19 ``step`` calls, each feeding one position against the
  per-layer key/value cache (what greedy/beam search and sampling use);
* ``teacher``: one causal ``forward_teacher`` pass over the 20 chosen tokens, the floor that
  incremental decoding cannot beat (all positions at once).

The table gives the mean seconds of each (measured side by side, round robin), and the
speed-up of cached decoding over recomputation (issue 24's target: at least 3x on CPU). Both
ways must choose the same tokens; the script exits with an error if not.

Run it on an idle machine: while other processes keep the cores busy, every multi-threaded
operation waits for its threads, which costs the many small operations of a cached step far
more than the large ones of a recomputation (on this 2-core machine under recipe tests' load,
2 threads measured 1.2x to 3.0x and 1 thread 6.0x to 6.7x; the idle machine 6.7x with either).

Usage:
    python bench/bench_transformer_decode.py [--num_threads N] [--reps 3] [--batch_size 32]
        [--length 20] [--vocab 4400] [--memory_size 256] [--min_s 15] [--max_s 30] [--decoder_conf YAML]
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from captionlib.models.batch_parts import BatchParts  # noqa: E402
from captionlib.models.transformer import TransformerDecoder  # noqa: E402
from bench_train import timed_round_robin  # noqa: E402

FRAMES_PER_S = 1 / (0.02 * 4)  # egs/clotho/conf/feats_logmel.yaml hop, CRNNEncoder.time_subsampling


def get_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num_threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per measurement (after a warm-up)")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--length", type=int, default=20, help="tokens decoded per caption")
    p.add_argument("--vocab", type=int, default=4400, help="vocabulary size")
    p.add_argument("--memory_size", type=int, default=256, help="size of the encoder's frame outputs")
    p.add_argument("--min_s", type=float, default=15.0, help="shortest clip (s)")
    p.add_argument("--max_s", type=float, default=30.0, help="longest clip (s)")
    p.add_argument("--decoder_conf", default="{}",
                   help="TransformerDecoder keyword arguments (a YAML mapping), e.g. '{norm_first: true}'")
    p.add_argument("--seed", type=int, default=0)
    return p


def recompute(dec: TransformerDecoder, enc: BatchParts, length: int) -> torch.Tensor:
    """Greedy tokens (batch, length), the whole prefix recomputed at every step."""
    prefix = torch.zeros(enc.size(0), 0, dtype=torch.long)
    for _ in range(length):
        prefix = torch.cat([prefix, dec.forward_teacher(enc, prefix)[:, -1].argmax(-1, keepdim=True)], 1)
    return prefix


def recompute_kept_memory(dec: TransformerDecoder, enc: BatchParts, length: int) -> torch.Tensor:
    """:func:`recompute` with the memory's cross-attention keys/values computed once (the
    decoder's ``_start`` memoised for this call): what a cache of the words alone saves."""
    start = dec._start(enc)
    dec._start = lambda _: start  # an instance attribute over the method, removed below
    try:
        return recompute(dec, enc, length)
    finally:
        del dec._start


def cached(dec: TransformerDecoder, enc: BatchParts, length: int) -> torch.Tensor:
    """Greedy tokens (batch, length) from the key/value cache."""
    logp, state = dec.first_step(enc)
    tokens = [logp.argmax(-1)]
    for _ in range(length - 1):
        logp, state = dec.step(tokens[-1], state)
        tokens.append(logp.argmax(-1))
    return torch.stack(tokens, 1)


def main(argv=None) -> None:
    """Run the benchmark and print its table."""
    args = get_parser().parse_args(argv)
    load = os.getloadavg()[0]
    torch.set_num_threads(args.num_threads)
    torch.manual_seed(args.seed)
    t_start = time.time()
    conf = yaml.safe_load(args.decoder_conf) or {}
    dec = TransformerDecoder(args.vocab, memory_size=args.memory_size, **conf).eval()
    g = torch.Generator().manual_seed(args.seed)
    seconds = args.min_s + (args.max_s - args.min_s) * torch.rand(args.batch_size, generator=g)
    lens = (seconds * FRAMES_PER_S).long()
    memory = torch.randn(args.batch_size, int(lens.max()), args.memory_size, generator=g)
    memory = memory * (torch.arange(memory.size(1))[None, :, None] < lens[:, None, None])
    enc = BatchParts((memory.mean(1), memory, lens))
    n = args.length

    with torch.inference_mode():
        tokens = cached(dec, enc, n)
        same = all(torch.equal(f(dec, enc, n), tokens) for f in (recompute, recompute_kept_memory))
        times = timed_round_robin({
            "recompute": lambda: recompute(dec, enc, n),
            "kept_memory": lambda: recompute_kept_memory(dec, enc, n),
            "cached": lambda: cached(dec, enc, n),
            "teacher": lambda: dec.forward_teacher(enc, tokens[:, :-1]),
        }, args.reps)

    params = sum(p.numel() for p in dec.parameters())
    print(f"# bench_transformer_decode: torch {torch.__version__}, {args.num_threads} threads, {os.cpu_count()} CPUs "
          f"(1-minute load average {load:.2f} at the start); mean of {args.reps} timed repetitions")
    if load > 0.5 and args.num_threads > 1:
        print("warning: other processes were using the CPU; multi-threaded timings are then unreliable "
              "(see the module docstring; --num_threads 1 is steadier)")
    print(f"decoder: {len(dec.layers)} layers, d_model {dec.d_model}, {dec.layers[0].self_attn.num_heads} heads, "
          f"feed-forward {dec.layers[0].linear1.out_features}, vocabulary {args.vocab}: {params} parameters")
    print(f"batch {args.batch_size}, memory {memory.size(1)} frames x {args.memory_size} "
          f"({args.min_s:.0f}-{args.max_s:.0f} s clips), {n} tokens per caption; "
          f"recompute and cached choose the same tokens: {same}")
    print()
    print(f"| greedy decoding, {n} tokens | s | ms per token | vs cached |")
    print("|---|---:|---:|---:|")
    for name, what in (("recompute", "recompute the prefix at every step"),
                       ("kept_memory", "recompute the prefix, memory keys/values computed once"),
                       ("cached", "key/value cache (step)"),
                       ("teacher", "teacher-forced pass (floor)")):
        print(f"| {what} | {times[name]:.3f} | {1000 * times[name] / n:.1f} | {times[name] / times['cached']:.2f}x |")
    print()
    print(f"cached decoding is {times['recompute'] / times['cached']:.2f}x faster than recomputing the prefix "
          f"(target >= 3x), {times['kept_memory'] / times['cached']:.2f}x with the memory's keys/values kept; "
          f"benchmark wall time {time.time() - t_start:.0f} s")
    if not same:
        raise SystemExit("cached and recomputed decoding chose different tokens")


if __name__ == "__main__":
    main()
