"""Decode the clips of a feats.scp with a model file into a Kaldi-style ``text`` file."""

import logging
import time
from pathlib import Path
import torch

from captionlib.data.datasets import pad_feats
from captionlib.decode.search import beam_search, greedy_search
from captionlib.models.captioner import load_model_file
from captionlib.text.tokenizer import Tokenizer
from captionlib.train.checkpoint import atomic_write_text
from captionlib.train.trainer import get_device


@torch.no_grad()
def decode_feats_scp(
    model_file: str,
    feats_scp: str,
    output_dir: str,
    beam_size: int = 1,
    batch_size: int = 32,
    max_len: int = 30,
    length_penalty: float = 0.0,
    ngpu: int = 0,
) -> Path:
    """Write ``<output_dir>/text`` with one caption per clip of ``feats_scp``.

    Args:
        model_file: self-describing model file (e.g. ``valid.cider_d.best.pth``).
        feats_scp: ``<clip-id> <ark/h5 location>`` lines (one shard of a dump dir).
        beam_size: 1 = greedy, else batched beam search.
        batch_size: clips decoded together; max_len: maximum tokens (eos included).

    Returns:
        Path of the written text file (``<clip-id> <caption>``, sorted).
    """
    from captionlib.io.feats import FeatReader

    device = get_device(ngpu)
    model, obj = load_model_file(model_file, map_location=str(device))
    model.to(device)
    tokenizer = Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto"))
    reader = FeatReader(feats_scp)
    keys = list(reader.keys())
    lines = []
    t0 = time.time()
    for i in range(0, len(keys), batch_size):
        clips = keys[i : i + batch_size]
        feats, lens = pad_feats([reader[c] for c in clips])
        v = model.encode(feats.to(device), lens.to(device))
        if beam_size > 1:
            tokens = beam_search(model, v, beam_size, max_len, length_penalty)
        else:
            tokens = greedy_search(model, v, max_len)
        lines += [f"{c} {tokenizer.ids2text(ids)}" for c, ids in zip(clips, tokens.tolist())]
        done = i + len(clips)
        logging.info("decoded %d/%d clips (%.1f clips/s)", done, len(keys), done / (time.time() - t0))
    out = Path(output_dir) / "text"
    atomic_write_text(out, "".join(line + "\n" for line in sorted(lines)))
    return out

