#!/usr/bin/env python3
"""captionlib against a peer toolkit's own code: the same model and batch, time ratios and equality checks.

Peer: **CoNeTTE** (Labbé et al. 2024; the DCASE 2024 task 6 baseline has the same decoder),
``--conette DIR``: the unpacked sdist of ``pip download --no-deps conette==0.3.2`` (or a
checkout of github.com/Labbeti/conette-audio-captioning); ``make peers`` puts it in
``tools/peers/`` and installs its one extra dependency, ``torchoutil``, into tools/venv.
Its modules are imported from ``DIR/src/conette`` and run as they are; only the package's
``__init__`` is not run, since it imports the Hugging Face model (transformers, the hub),
which the decoder does not use. Its frame projection (``build_proj_lin`` of
``pl_modules/common.py``: dropout 0.5, linear 768 -> 256, ReLU, dropout 0.5) is rebuilt here
with the same layers, because that module imports pytorch_lightning and nltk.

The model on both sides: CoNeTTE's decoder (6 post-norm layers, d_model 256, 8 heads,
feed-forward 2048, GELU, sinusoidal positions, dropout 0.2), ours a
:class:`~captionlib.models.captioner.Captioner` of ``encoder: linear`` (768 -> 256, ReLU,
dropout 0.5) and ``decoder: transformer`` with those sizes; our weights are copied into
theirs (their output bias of the padding token set to -1e9: ours never emits it). The
memory has ConvNeXt-Tiny's frame outputs' sizes (768-d, one frame per 0.32 s, as
``captionlib.models.convnext`` and CoNeTTE's ``lin768`` projection): the real log-mel
frames of ``../shared/data/clotho_subset`` tiled to Clotho's clip lengths (15-30 s, as
``bench_train.py``), averaged over 0.32 s and mapped to 768-d by a fixed random
projection (the timings depend on the sizes; the equality checks hold for any values).
The captions are real Clotho development captions (4.4k words). Before anything is
timed, the decoder is trained for ``--warm_up_steps`` XE steps on those captions so that
its captions end like real ones.

Rows, each timed round robin in one process (``bench_train.timed_round_robin``):

* ``XE update``: forward, backward and an AdamW step on 32 captions (theirs:
  ``teacher_forcing`` + ``nn.CrossEntropyLoss(ignore_index=pad)``, as their
  ``training_step`` without mixup; ours: ``xe_loss``);
* ``greedy decoding, 32 clips`` (theirs ``greedy_search``) and ``beam-5 decoding, 32
  clips`` (theirs ``generate``; ours ``beam_search`` with ``length_penalty`` 1: their beam
  ranks by the mean log-prob), at most 20 tokens each.

Checks (exit status 1 when one fails): in eval mode, the XE loss of the same batch at the
same weights (relative difference at most ``--tolerance``), and the greedy captions of
the 32 clips (all identical).

Usage:
    python bench/compare_peers.py --conette tools/peers/conette-0.3.2 [--num_threads N]
        [--reps 3] [--device cuda]
"""

import argparse
import importlib
import os
import sys
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from captionlib.data.datasets import pad_feats, pad_ids  # noqa: E402
from captionlib.decode.search import beam_search, greedy_search  # noqa: E402
from captionlib.models.captioner import Captioner, xe_loss, xe_targets  # noqa: E402
import bench_train  # noqa: E402
from bench_train import HOP_S, clotho_captions, real_features, tile, timed_round_robin  # noqa: E402

#: ConvNeXt-Tiny's frame outputs: 768-d, one per 32 input frames of 10 ms
MEMORY_SIZE, FRAME_S = 768, 0.32
#: CoNeTTE's decoder (src/conf/pl/conette.yaml; captionlib's TransformerDecoder defaults)
DECODER = dict(num_layers=6, d_model=256, nhead=8, dim_feedforward=2048, dropout=0.2, activation="gelu",
               norm_first=False, positional="sinusoidal")
#: their longest caption (tokens, eos included); ours decodes one more step, where it forces
#: the eos that their search leaves out at the last step, so both give the same words
MAX_TOKENS = 20
#: the modules of CoNeTTE this script runs
CONETTE_MODULES = ("nn.decoders.aac_tfmer", "nn.decoding.forcing", "nn.decoding.greedy", "nn.decoding.beam")


