"""Decode the clips of a feats.scp with one model file (or a word-level ensemble of several)
into a Kaldi-style ``text`` file, optionally with sampled captions for diversity metrics.

Outputs in ``output_dir``:

* ``text``: ``<clip-id> <caption>``, one line per clip (greedy or beam search), sorted.
* ``text_samples`` (only with ``num_diversity_samples = N > 0``): N captions per clip drawn
  by multinomial sampling at ``sample_temperature`` (seed 001 sec. 5.4, "rs": 5 random
  samples per input), among the ``sample_top_k`` most probable tokens of each step when it
  is > 0 (top-k sampling), and among the smallest set of most probable tokens whose
  probability reaches ``sample_top_p`` when it is < 1 (nucleus sampling, Holtzman et al.
  2020; both: top-k first). Each sample has its own id ``<clip-id>#<k>`` with k = 1..N, so the
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
* ``text_unranked`` (only with ``rerank = N > 0``): the beam/greedy caption, while ``text``
  holds the re-ranked choice among it and N samples per clip (below); ``rerank = 0``, the
  default, writes ``text`` as without the option.

Re-ranked decoding (``rerank``, :func:`~captionlib.decode.rerank.mbr_select`). The N samples of a clip are drawn as
those of ``text_samples`` (same per-clip seeds and sampling options; with
``num_diversity_samples = N`` they are those very samples). Of these N + 1 candidates
(the beam/greedy caption first) ``decode_feats_scp`` writes as ``text`` the one
of least expected loss when the other candidates stand for the unknown
references (MBR, Kumar and Byrne 2004, "Minimum Bayes-Risk Decoding for Statistical Machine
Translation"), the utility being CIDEr-D: the candidate with the highest mean CIDEr-D against
the clip's other candidates (:func:`~captionlib.decode.rerank.consensus_cider_d`), i.e. the consensus caption. Drawing
several captions and re-ranking them is the practice of recent audio captioning systems (the
DCASE 2023 task 6a winner, Wu et al., nucleus sampling then re-ranking; EnCLAP++, sampling then
re-ranking). Optionally the decoder's length-normalised log-likelihood of a candidate
(:func:`~captionlib.decode.rerank.sequence_logprobs`) is added with a weight.

CIDEr-D's document frequencies come from the candidates themselves, as a consensus CIDEr-D
needs (no references exist at decoding time): one document per clip, holding all of that
clip's candidates, over the clips scored together (:func:`~captionlib.decode.rerank.consensus_cider_d`; in
``decode_feats_scp``, every clip of the feats.scp). A single clip is one document: every idf
is then 0, every CIDEr-D 0, and the choice falls to the log-likelihood term, else to the first
candidate.
"""

import itertools
import logging
import time
import zlib
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import torch

from captionlib.data.datasets import pad_feats
from captionlib.decode.ensemble import load_ensemble
from captionlib.decode.options import check_decode_options
from captionlib.decode.rerank import mbr_select, sequence_logprobs
from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.metrics.scorer import sample_id
from captionlib.text.tokenizer import Tokenizer
from captionlib.utils.distributed import get_device
from captionlib.utils.fileio import atomic_write_text, check_writable


