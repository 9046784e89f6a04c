#!/usr/bin/env python3
"""An XE update of the DCASE 2024 baseline with its frozen audio ConvNeXt inside the model
against the same update on the ConvNeXt's frame outputs computed once (``--feats_type
pretrained``, stage 2).

Setting: the two XE configs of ``egs/clotho/conf`` with the DCASE 2024 task 6 baseline's model,
``train_xe_convnext_transformer.yaml`` (``encoder: convnext``, frozen: its forward pass runs in
eval mode in every step) and ``train_xe_linear_transformer.yaml`` (``encoder: linear``, the
baseline's frame projection, on the 768-d frames of ``conf/feats_pretrained_convnext.yaml``);
the same 6-layer Transformer decoder, AdamW, a Clotho-sized vocabulary (4.4k words); a batch
of ``--batch_size`` clips of 15-30 s (uniform), 224 mel bands at a 10 ms hop, padded to the
longest (the frames: one per 32 log-mel frames), captions of 8-20 tokens. The weights and
features are random: the cost of an update does not depend on their values. An update is
forward, label-smoothed cross-entropy, backward and the optimizer step. The frozen encoder's
own dump cost (once per clip, stage 2) is timed too: one encoder forward pass of the batch.

The table gives the mean seconds of each (side by side, round robin; ``--device cuda`` on a
GPU synchronises each timing) and how many times cheaper the update on dumped frames is.

Usage:
    python bench/bench_frozen_encoder.py [--device cpu|cuda] [--reps 3] [--batch_size 32] [--num_threads N]
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

from captionlib.models.captioner import build_model, xe_loss, xe_targets  # noqa: E402
from captionlib.train.xe import split_encoder_conf  # noqa: E402
from bench_train import timed_round_robin  # noqa: E402

CONF = HERE.parent / "egs" / "clotho" / "conf"
HOP_S = 0.01  # conf/feats_convnext.yaml
N_MELS = 224
VOCAB = 4400


def get_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:N)")
    p.add_argument("--num_threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per measurement (after a warm-up)")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--min_s", type=float, default=15.0, help="shortest clip (s)")
    p.add_argument("--max_s", type=float, default=30.0, help="longest clip (s)")
    p.add_argument("--seed", type=int, default=0)
    return p


def model_and_optimizer(config: str, feats_dim: int, device: torch.device):
    """The Captioner of an XE config (``encoder_conf``'s trainer keys left out; a frozen
    encoder's parameters without gradients and in eval mode, as XE trains it) and AdamW."""
    conf = yaml.safe_load((CONF / config).read_text())
    enc_conf, training = split_encoder_conf(conf.get("encoder_conf"))
    model = build_model({"vocab_size": VOCAB, "feats_dim": feats_dim, "encoder": conf["encoder"],
                         "encoder_conf": enc_conf, "decoder": conf["decoder"],
                         "decoder_conf": conf["decoder_conf"]}).to(device)
    model.train()
    if training.frozen(1):
        model.set_encoder_frozen(True)
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=conf["lr"], weight_decay=conf["weight_decay"]), conf


def xe_update(model, opt, feats, lens, ys, ys_lens, smoothing):
    """One XE update: forward, loss, backward, optimizer step."""
    opt.zero_grad(set_to_none=True)
    loss = xe_loss(model(feats, lens, ys), xe_targets(ys, ys_lens, VOCAB - 1), smoothing)
    loss.backward()
    opt.step()


def main(argv=None) -> None:
    """Build both models and a batch, time the updates, print the table."""
    args = get_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    if args.num_threads > 0:
        torch.set_num_threads(args.num_threads)
    device = torch.device(args.device)
    t_start = time.time()
    in_model, opt_a, conf = model_and_optimizer("train_xe_convnext_transformer.yaml", N_MELS, device)
    on_frames, opt_b, _ = model_and_optimizer("train_xe_linear_transformer.yaml", in_model.encoder.output_size, device)
    b = args.batch_size
    lens = (torch.empty(b).uniform_(args.min_s, args.max_s) / HOP_S).long() + 1
    feats = torch.randn(b, int(lens.max()), N_MELS, device=device) * 10 - 40  # dB-like log-mel
    lens = lens.to(device)
    with torch.no_grad():  # the dump: the frozen encoder's frame outputs (zero past each clip's frames)
        _, frames = in_model.encoder(feats, lens)
    frame_lens = in_model.encoder.output_lengths(lens, feats.size(1))
    ys_lens = torch.randint(8, 21, (b,), device=device)
    ys = torch.randint(1, VOCAB - 1, (b, int(ys_lens.max())), device=device)
    ys = ys * (torch.arange(ys.size(1), device=device)[None] < ys_lens[:, None])
    smoothing = conf.get("label_smoothing", 0.0)

    def dump():
        with torch.no_grad():
            in_model.encoder(feats, lens)

    t = timed_round_robin({
        "in_model": lambda: xe_update(in_model, opt_a, feats, lens, ys, ys_lens, smoothing),
        "on_frames": lambda: xe_update(on_frames, opt_b, frames, frame_lens, ys, ys_lens, smoothing),
        "dump": dump,
    }, args.reps)
    print(f"# bench_frozen_encoder: torch {torch.__version__}, device {device}, {args.num_threads} threads; "
          f"batch {b} clips of {args.min_s:g}-{args.max_s:g} s (padded to {feats.size(1) * HOP_S:.1f} s, "
          f"{feats.size(1)} log-mel frames, {frames.size(1)} encoder frames); mean of {args.reps} after a warm-up")
    print()
    print("| what | s |")
    print("|---|---:|")
    print(f"| XE update, frozen ConvNeXt in the model (train_xe_convnext_transformer.yaml) | {t['in_model']:.3f} |")
    print(f"| XE update on its dumped frames (train_xe_linear_transformer.yaml) | {t['on_frames']:.3f} |")
    print(f"| the dump of the batch's frames (one encoder forward pass, once per clip) | {t['dump']:.3f} |")
    print()
    print(f"the update on dumped frames is {t['in_model'] / t['on_frames']:.1f}x cheaper; the dump costs "
          f"{t['dump'] / t['on_frames']:.1f} such updates, once")
    print(f"benchmark wall time {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