def get_parser() -> argparse.ArgumentParser:
    """The options of this script."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    bench_train.setup_arguments(p, os.cpu_count(), 3, "timed rounds per row (after a warm-up call of each)")
    p.add_argument("--conette", default=None,
                   help="CoNeTTE's sources: the unpacked sdist (conette-0.3.2/) or a checkout, holding src/conette")
    p.add_argument("--scp", default=None,
                   help="a checkout of self-critical.pytorch with its cider/ submodule (rows: bench/peers_scp.py)")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest relative difference of the XE losses")
    p.set_defaults(warm_up_steps=60)
    return p


def import_conette(root: Path) -> dict:
    """CoNeTTE's modules (:data:`CONETTE_MODULES`) from ``root/src/conette`` (or ``root/conette``),
    as a package whose ``__init__`` is not run.

    Raises:
        SystemExit: no CoNeTTE sources under ``root``, or a dependency (torchoutil) missing.
    """
    src = next((d for d in (root / "src" / "conette", root / "conette") if (d / "nn" / "decoders").is_dir()), None)
    if src is None:
        raise SystemExit(f"--conette {root}: no src/conette/nn/decoders (expected the unpacked sdist of "
                         "'pip download --no-deps conette==0.3.2', or run 'make peers')")
    package = types.ModuleType("conette")
    package.__path__ = [str(src)]
    sys.modules["conette"] = package
    try:
        return {name: importlib.import_module(f"conette.{name}") for name in CONETTE_MODULES}
    except ModuleNotFoundError as e:
        raise SystemExit(f"--conette {root}: {e} (CoNeTTE's decoder needs torchoutil: 'make peers' or "
                         "'pip install torchoutil==0.3.1')") from e


class Batch:
    """32 clips of ConvNeXt-sized memory and one real caption each, on the benchmark's device.

    ``memory`` (batch, frames, 768), ``lens`` (batch,) frames, ``ys`` (batch, length) word ids
    (0-padded, no eos), ``ys_lens`` (batch,); ``tok``: the tokenizer (0 padding, last id
    eos/start); ``caps``: every development caption, for the warm-up.
    """

    def __init__(self, args):
        rng = np.random.default_rng(args.seed)
        stream, _ = real_features(Path(args.data))  # (frames, 64) at 20 ms
        self.caps = clotho_captions(Path(args.data))
        self.tok = bench_train.caption_tokenizer(self.caps)
        pool = round(FRAME_S / HOP_S)
        proj = np.random.default_rng(args.seed + 1).standard_normal((stream.shape[1], MEMORY_SIZE)) / 8.0
        seconds = rng.uniform(args.min_s, args.max_s, size=args.batch_size)
        clips = []
        for i, s in enumerate(seconds):
            frames = tile(stream, int(s / HOP_S) // pool * pool, 7919 * i)
            pooled = frames.reshape(-1, pool, frames.shape[1]).mean(1)
            clips.append(np.maximum(pooled @ proj, 0.0).astype(np.float32))
        self.memory, self.lens = (x.to(bench_train.DEVICE) for x in pad_feats(clips))
        picks = rng.integers(0, len(self.caps), size=args.batch_size)
        self.ys, self.ys_lens = (x.to(bench_train.DEVICE) for x in pad_ids(
            [np.asarray(self.tok.text2ids(" ".join(self.caps[c][0])), dtype=np.int64) for c in picks]))


def our_model(vocab_size: int, seed: int) -> Captioner:
    """Our CoNeTTE-sized captioner: linear 768 -> 256 (ReLU, dropout 0.5), Transformer decoder."""
    torch.manual_seed(seed)
    return Captioner(vocab_size, feats_dim=MEMORY_SIZE, encoder="linear", encoder_conf={"output_size": 256},
                     decoder="transformer", decoder_conf=DECODER).to(bench_train.DEVICE)


def warm_up(xe_loss_of, params, batch: Batch, steps: int, seed: int) -> None:
    """``steps`` AdamW XE steps (lr 5e-4) on random development captions over the batch's memory;
    ``xe_loss_of(ys, ys_lens)`` is a side's XE loss of those captions, ``params`` its parameters
    (the caller sets training mode). The same ``seed`` gives both sides the same captions."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(params, lr=5e-4)
    for _ in range(steps):
        picks = rng.integers(0, len(batch.caps), size=batch.memory.size(0))
        ys, ys_lens = (x.to(bench_train.DEVICE) for x in pad_ids(
            [np.asarray(batch.tok.text2ids(" ".join(batch.caps[c][c % 5])), dtype=np.int64) for c in picks]))
        optimizer_step(opt, xe_loss_of(ys, ys_lens))


