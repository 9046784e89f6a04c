"""Greedy decoding, sampling and batched beam search over a step-wise decoder.

Works with any object exposing ``first_step(v)``, ``step(tokens, state)``,
``reorder_state(state, index)`` and ``eos_id`` (a :class:`~captionlib.models.captioner.Captioner`,
or a word-level ensemble of several). Sequences are returned as (batch, length) id
tensors padded with 0 after eos; eos itself is kept in the sequence.
"""

import contextlib
import logging
from typing import Any, Callable, Dict, Optional, Tuple

import torch

from captionlib.decode.cuda_graph import graphed_sample
from captionlib.decode.loop import (
    SampleOutput,
    _step_and_draw,
    decode_loop,
    draw_categorical,  # noqa: F401 (re-exported: the samplers of captionlib.rl use it from here)
    entropy,  # noqa: F401 (re-exported)
    trimmed,
)
from captionlib.decode.options import COMPILE_MODES
from captionlib.utils.distributed import row_sharded

# steps between the checks "has every row finished?" of :func:`sample` off the CPU (each check
# copies a flag to the host: a synchronisation that stalls the device's queue of kernels)
DEVICE_SYNC_EVERY = 4

_TRACE_BACKENDS = ("eager", "aot_eager")
# modes that replay CUDA graphs (CUDA graph trees): a replay's outputs live in the graphs' memory
# pool until a later replay reuses it
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
#: modes whose steps run eagerly in :func:`sample`'s loop (``cuda-graph`` captures the whole loop
#: instead, where it can: :mod:`captionlib.decode.cuda_graph`)
EAGER_STEP_MODES = ("none", "cuda-graph")
_COMPILED: Dict[Tuple[Callable, str], Callable] = {}
#: versions of one compiled function before dynamo refuses (its default, 8, is reached by a
#: Transformer's training and validation: modes x gradients x cache lengths)
RECOMPILE_LIMIT = 32
_EAGER_LOGGED: list = []  # the warning of compiled() under row-sharded randomness, given once


def compiled(fn: Callable, mode: str) -> Callable:
    """``fn`` compiled as one graph by ``torch.compile(fullgraph=True, dynamic=True)``
    (cached per function and mode), or ``fn`` itself for the modes of
    :data:`EAGER_STEP_MODES` (``none``, ``cuda-graph``). Call it inside
    :func:`compile_settings`.

    The decoder steps and :func:`_draw_step` are written without host synchronisation or
    data-dependent shapes, so each traces into a single graph, with the batch size and a
    Transformer cache's length as symbols (one graph serves every batch and position; but
    :func:`sample`'s ``greedy_rows``, which ``Dropout`` reads as a constant, costs versions of
    its own per value, about 3 for a Transformer);
    ``reduce-overhead`` replays it as a CUDA graph (one launch per step instead of one per
    kernel; CUDA graph trees record one per shape and call position). They start a new
    iteration at each call without a pending backward pass (greedy decoding under
    ``no_grad``) and then reuse the memory of the last one's outputs, so in the modes that
    replay CUDA graphs the outputs are cloned (:func:`_cloned`), as gpt-fast's decoding loop
    does, before the loop keeps them or feeds them to the next step. Inside
    :func:`~captionlib.utils.distributed.row_sharded_randomness` with several ranks every
    draw is a collective, so ``fn`` runs eagerly there (logged once).

    Raises:
        ValueError: ``mode`` not in :data:`~captionlib.decode.options.COMPILE_MODES`.

    The returned function raises ``torch._dynamo.exc.Unsupported`` at its first call if ``fn``
    does not trace into one graph, and ``FailOnRecompileLimitHit`` past
    :data:`RECOMPILE_LIMIT` versions (training and eval mode, with and without gradients,
    greedy or sampled, each a version).
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    if mode in EAGER_STEP_MODES:
        return fn
    if row_sharded():
        if not _EAGER_LOGGED:
            logging.warning("compile mode %s: sampling runs eagerly under row-sharded randomness (several ranks)", mode)
            _EAGER_LOGGED.append(mode)
        return fn
    key = (fn, mode)
    if key not in _COMPILED:
        graph = torch.compile(fn, fullgraph=True, dynamic=True,
                              **({"backend": mode} if mode in _TRACE_BACKENDS else {"mode": mode}))
        _COMPILED[key] = (lambda *args: _cloned(graph(*args))) if mode in CUDA_GRAPH_MODES else graph
    return _COMPILED[key]


def compile_settings(mode: str):
    """The dynamo settings of :func:`compiled` functions, as a context around the decoding
    loop (set once per loop rather than per call): ``nn.GRU``/``nn.LSTM`` traced
    (``allow_rnn``) and :data:`RECOMPILE_LIMIT`. A no-op for the modes of
    :data:`EAGER_STEP_MODES`."""
    if mode in EAGER_STEP_MODES:
        return contextlib.nullcontext()
    return torch._dynamo.config.patch(allow_rnn=True, recompile_limit=RECOMPILE_LIMIT)


def _cloned(x: Any) -> Any:
    """``x`` with every tensor cloned, through tuples and named tuples (decoder states)."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple):
        items = [_cloned(item) for item in x]
        # named tuples take fields, other tuple types (BatchParts states) one iterable
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    return x


