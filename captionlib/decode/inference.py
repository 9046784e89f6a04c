"""Decode the clips of a feats.scp with one model file (or a word-level ensemble of several)
into a Kaldi-style ``text`` file, optionally with sampled captions for diversity metrics.

Outputs in ``output_dir``:

* ``text``: ``<clip-id> <caption>``, one line per clip (greedy or beam search), sorted.
* ``text_samples`` (only with ``num_diversity_samples = N > 0``): N captions per clip drawn
  by multinomial sampling at ``sample_temperature`` (seed 001 sec. 5.4, "rs": 5 random
  samples per input), among the ``sample_top_k`` most probable tokens of each step when it
  is > 0 (top-k sampling). Each sample has its own id ``<clip-id>#<k>`` with k = 1..N, so the
  file is a valid scp/text file (unique, sortable keys);
  :func:`captionlib.metrics.scorer.read_samples` groups it back
  by clip (splitting at the last ``#``). Samples of a clip depend only on ``seed`` and the
  clip id (not on the sharding or batch size): each clip's rows are drawn under
  ``torch.manual_seed(seed + crc32(clip-id))`` in a forked RNG.
* ``text_nbest`` (only with ``nbest = N > 0``): the N best hypotheses of a beam search of
  width ``max(beam_size, N)`` (seed 001 sec. 5.4, "bs": the top 5 captions of a beam of
  5), same id format, k = rank (1 = best). When ``beam_size >= N`` they come from the
  beam search of ``text`` (so ``#1`` is the ``text`` caption); otherwise (e.g. greedy
  ``text``) from a second beam search of width N.
"""

import logging
import time
import zlib
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import torch

from captionlib.data.datasets import pad_feats
from captionlib.decode.ensemble import load_ensemble
from captionlib.decode.options import check_decode_options
from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.metrics.scorer import sample_id
from captionlib.text.tokenizer import Tokenizer
from captionlib.utils.distributed import get_device
from captionlib.utils.fileio import atomic_write_text, check_writable


@torch.no_grad()
def caption_batch(
    model, tokenizer: Tokenizer, feats: torch.Tensor, lens: torch.Tensor,
    beam_size: int = 1, max_len: int = 30, length_penalty: float = 0.0, nbest: int = 0,
    nbest_scores: bool = False,
) -> Tuple[torch.Tensor, List[str], List[list]]:
    """Caption a padded batch: greedy (``beam_size`` 1) or batched beam search.

    Args:
        model: a Captioner or Ensemble in eval mode; tokenizer: its token list.
        feats: (batch, frames, n_mels) on the model's device; lens: (batch,) frames.
        nbest: N > 0 also returns the N best beam hypotheses per clip (see module docstring).
        nbest_scores: give each n-best hypothesis as ``(caption, score)``, the score the beam
            ranks by (see :func:`~captionlib.decode.search.beam_search`).

    Returns:
        The audio embeddings (batch, embed), one caption string per clip, and per clip its
        ``nbest`` best captions (or ``(caption, score)`` pairs), best first (an empty list
        when ``nbest`` is 0).
    """
    v = model.encode(feats, lens)
    ranked = None
    if beam_size > 1:
        ranked, scores = beam_search(model, v, beam_size, max_len, length_penalty, nbest=beam_size, return_scores=True)
        tokens = ranked[:, 0]
    else:
        tokens = greedy_search(model, v, max_len)
    if nbest > 0 and (ranked is None or beam_size < nbest):
        ranked, scores = beam_search(model, v, nbest, max_len, length_penalty, nbest=nbest, return_scores=True)
    nbest_caps = []
    if nbest:
        nbest_caps = [[tokenizer.ids2text(ids) for ids in rows[:nbest]] for rows in ranked.tolist()]
        if nbest_scores:
            nbest_caps = [list(zip(caps, s[:nbest])) for caps, s in zip(nbest_caps, scores.tolist())]
    return v, [tokenizer.ids2text(ids) for ids in tokens.tolist()], nbest_caps


def _format_lines(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in sorted(lines))