def optimizer_step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """Backward ``loss`` and step ``opt`` (gradients cleared first)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def in_mode(models, train: bool, fn):
    """``fn`` wrapped to run with ``models`` in training (with gradients) or eval mode (without)."""
    def run():
        for model in models:
            model.train(train)
        with torch.set_grad_enabled(train):
            fn()
    return run


class ConetteSide(nn.Module):
    """CoNeTTE's decoder with our weights: ``build_proj_lin``'s layers, then ``AACTransformerDecoder``.

    Token ids are ours (0 padding, ``vocab_size - 1`` both start and end of caption).
    """

    def __init__(self, mods: dict, ours: Captioner):
        super().__init__()
        vocab_size, eos = ours.vocab_size, ours.eos_id
        self.mods, self.ids = mods, dict(pad_id=0, bos_id=eos, eos_id=eos, vocab_size=vocab_size)
        self.projection = nn.Sequential(nn.Dropout(0.5), nn.Linear(MEMORY_SIZE, DECODER["d_model"]), nn.ReLU(),
                                        nn.Dropout(0.5))
        self.decoder = mods["nn.decoders.aac_tfmer"].AACTransformerDecoder(
            vocab_size, bos_id=eos, eos_id=eos, pad_id=0, acti_name=DECODER["activation"],
            d_model=DECODER["d_model"], dim_feedforward=DECODER["dim_feedforward"], dropout=DECODER["dropout"],
            nhead=DECODER["nhead"], num_decoder_layers=DECODER["num_layers"])
        self.to(bench_train.DEVICE)
        with torch.no_grad():
            self.projection[1].load_state_dict(ours.encoder.proj.state_dict())
            theirs = {"emb_layer.weight": ours.decoder.embed.weight, "classifier.weight": ours.decoder.output.weight,
                      "classifier.bias": ours.decoder.output.bias}
            theirs.update({k: v for k, v in ours.decoder.state_dict().items() if k.startswith("layers.")})
            missing = set(self.decoder.state_dict()) - set(theirs) - {"pos_encoding.pos_embedding"}
            if missing:
                raise SystemExit(f"no weights of ours for CoNeTTE's {sorted(missing)}")
            for name, value in theirs.items():
                self.decoder.get_parameter(name).copy_(value)
            self.decoder.classifier.bias[0] = -1e9  # padding: never emitted, as ours

    def frames(self, memory: torch.Tensor, lens: torch.Tensor):
        """Their encoder outputs: frame_embs (batch, 256, frames), frame_embs_pad_mask (batch, frames)."""
        pad_mask = torch.arange(memory.size(1), device=memory.device)[None, :] >= lens[:, None]
        return self.projection(memory).transpose(1, 2), pad_mask

    def loss(self, memory, lens, ys, ys_lens) -> torch.Tensor:
        """Their ``training_step``'s loss (no mixup): cross-entropy of ``teacher_forcing``'s logits."""
        frame_embs, pad_mask = self.frames(memory, lens)
        eos = self.ids["eos_id"]
        caps = torch.cat([torch.full_like(ys[:, :1], eos), xe_targets(ys, ys_lens, eos)], 1)  # bos w.. eos pad..
        logits = self.mods["nn.decoding.forcing"].teacher_forcing(self.decoder, frame_embs=frame_embs,
                                                                 frame_embs_pad_mask=pad_mask, caps_in=caps[:, :-1],
                                                                 **self.ids)
        return nn.functional.cross_entropy(logits, caps[:, 1:], ignore_index=0)

    def greedy(self, memory, lens) -> torch.Tensor:
        """``greedy_search``'s tokens (batch, length)."""
        frame_embs, pad_mask = self.frames(memory, lens)
        logits = self.mods["nn.decoding.greedy"].greedy_search(self.decoder, frame_embs=frame_embs,
                                                               frame_embs_pad_mask=pad_mask,
                                                               max_pred_size=MAX_TOKENS, **self.ids)
        return logits.argmax(1)

    def beam(self, memory, lens) -> torch.Tensor:
        """``generate``'s best hypothesis (batch, length), beam 5."""
        frame_embs, pad_mask = self.frames(memory, lens)
        return self.mods["nn.decoding.beam"].generate(self.decoder, frame_embs=frame_embs,
                                                      frame_embs_pad_mask=pad_mask, beam_size=5,
                                                      max_pred_size=MAX_TOKENS, **self.ids)[0]


def words(tokens: torch.Tensor, eos: int) -> list:
    """Each row's ids up to its first eos or padding: a list of tuples."""
    out = []
    for row in tokens.tolist():
        cut = [i for i, t in enumerate(row) if t in (0, eos)]
        out.append(tuple(row[: cut[0]] if cut else row))
    return out