def sample(
    model: Any,
    v: torch.Tensor,
    max_len: int = 30,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    return_states: bool = False,
    sync_every: Optional[int] = None,
    compile_mode: Optional[str] = None,
    greedy_rows: int = 0,
    top_p: float = 1.0,
) -> SampleOutput:
    """Draw one caption per row of ``v`` (multinomial, or arg-max when ``greedy``).

    Args:
        model: step-wise decoder (see module docstring).
        v: (batch, embed) audio embeddings (repeat rows to draw several samples per clip).
        max_len: maximum tokens, eos included.
        greedy: take the arg-max instead of sampling.
        temperature: divides the logits before sampling (1.0 = the model's distribution).
        top_k: sample among the k most probable tokens only (0 = all).
        top_p: nucleus sampling (Holtzman et al. 2020): sample among the smallest set of most
            probable tokens whose probability (at ``temperature``, after ``top_k``) reaches
            ``top_p`` (:func:`~captionlib.decode.loop.top_p_filtered`); 1 = all tokens, the
            very draws of plain sampling; a tiny value gives the arg-max. In (0, 1].
        return_states: also return the decoder's hidden vector before each token,
            (batch, length, hidden), as used by critics and learned baselines.
        sync_every: test whether every row has finished (a device-to-host copy) only every
            ``sync_every`` steps; ``None``: 1 on the CPU, :data:`DEVICE_SYNC_EVERY` on other
            devices. The steps run after the last row finished add only padding, which is cut
            off (one more synchronisation, at the end), so the output is the same for every
            value; only the random generator differs afterwards (those steps' draws advance it).
        compile_mode: one of :data:`~captionlib.decode.options.COMPILE_MODES`: run each step
            but the first and the last (the decoder step and the draw, :func:`_step_and_draw`)
            as one compiled graph (:func:`compiled`); or ``cuda-graph``: without gradients on a
            GPU, replay the whole loop as one captured CUDA graph
            (:func:`~captionlib.decode.cuda_graph.graphed_sample`; elsewhere the eager loop).
            ``None``: the model's ``decode_compile`` attribute (set by the training stages'
            ``--decode_compile``), else ``"none"`` (eager).
        greedy_rows: the first ``greedy_rows`` rows are decoded by arg-max and, in training mode,
            without dropout (:func:`~captionlib.utils.distributed.eval_rows`): a greedy baseline
            decoded in the same pass as the samples of the other rows. Where dropout is the
            decoder's only training-mode behaviour
            (:func:`~captionlib.utils.distributed.eval_rows_exact`), those rows are the eval-mode
            greedy captions and the others the samples that separate passes give, with the same
            random draws: once the samples have all ended (found at a check, as above) the
            greedy rows go on without drawing. With ``greedy``, ignored.

    Returns:
        :class:`SampleOutput`. ``logprobs`` are those of the model's own (temperature 1)
        distribution so that policy gradients stay unbiased.

    Raises:
        ValueError: ``sync_every`` < 1, ``greedy_rows`` outside 0..rows, or an unknown
            ``compile_mode``.
    """
    sync_every = (1 if v.device.type == "cpu" else DEVICE_SYNC_EVERY) if sync_every is None else sync_every
    if sync_every < 1:
        raise ValueError(f"sync_every must be >= 1, got {sync_every}")
    if not 0 <= greedy_rows <= v.size(0):
        raise ValueError(f"greedy_rows must be in 0..{v.size(0)} (the rows), got {greedy_rows}")
    compile_mode = getattr(model, "decode_compile", "none") if compile_mode is None else compile_mode
    if compile_mode == "cuda-graph":  # None from graphed_sample (CPU, gradients, ...): the loop below
        out = graphed_sample(model, v, max_len, greedy, temperature, top_k, return_states, greedy_rows, top_p)
        if out is not None:
            return out
    with compile_settings(compile_mode):
        out = decode_loop(model, v, max_len, greedy, temperature, top_k, return_states, greedy_rows, top_p,
                          sync_every=sync_every, step_and_draw=compiled(_step_and_draw, compile_mode))
    # columns where some row was alive are a prefix: cut the padding steps after it
    return out if sync_every == 1 else trimmed(out)


