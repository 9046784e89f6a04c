#!/usr/bin/env python3
"""captionlib's BEATs (``encoder: beats``) against the authors' own code, on real Clotho clips.

The authors' code is not part of captionlib: give a checkout of github.com/microsoft/unilm's
``beats/`` directory (``BEATs.py``, ``backbone.py``, ``modules.py``) with ``--authors_dir``; it
is imported from there and run as it is. Its ``BEATs.preprocess`` calls
``torchaudio.compliance.kaldi.fbank``; where torchaudio does not import (no CPU build here),
a stand-in module gives it :class:`captionlib.audio.features.KaldiFbank` instead, and the
output says so. Where torchaudio imports, our fbank is compared with torchaudio's too.

Weights: ``--checkpoint`` (a published file, e.g. ``BEATs_iter3_plus_AS2M_finetuned_on_AS2M_cpt2.pt``)
is loaded into both models, or else the authors' ``BEATs(BEATsConfig(cfg))`` is built with
random weights (the published architecture with ``--full``, a small one by default; every
tensor moved from the authors' initial values, so that biases and gates count), saved in
their layout and loaded by :func:`captionlib.models.beats.load_pretrained` (strict). Each
clip's first ``--seconds`` seconds (16 kHz) go through both; printed per clip: the largest
difference of the last layer's tokens over their largest value, of the clip probabilities
(fine-tuned models) and of the fbank (with torchaudio). Exit status 1 when the tokens differ
by more than ``--tolerance``.

Usage:
    python bench/compare_beats_authors.py --authors_dir /path/to/unilm/beats [--full]
        [--checkpoint BEATs_iter3_plus_AS2M_finetuned_on_AS2M_cpt2.pt] [--clips 2] [--seconds 10]
"""

import argparse
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from captionlib.audio.features import KaldiFbank  # noqa: E402
from captionlib.audio.io import load_audio  # noqa: E402
from captionlib.models.beats import FRONT_END, BEATsEncoder, load_pretrained  # noqa: E402

SHARED = HERE.parent.parent / "shared" / "data"
#: a small architecture (the keys of the authors' BEATsConfig) for a quick run
SMALL = dict(embed_dim=32, encoder_layers=2, encoder_embed_dim=48, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
             conv_pos=16, conv_pos_groups=4, num_buckets=64, max_distance=100, predictor_class=5)
PUBLISHED = dict(input_patch_size=16, embed_dim=512, conv_bias=False, encoder_layers=12, encoder_embed_dim=768,
                 encoder_ffn_embed_dim=3072, encoder_attention_heads=12, activation_fn="gelu", layer_norm_first=False,
                 deep_norm=True, conv_pos=128, conv_pos_groups=16, relative_position_embedding=True, num_buckets=320,
                 max_distance=800, gru_rel_pos=True, finetuned_model=True, predictor_class=527, dropout=0.0,
                 attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0, dropout_input=0.0)
ARCH = ("embed_dim", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads",
        "conv_pos", "conv_pos_groups", "num_buckets", "max_distance")