@torch.no_grad()
def caption_batch(
    model, tokenizer: Tokenizer, feats: torch.Tensor, lens: torch.Tensor,
    beam_size: int = 1, max_len: int = 30, length_penalty: float = 0.0, nbest: int = 0,
    nbest_scores: bool = False, return_tokens: bool = False,
) -> Tuple[torch.Tensor, List[str], List[list]]:
    """Caption a padded batch: greedy (``beam_size`` 1) or batched beam search.

    Args:
        model: a Captioner or Ensemble in eval mode; tokenizer: its token list.
        feats: (batch, frames, n_mels) on the model's device; lens: (batch,) frames.
        nbest: N > 0 also returns the N best beam hypotheses per clip (see module docstring).
        nbest_scores: give each n-best hypothesis as ``(caption, score)``, the score the beam
            ranks by (see :func:`~captionlib.decode.search.beam_search`).
        return_tokens: also return the captions' ids (batch, length), eos included, 0 after it.

    Returns:
        The audio embeddings (batch, embed), one caption string per clip, and per clip its
        ``nbest`` best captions (or ``(caption, score)`` pairs), best first (an empty list
        when ``nbest`` is 0); with ``return_tokens``, the ids as a fourth item.
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
    caps = [tokenizer.ids2text(ids) for ids in tokens.tolist()]
    return (v, caps, nbest_caps, tokens) if return_tokens else (v, caps, nbest_caps)


def _format_lines(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in sorted(lines))


@torch.no_grad()
def decode_feats_scp(
    model_file: Union[str, Sequence[str]],
    feats_scp: str,
    output_dir: str,
    beam_size: int = 1, batch_size: int = 32, max_len: int = 30, length_penalty: float = 0.0, ngpu: int = 0,
    num_diversity_samples: int = 0, sample_temperature: float = 1.0, seed: int = 0, num_threads: int = 1,
    nbest: int = 0, sample_top_k: int = 0, sample_top_p: float = 1.0,
    rerank: int = 0, rerank_lm_weight: float = 0.0, rerank_fluency_weight: float = 0.0,
    fluency_model: Optional[str] = None,
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
        ngpu: 0 = CPU. num_diversity_samples: N > 0 also writes ``text_samples`` with N
            multinomial samples per clip (see module docstring); 0 writes none.
        sample_temperature: temperature of those samples (1.0 = the model's distribution).
        sample_top_k: K > 0 draws each token of those samples among the K most probable ones
            only (top-k sampling, Fan et al. 2018); 0 draws among all tokens.
        sample_top_p: P < 1 draws among the smallest set of most probable tokens reaching P
            (nucleus sampling, Holtzman et al. 2020); 1 (the default): all tokens. In (0, 1].
        rerank: N > 0 writes as ``text`` the minimum-Bayes-risk choice (consensus CIDEr-D) among N
            samples and the beam/greedy caption, that caption as ``text_unranked`` (module docstring).
        rerank_lm_weight: weight of a candidate's length-normalised log-likelihood in its re-ranking
            score (0: CIDEr-D consensus alone); rerank_fluency_weight: subtracted from the score of
            a candidate the fluency detector of ``fluency_model`` (else the rule checks) flags.
        seed: base seed of the samples.
        nbest: N > 0 also writes ``text_nbest`` with the N best beam hypotheses per clip
            (see module docstring); 0 writes none.
        num_threads: torch intra-op threads (1: one core per job, Kaldi's habit for JOB arrays, as
            several threads per job on few cores slow the step-wise ops many times); 0: torch's.

    Returns:
        Path of the written text file (``<clip-id> <caption>``, sorted).

    Raises:
        ValueError: ``output_dir/text`` cannot be written (checked first), files whose token lists
            differ (ensemble), a decoding option out of range (:func:`~captionlib.decode.options.
            check_decode_options`), or features the model cannot take (the clip is named).
    """
    from captionlib.io.feats import FeatReader
    from captionlib.models.captioner import model_feats_dim

    check_decode_options(beam_size, batch_size, max_len, length_penalty, nbest, num_diversity_samples,
                         sample_temperature, sample_top_k, sample_top_p, rerank, rerank_lm_weight,
                         rerank_fluency_weight)
    check_writable(Path(output_dir) / "text")  # before the decoding, not after it
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    device = get_device(ngpu)
    model, tokenizer, obj = _load_models(model_file, device)
    reader = FeatReader(feats_scp, dim=model_feats_dim(obj["model_conf"]))
    lines, sample_lines, nbest_lines, unranked_lines = _decode_clips(
        model, tokenizer, reader, device, batch_size, beam_size, max_len, length_penalty, nbest,
        num_diversity_samples, (sample_temperature, sample_top_k, sample_top_p), seed, rerank, rerank_lm_weight,
        rerank_fluency_weight, fluency_model,
    )
    outputs = {"text": lines, "text_unranked": unranked_lines if rerank > 0 else None,
               "text_samples": sample_lines if num_diversity_samples > 0 else None,
               "text_nbest": nbest_lines if nbest > 0 else None}
    for name, content in outputs.items():
        if content is not None:
            atomic_write_text(Path(output_dir) / name, _format_lines(content))
    return Path(output_dir) / "text"