@torch.no_grad()
def decode_feats_scp(
    model_file: Union[str, Sequence[str]],
    feats_scp: str,
    output_dir: str,
    beam_size: int = 1,
    batch_size: int = 32,
    max_len: int = 30,
    length_penalty: float = 0.0,
    ngpu: int = 0,
    num_diversity_samples: int = 0,
    sample_temperature: float = 1.0,
    seed: int = 0,
    num_threads: int = 1,
    nbest: int = 0,
    sample_top_k: int = 0,
) -> Path:
    """Write ``<output_dir>/text`` with one caption per clip of ``feats_scp``.

    Args:
        model_file: self-describing model file (e.g. ``valid.cider_d.best.pth``), or a list
            of them: several files are decoded as a word-level
            :class:`~captionlib.decode.ensemble.Ensemble` (mean of the word probabilities).
        feats_scp: ``<clip-id> <ark/h5 location>`` lines (one shard of a dump dir).
        beam_size: 1 = greedy, else batched beam search.
        batch_size: clips decoded together; max_len: maximum tokens (eos included).
        length_penalty: beam search ranks by ``score / length ** length_penalty``.
        ngpu: 0 = CPU.
        num_diversity_samples: N > 0 also writes ``text_samples`` with N multinomial
            samples per clip (see module docstring); 0 writes none.
        sample_temperature: temperature of those samples (1.0 = the model's distribution).
        sample_top_k: K > 0 draws each token of those samples among the K most probable ones
            only (top-k sampling, Fan et al. 2018); 0 draws among all tokens.
        seed: base seed of the samples.
        nbest: N > 0 also writes ``text_nbest`` with the N best beam hypotheses per clip
            (see module docstring); 0 writes none.
        num_threads: torch intra-op threads (1: one core per job, Kaldi's habit for JOB
            arrays; several jobs with several threads each on few cores make the small
            step-wise decoding ops many times slower); 0: torch's default.

    Returns:
        Path of the written text file (``<clip-id> <caption>``, sorted).

    Raises:
        ValueError: ``output_dir/text`` cannot be written (checked first), files whose token
            lists differ (ensemble), a decoding option out of
            range (see :func:`~captionlib.decode.options.check_decode_options`), or
            features the model cannot take (wrong dimension, NaN/Inf, unreadable; the clip is
            named).
    """
    from captionlib.io.feats import FeatReader
    from captionlib.models.captioner import model_feats_dim

    check_decode_options(beam_size, batch_size, max_len, length_penalty, nbest, num_diversity_samples,
                         sample_temperature, sample_top_k)
    check_writable(Path(output_dir) / "text")  # before the decoding, not after it
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    device = get_device(ngpu)
    model, tokenizer, obj = _load_models(model_file, device)
    reader = FeatReader(feats_scp, dim=model_feats_dim(obj["model_conf"]))
    lines, sample_lines, nbest_lines = _decode_clips(
        model, tokenizer, reader, device, batch_size, beam_size, max_len, length_penalty, nbest,
        num_diversity_samples, (sample_temperature, sample_top_k), seed,
    )
    out = Path(output_dir) / "text"
    atomic_write_text(out, _format_lines(lines))
    if num_diversity_samples > 0:
        atomic_write_text(Path(output_dir) / "text_samples", _format_lines(sample_lines))
    if nbest > 0:
        atomic_write_text(Path(output_dir) / "text_nbest", _format_lines(nbest_lines))
    return out


def _decode_clips(
    model, tokenizer: Tokenizer, reader, device: torch.device, batch_size: int, beam_size: int, max_len: int,
    length_penalty: float, nbest: int, num_diversity_samples: int, sampling: Tuple[float, int], seed: int,
) -> Tuple[List[str], List[str], List[str]]:
    """Decode every clip of ``reader`` (a :class:`~captionlib.io.feats.FeatReader`) in batches
    of ``batch_size`` (other arguments as :func:`decode_feats_scp`; ``sampling`` is
    ``(sample_temperature, sample_top_k)``), logging the progress.

    Returns:
        The lines ``<clip-id> <caption>`` of ``text``, ``text_samples`` and ``text_nbest``
        (the last two empty unless asked for).
    """
    keys = list(reader.keys())
    lines: List[str] = []
    sample_lines: List[str] = []
    nbest_lines: List[str] = []
    t0 = time.time()
    for i in range(0, len(keys), batch_size):
        clips = keys[i : i + batch_size]
        feats, lens = pad_feats([reader[c] for c in clips])
        v, caps, nbest_caps = caption_batch(
            model, tokenizer, feats.to(device), lens.to(device), beam_size, max_len, length_penalty, nbest
        )
        lines += [f"{c} {cap}" for c, cap in zip(clips, caps)]
        nbest_lines += [
            f"{sample_id(c, k + 1)} {cap}" for c, cs in zip(clips, nbest_caps) for k, cap in enumerate(cs)
        ]
        if num_diversity_samples > 0:
            sample_lines += _sample_lines(
                model, v, clips, tokenizer, num_diversity_samples, max_len, sampling, seed
            )
        done = i + len(clips)
        logging.info("decoded %d/%d clips (%.1f clips/s)", done, len(keys), done / (time.time() - t0))
    return lines, sample_lines, nbest_lines


def _load_models(model_file: Union[str, Sequence[str]], device: torch.device
                 ) -> Tuple[torch.nn.Module, Tokenizer, dict]:
    """The model of one model file, or the word-level ensemble of several, on ``device`` in
    eval mode, with its tokenizer and the (first) file's dict (see
    :func:`~captionlib.decode.ensemble.load_ensemble`)."""
    files = [model_file] if isinstance(model_file, (str, Path)) else list(model_file)
    model, obj = load_ensemble([str(f) for f in files], map_location=str(device))
    model.to(device)
    if len(files) > 1:
        logging.info("word-level ensemble of %d models: %s", len(files), ", ".join(map(str, files)))
    return model, Tokenizer(obj["token_list"], bpe_proto=obj.get("bpe_proto")), obj


def _sample_lines(
    model, v: torch.Tensor, clips: Sequence[str], tokenizer: Tokenizer, n: int, max_len: int,
    sampling: Tuple[float, int], seed: int,
) -> List[str]:
    """N multinomial samples per clip at ``sampling`` = (temperature, top_k), each clip under its
    own seed (see module docstring)."""
    temperature, top_k = sampling
    out = []
    for j, clip in enumerate(clips):
        with torch.random.fork_rng(devices=[v.device] if v.device.type == "cuda" else []):
            torch.manual_seed(seed + zlib.crc32(clip.encode("utf-8")))
            rows = v[j : j + 1].expand(n, -1).contiguous()
            toks = sample(model, rows, max_len=max_len, temperature=temperature, top_k=top_k).tokens
        out += [f"{sample_id(clip, k + 1)} {tokenizer.ids2text(ids)}" for k, ids in enumerate(toks.tolist())]
    return out