def get_parser() -> argparse.ArgumentParser:
    """The options of this script."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--authors_dir", required=True, help="the authors' beats/ directory (BEATs.py, backbone.py, ...)")
    p.add_argument("--checkpoint", default=None, help="a published checkpoint (default: random weights)")
    p.add_argument("--full", action="store_true", help="random weights in the published architecture")
    p.add_argument("--data", default=str(SHARED), help="the shared data dir (clotho_subset)")
    p.add_argument("--clips", type=int, default=2, help="Clotho clips compared")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of each clip (16 kHz)")
    p.add_argument("--tolerance", type=float, default=1e-5, help="largest relative token difference allowed")
    return p


def import_authors(authors_dir: str, fbank: KaldiFbank):
    """The authors' ``BEATs`` and ``BEATsConfig`` from ``authors_dir``, and whether torchaudio's
    fbank is theirs (``False``: the stand-in giving ``fbank`` to their ``preprocess``)."""
    try:
        import torchaudio.compliance.kaldi  # noqa: F401

        real = True
    except Exception:  # no build for this torch (ImportError, OSError from its C++ library, ...)
        real = False
        kaldi = types.ModuleType("torchaudio.compliance.kaldi")
        kaldi.fbank = lambda wave, **_: torch.from_numpy(fbank(wave[0].numpy() / 32768.0, 16000))
        package, compliance = types.ModuleType("torchaudio"), types.ModuleType("torchaudio.compliance")
        package.compliance, compliance.kaldi = compliance, kaldi
        sys.modules.update({"torchaudio": package, "torchaudio.compliance": compliance,
                            "torchaudio.compliance.kaldi": kaldi})
    if not (Path(authors_dir) / "BEATs.py").is_file():
        raise SystemExit(f"{authors_dir}: no BEATs.py (give the beats/ directory of github.com/microsoft/unilm)")
    sys.path.insert(0, str(Path(authors_dir).resolve()))
    from BEATs import BEATs, BEATsConfig  # the authors' code

    return BEATs, BEATsConfig, real


def build_pair(BEATs, BEATsConfig, args, workdir: Path):
    """The authors' model and ours, with the same weights (see the module docstring)."""
    if args.checkpoint:
        ckpt = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        path, cfg = args.checkpoint, dict(ckpt["cfg"])
    else:
        cfg = dict(PUBLISHED, **({} if args.full else SMALL))
        torch.manual_seed(0)
        model = BEATs(BEATsConfig(cfg))
        with torch.no_grad():  # their init leaves biases 0, LayerNorms 1 and the gates' grep_a 1: move every tensor
            for name, param in model.named_parameters():
                scale = 1.0 if "grep_a" in name or "relative_attention" in name else 0.02
                param.add_(torch.randn(param.shape) * scale)
        ckpt = {"cfg": cfg, "model": model.state_dict()}
        path = str(workdir / "beats_random.pt")
        torch.save(ckpt, path)
    theirs = BEATs(BEATsConfig(cfg))
    theirs.load_state_dict(ckpt["model"])
    classes = cfg.get("predictor_class", 527) if cfg.get("finetuned_model") else 0
    ours = BEATsEncoder(**{k: cfg[k] for k in ARCH if k in cfg}, classes_num=classes)
    load_pretrained(ours, path, FRONT_END)
    return theirs.eval(), ours.eval()


def compare_clip(theirs, ours, fbank: KaldiFbank, wave: np.ndarray, real_torchaudio: bool) -> dict:
    """Differences of one clip's tokens, clip probabilities and (with torchaudio) fbank."""
    x = torch.from_numpy(np.asarray(wave, dtype=np.float32))[None]
    feats = torch.from_numpy(fbank(wave, 16000))[None]
    with torch.no_grad():
        head, theirs.predictor = theirs.predictor, None
        tokens_theirs, _ = theirs.extract_features(x)
        theirs.predictor = head
        tokens, _ = ours.tokens(feats, torch.tensor([feats.size(1)]))
        tokens = tokens.flatten(1, 2)
        out = {"tokens": tuple(tokens.shape[1:]),
               "tokens_rel": float((tokens - tokens_theirs).abs().max() / tokens_theirs.abs().max())}
        if head is not None:
            probs_theirs, _ = theirs.extract_features(x)
            probs = torch.sigmoid(ours.predictor(tokens).mean(dim=1))
            out["probs_abs"] = float((probs - probs_theirs).abs().max())
        if real_torchaudio:
            ref = theirs.preprocess(x)[0] * (2 * 6.55582) + 15.41663  # their fbank before normalising
            out["fbank_abs"] = float((feats[0] - ref).abs().max())
    return out


def main(argv=None) -> int:
    """Run the comparison and print one line per clip; returns the exit status."""
    args = get_parser().parse_args(argv)
    fbank = KaldiFbank(n_mels=128)
    BEATs, BEATsConfig, real = import_authors(args.authors_dir, fbank)
    print(f"authors' code: {args.authors_dir}; fbank: {'torchaudio' if real else 'captionlib KaldiFbank (stand-in)'}")
    clips = sorted((Path(args.data) / "clotho_subset").glob("*/*.wav"))[:args.clips]
    if not clips:
        raise SystemExit(f"{args.data}/clotho_subset: no clips")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        theirs, ours = build_pair(BEATs, BEATsConfig, args, Path(tmp))
        print(f"weights: {args.checkpoint or ('random, published architecture' if args.full else 'random, small')}; "
              f"{sum(p.numel() for p in ours.parameters()):,} parameters; loaded strictly into ours")
        for clip in clips:
            wave, _ = load_audio(clip, fs=16000)
            d = compare_clip(theirs, ours, fbank, wave[:int(args.seconds * 16000)], real)
            worst = max(worst, d["tokens_rel"])
            print(f"{clip.name[:40]:40s} tokens {d['tokens']}: max |diff| / max |theirs| {d['tokens_rel']:.2e}"
                  + (f"; clip probabilities max |diff| {d['probs_abs']:.2e}" if "probs_abs" in d else "")
                  + (f"; fbank max |diff| {d['fbank_abs']:.2e}" if "fbank_abs" in d else ""))
    ok = worst <= args.tolerance
    print(f"{'same' if ok else 'DIFFERENT'}: largest relative token difference {worst:.2e} "
          f"(tolerance {args.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