@torch.no_grad()
def greedy_search(model: Any, v: torch.Tensor, max_len: int = 30) -> torch.Tensor:
    """Arg-max decoding; returns (batch, length) ids (eos kept, 0-padded)."""
    return sample(model, v, max_len=max_len, greedy=True).tokens


@torch.no_grad()
def beam_search(
    model: Any, v: torch.Tensor, beam_size: int = 3, max_len: int = 30, length_penalty: float = 0.0,
    nbest: int = 0, return_scores: bool = False,
):
    """Batched beam search over all clips of a batch at once.

    Finished hypotheses stay in the beam with their final score (their only
    continuation is padding at no cost), so they compete with unfinished ones until the
    end. At ``max_len`` eos is forced at no cost, as in :func:`sample`, so the hypothesis
    ranked best is exactly the one returned. Final ranking uses
    ``score / length ** length_penalty`` (0 = plain log-prob sum).

    Only unfinished hypotheses are fed to the model, so finished ones (and clips whose
    hypotheses have all finished) cost nothing; each clip gets the result it would get alone.

    Args:
        model: step-wise decoder; v: (batch, embed).
        beam_size: hypotheses kept per clip (1 = greedy).
        nbest: 0 returns the best hypothesis per clip; N in 1..beam_size returns the N
            best, ranked by the final score (the first is the one ``nbest=0`` returns).
        return_scores: also return the final score of each returned hypothesis: the sum of
            its tokens' log-probs (eos included; a forced eos costs 0), divided by
            ``length ** length_penalty`` when ``length_penalty`` is non-zero.

    Returns:
        (batch, length) ids of the best hypothesis per clip, or (batch, nbest, length) with
        ``nbest`` > 0 (eos kept, 0-padded); with ``return_scores``, the pair ``(ids, scores)``
        with ``scores`` (batch,) or (batch, nbest).

    Raises:
        ValueError: ``nbest`` outside 0..beam_size.
    """
    if not 0 <= nbest <= beam_size:
        raise ValueError(f"nbest must be in 0..beam_size={beam_size}, got {nbest}")
    batch, eos = v.size(0), model.eos_id
    logp, state = model.first_step(v)  # (B, V)
    if max_len <= 1:
        logp = _forced_eos(logp, eos)
    scores, tok = logp.topk(min(beam_size, logp.size(-1)), dim=-1)  # (B, k)
    k = scores.size(1)
    # hypotheses are rows b * k + j (clip b, j-th best); all of these are (B*k,)
    scores, tok = scores.reshape(-1), tok.reshape(-1)
    seqs = tok[:, None]  # (B*k, t)
    finished = tok == eos
    lengths = torch.ones(batch * k, device=v.device)
    alive = (~finished).nonzero().squeeze(1)  # unfinished rows: the rows of the model state
    state = model.reorder_state(state, alive // k)
    clip_row = torch.arange(batch, device=v.device)[:, None] * k  # (B, 1) first row of each clip
    beam_row = clip_row + torch.arange(k, device=v.device)  # (B, k) rows of each clip
    for t in range(1, max_len):
        if alive.numel() == 0:
            break
        # (B*k, k) candidates: k continuations of every row (see _continuations)
        cand, cand_tok, state = _continuations(model, scores, tok, alive, state, k, t == max_len - 1)
        top, idx = cand.view(batch, k * k).topk(k, dim=-1)  # (B, k)
        # a clip whose hypotheses have all finished keeps its beam as it is (as if alone)
        over = finished.view(batch, k).all(1, keepdim=True)  # (B, 1)
        src = torch.where(over, beam_row, idx // k + clip_row).view(-1)
        tok = cand_tok.view(batch, k * k).gather(1, idx).masked_fill(over, 0).view(-1)
        scores = torch.where(over, scores.view(batch, k), top).view(-1)
        seqs = torch.cat([seqs[src], tok[:, None]], dim=1)
        row_in_state = (~finished).cumsum(0) - 1  # where each unfinished row's state is
        prev_finished = finished[src]
        lengths = lengths[src] + (~prev_finished).float()
        finished = prev_finished | (tok == eos)
        # unfinished rows descend from unfinished rows: take their state rows along
        alive = (~finished).nonzero().squeeze(1)
        if alive.numel():
            state = model.reorder_state(state, row_in_state[src[alive]])
    final = scores / lengths.pow(length_penalty) if length_penalty else scores
    if nbest:  # stable: ties keep the row order, so the first is argmax's choice
        chosen = final.view(batch, k).sort(dim=-1, descending=True, stable=True).indices[:, :nbest] + clip_row
    else:
        chosen = final.view(batch, k).argmax(-1) + clip_row[:, 0]
    return (seqs[chosen], final[chosen]) if return_scores else seqs[chosen]


def _continuations(
    model: Any, scores: torch.Tensor, tok: torch.Tensor, alive: torch.Tensor, state: Any, k: int, last: bool,
) -> Tuple[torch.Tensor, torch.Tensor, Any]:
    """The k best continuations of every beam row, for one step of :func:`beam_search`.

    A finished row's only continuation is padding (id 0) at no cost; an unfinished row's are
    its k best words, or (``last``, the step at ``max_len``) eos forced at no cost, as in
    :func:`sample`, without calling the model.

    Args:
        model: step-wise decoder; scores: (R,) summed log-probs of the R = batch * k rows;
        tok: (R,) last token of each row; alive: (A,) indices of the unfinished rows, whose
        states ``state`` holds in that order; k: beam size; last: the step at ``max_len``.

    Returns:
        ``(cand, cand_tok, state)``: (R, k) scores and token ids of the continuations
        (-inf beyond a finished row's first), and the model state after the step.
    """
    cand = scores.new_full((scores.size(0), k), float("-inf"))
    cand[:, 0] = scores
    cand_tok = torch.zeros_like(cand, dtype=tok.dtype)
    if last:
        cand_tok[alive, 0] = model.eos_id
    else:
        logp, state = model.step(tok[alive], state)  # (A, V)
        cand[alive], cand_tok[alive] = (scores[alive, None] + logp).topk(k, dim=-1)
    return cand, cand_tok, state


def _forced_eos(logp: torch.Tensor, eos: int) -> torch.Tensor:
    """Log-probs (batch, vocab) where eos is the only continuation, at no cost."""
    out = torch.full_like(logp, float("-inf"))
    out[:, eos] = 0.0
    return out