def _decode_clips(
    model, tokenizer: Tokenizer, reader, device: torch.device, batch_size: int, beam_size: int, max_len: int,
    length_penalty: float, nbest: int, num_diversity_samples: int, sampling: Tuple[float, int, float], seed: int,
    rerank: int = 0, rerank_lm_weight: float = 0.0, rerank_fluency_weight: float = 0.0,
    fluency_model: Optional[str] = None,
) -> Tuple[List[str], List[str], List[str], List[str]]:
    """Decode every clip of ``reader`` (a :class:`~captionlib.io.feats.FeatReader`) in batches
    of ``batch_size`` (other arguments as :func:`decode_feats_scp`; ``sampling`` is
    ``(sample_temperature, sample_top_k, sample_top_p)``), logging the progress; with
    ``rerank`` > 0, the candidates of all clips are re-ranked at the end in one scoring call.

    Returns:
        The lines ``<clip-id> <caption>`` of ``text``, ``text_samples``, ``text_nbest`` and
        ``text_unranked`` (the last three empty unless asked for).
    """
    keys = list(reader.keys())
    lines: List[str] = []
    sample_lines: List[str] = []
    nbest_lines: List[str] = []
    candidates: List[List[str]] = []  # with rerank: per clip, the beam/greedy caption then the samples
    lm_scores: List[List[float]] = []
    t0 = time.time()
    for i in range(0, len(keys), batch_size):
        clips = keys[i : i + batch_size]
        feats, lens = pad_feats([reader[c] for c in clips])
        v, caps, nbest_caps, tokens = caption_batch(
            model, tokenizer, feats.to(device), lens.to(device), beam_size, max_len, length_penalty, nbest,
            return_tokens=True,
        )
        lines += [f"{c} {cap}" for c, cap in zip(clips, caps)]
        nbest_lines += [
            f"{sample_id(c, k + 1)} {cap}" for c, cs in zip(clips, nbest_caps) for k, cap in enumerate(cs)
        ]
        samples = None
        if num_diversity_samples > 0:
            samples = _clip_samples(model, v, clips, num_diversity_samples, max_len, sampling, seed)
            sample_lines += [f"{sample_id(clip, k + 1)} {tokenizer.ids2text(ids)}"
                             for clip, toks in zip(clips, samples) for k, ids in enumerate(toks.tolist())]
        if rerank > 0:
            cands, lms = rerank_candidates(model, tokenizer, v, tokens, caps, clips, rerank, max_len, sampling, seed,
                                           rerank_lm_weight, samples if rerank == num_diversity_samples else None)
            candidates += cands
            lm_scores += lms
        done = i + len(clips)
        logging.info("decoded %d/%d clips (%.1f clips/s)", done, len(keys), done / (time.time() - t0))
    if rerank <= 0 or not keys:
        return lines, sample_lines, nbest_lines, []
    flags = None
    if rerank_fluency_weight:  # the fluency detector of fluency_model, else the rule checks
        from captionlib.metrics.fluency import FluencyDetector, fluency_flags

        flat = fluency_flags([c.split() for cands in candidates for c in cands],
                             FluencyDetector.load(fluency_model) if fluency_model else None)
        ends = list(itertools.accumulate(len(cands) for cands in candidates))
        flags = [flat[e - len(cands):e] for e, cands in zip(ends, candidates)]
    chosen, _ = mbr_select(candidates, lm_scores or None, rerank_lm_weight, flags, rerank_fluency_weight)
    logging.info("re-ranked %d candidates per clip: %d of %d clips changed caption", rerank + 1,
                 sum(k > 0 and cands[k] != cands[0] for k, cands in zip(chosen, candidates)), len(keys))
    ranked = [f"{c} {cands[k]}" for c, cands, k in zip(keys, candidates, chosen)]
    return ranked, sample_lines, nbest_lines, lines


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