def checks(ours: Captioner, theirs: ConetteSide, batch: Batch, tolerance: float) -> list:
    """The equality checks, in eval mode: ``[(name, value, passed)]``."""
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        a = xe_loss(ours(batch.memory, batch.lens, batch.ys), xe_targets(batch.ys, batch.ys_lens, ours.eos_id))
        b = theirs.loss(batch.memory, batch.lens, batch.ys, batch.ys_lens)
        enc = ours.encode(batch.memory, batch.lens)
        same = [x == y for x, y in zip(words(greedy_search(ours, enc, MAX_TOKENS + 1), ours.eos_id),
                                       words(theirs.greedy(batch.memory, batch.lens), ours.eos_id))]
    diff = abs(a.item() - b.item()) / abs(b.item())
    return [(f"XE loss, same weights: {a.item():.6f} vs {b.item():.6f}", f"rel. diff {diff:.1e}", diff <= tolerance),
            ("greedy captions, same weights", f"{sum(same)}/{len(same)} clips identical", all(same))]


def rows(ours: Captioner, theirs: ConetteSide, batch: Batch, reps: int) -> list:
    """``[(row, our seconds, their seconds)]`` of the XE update and of greedy and beam-5 decoding."""
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=5e-4)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=5e-4)
    m, lens, ys, ys_lens = batch.memory, batch.lens, batch.ys, batch.ys_lens
    both = (ours, theirs)
    out = []
    t = timed_round_robin({
        "ours": in_mode(both, True, lambda: bench_train.xe_update(ours, opt_ours, m, lens, ys, ys_lens)),
        "theirs": in_mode(both, True, lambda: optimizer_step(opt_theirs, theirs.loss(m, lens, ys, ys_lens))),
    }, reps)
    out.append((f"XE update, {m.size(0)} captions", t["ours"], t["theirs"]))
    for name, mine, peer in (
            ("greedy decoding", lambda: greedy_search(ours, ours.encode(m, lens), MAX_TOKENS + 1),
             lambda: theirs.greedy(m, lens)),
            ("beam-5 decoding", lambda: beam_search(ours, ours.encode(m, lens), 5, MAX_TOKENS + 1,
                                                          length_penalty=1.0),
             lambda: theirs.beam(m, lens))):
        t = timed_round_robin({"ours": in_mode(both, False, mine), "theirs": in_mode(both, False, peer)}, reps)
        out.append((f"{name}, {m.size(0)} clips", t["ours"], t["theirs"]))
    return out


def print_tables(peer: str, rows_: list, checks_: list) -> None:
    """Print a peer's rows ``[(row, our s, their s)]`` and checks ``[(check, value, passed)]`` as tables."""
    print(f"| row | ours (s) | {peer} (s) | ours / {peer} |\n|---|---:|---:|---:|")
    for name, a, b in rows_:
        print(f"| {name} | {a:.4f} | {b:.4f} | {a / b:.2f} |")
    print("\n| check | value | passed |\n|---|---|---|")
    for name, value, passed in checks_:
        print(f"| {name} | {value} | {'yes' if passed else 'NO'} |")


def compare_conette(args, batch: Batch):
    """CoNeTTE's rows and checks (see the module docstring), with their header line."""
    mods = import_conette(Path(args.conette))
    ours = our_model(batch.tok.vocab_size, args.seed)
    ours.train()
    warm_up(lambda ys, ys_lens: xe_loss(ours(batch.memory, batch.lens, ys), xe_targets(ys, ys_lens, ours.eos_id)),
            ours.parameters(), batch, args.warm_up_steps, args.seed)
    theirs = ConetteSide(mods, ours)
    results = checks(ours, theirs, batch, args.tolerance)
    header = (f"CoNeTTE ({args.conette}): {args.batch_size} clips of {int(batch.lens.min())}-{int(batch.lens.max())} "
              f"memory frames ({MEMORY_SIZE}-d), {batch.tok.vocab_size} tokens, {args.warm_up_steps} warm-up steps")
    return header, rows(ours, theirs, batch, args.reps), results


def main(argv=None) -> int:
    """Run the comparison with each peer given, print its tables; returns 1 when an equality check fails.

    Raises:
        SystemExit: no peer given.
    """
    args = get_parser().parse_args(argv)
    if not (args.conette or args.scp):
        raise SystemExit("give at least one peer: --conette DIR and/or --scp DIR")
    bench_train.use_device(args)
    batch = Batch(args)
    print(f"captionlib against its peers: {torch.get_num_threads()} threads, {bench_train.DEVICE}")
    passed = True
    for name, given, compare in (("CoNeTTE", args.conette, compare_conette), ("SCP", args.scp, compare_scp)):
        if given:
            header, rows_, checks_ = compare(args, batch)
            print(f"\n{header}")
            print_tables(name, rows_, checks_)
            passed &= all(p for _, _, p in checks_)
    return 0 if passed else 1


def compare_scp(args, batch: Batch):
    """self-critical.pytorch's rows and checks (:mod:`peers_scp`)."""
    import peers_scp

    return peers_scp.compare(args, batch)


if __name__ == "__main__":
    sys.exit(main())