def _clip_samples(
    model, v: torch.Tensor, clips: Sequence[str], n: int, max_len: int, sampling: Tuple[float, int, float],
    seed: int,
) -> List[torch.Tensor]:
    """N samples per clip at ``sampling`` = (temperature, top_k, top_p), each clip under its own
    seed (see module docstring): per clip, (n, length) ids, eos included, 0 after it."""
    temperature, top_k, top_p = sampling
    out = []
    for j, clip in enumerate(clips):
        with torch.random.fork_rng(devices=[v.device] if v.device.type == "cuda" else []):
            torch.manual_seed(seed + zlib.crc32(clip.encode("utf-8")))
            rows = v[j : j + 1].expand(n, -1).contiguous()
            out.append(sample(model, rows, max_len=max_len, temperature=temperature, top_k=top_k, top_p=top_p).tokens)
    return out


def rerank_candidates(
    model, tokenizer: Tokenizer, v: torch.Tensor, tokens: torch.Tensor, captions: Sequence[str], clips: Sequence[str],
    n: int, max_len: int, sampling: Tuple[float, int, float], seed: int, lm_weight: float,
    drawn: Optional[List[torch.Tensor]] = None,
) -> Tuple[List[List[str]], List[List[float]]]:
    """The re-ranking candidates of a batch of clips (``--rerank n``): per clip its beam/greedy
    caption (``captions``, ids ``tokens`` (batch, length)) then ``n`` samples drawn under the
    clip's own seed (``drawn``: already drawn ones, as ``text_samples``), and with ``lm_weight``
    their length-normalised log-likelihoods; to :func:`~captionlib.decode.rerank.mbr_select`
    once every clip has its candidates (its document frequencies span the clips).

    Args:
        model, tokenizer: the decoder and its tokens; v: (batch, ...) the clips' encodings.
        clips: ids seeding each clip's samples (a clip id, a file path).
        sampling: (temperature, top_k, top_p) of the samples.

    Returns:
        (per clip its candidate captions, per clip their log-likelihoods or ``[]`` without
        ``lm_weight``).
    """
    drawn = drawn if drawn is not None else _clip_samples(model, v, clips, n, max_len, sampling, seed)
    candidates = [[cap] + [tokenizer.ids2text(ids) for ids in toks.tolist()] for cap, toks in zip(captions, drawn)]
    return candidates, (_candidate_logprobs(model, v, tokens, drawn) if lm_weight else [])


def _candidate_logprobs(model, v: torch.Tensor, tokens: torch.Tensor, drawn: Sequence[torch.Tensor]
                        ) -> List[List[float]]:
    """Per clip, the length-normalised log-likelihood of its candidates: the caption ``tokens[j]``
    then the samples ``drawn[j]`` (n, length), all rows of the batch in one teacher-forced pass."""
    width = max([tokens.size(1)] + [d.size(1) for d in drawn])
    rows = torch.cat([torch.nn.functional.pad(x, (0, width - x.size(1)))
                      for j, d in enumerate(drawn) for x in (tokens[j : j + 1], d)])
    per_clip = 1 + drawn[0].size(0)
    scores = sequence_logprobs(model, v.repeat_interleave(per_clip, 0), rows)
    return scores.view(len(drawn), per_clip).tolist()
