"""The sampling loop of :func:`captionlib.decode.search.sample`: its output type, the draw of
one step and the loop over the steps, on which both the eager path (:mod:`captionlib.decode.search`)
and the CUDA-graph path (:mod:`captionlib.decode.cuda_graph`) build, so that neither imports the
other.
"""

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import torch

from captionlib.utils.distributed import all_ranks, eval_rows, rows_rand


@dataclass
class SampleOutput:
    """Result of :func:`~captionlib.decode.search.sample`.

    Attributes:
        tokens: (batch, length) sampled ids, eos included, 0 after it.
        logprobs: (batch, length) log-probability of each sampled token (0 after eos, and
            0 for an eos forced at ``max_len``); differentiable when sampling with gradients.
        mask: (batch, length) 1.0 for tokens up to and including eos.
        entropy: (batch, length) entropy of each step's distribution in nats (masked);
            differentiable like ``logprobs`` (the maximum-entropy regularization of SLL-ME).
        states: per-step decoder hidden vectors (batch, length, hidden) when requested.
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor
    states: Optional[torch.Tensor] = None

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "SampleOutput":
        """``fn`` applied to every field (``states`` stays ``None`` when it is)."""
        return SampleOutput(*(None if x is None else fn(x) for x in
                              (self.tokens, self.logprobs, self.mask, self.entropy, self.states)))

    def rows(self, index) -> "SampleOutput":
        """These rows (an index of axis 0, e.g. a slice) of every field."""
        return self.map(lambda x: x[index])



def draw_categorical(logp: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """One draw per row from ``softmax(logp / temperature)`` by inverting the cumulative
    distribution (computed in float64), like ``torch.multinomial(probs, 1)`` in law but
    several times faster over large vocabularies on CPU (``multinomial`` draws an
    exponential variate per vocabulary entry). Entries of probability 0 (log-prob -inf)
    are never drawn.

    Args:
        logp: (batch, vocab) log-probabilities or logits (need not be normalised).
        temperature: > 0.

    Returns:
        (batch,) int64 token ids.
    """
    scores = logp.detach().double() / temperature
    cdf = torch.exp(scores - scores.max(-1, keepdim=True).values).cumsum(-1)
    u = rows_rand(cdf.size(0), 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=cdf.size(1) - 1)



def entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy in nats, ``-sum_j p_j log p_j`` over the last dimension of log-probabilities
    ``logp`` (..., vocab), with ``0 log 0 = 0``: entries of log-prob -inf (the padding id) add 0,
    with a 0 gradient. Returns (...)."""
    return -(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1)



def top_p_filtered(scores: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """``scores`` (batch, vocab) with -inf outside each row's nucleus (Holtzman et al. 2020,
    "The Curious Case of Neural Text Degeneration"): the smallest set of most probable tokens
    of ``softmax(scores / temperature)`` whose probability reaches ``top_p``, i.e. the tokens
    whose more probable tokens hold less than ``top_p`` (computed in float64; ties ranked by
    id, as ``argmax``, so the most probable token is always kept and a tiny ``top_p`` keeps
    the arg-max alone). Without host synchronisation (capturable)."""
    ranked, order = (scores.double() / temperature).sort(dim=-1, descending=True, stable=True)
    probs = torch.softmax(ranked, -1)
    drop = (probs.cumsum(-1) - probs) >= top_p  # the mass of the tokens ranked before reaches top_p
    return scores.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), float("-inf"))



def _draw_step(logp: torch.Tensor, finished: torch.Tensor, eos: int, last: bool, greedy: bool,
               temperature: float, top_k: int, greedy_rows: int = 0, top_p: float = 1.0):
    """One step of :func:`~captionlib.decode.search.sample` after the decoder: the token of each row and its
    bookkeeping, without host synchronisation (a capturable graph under :func:`~captionlib.decode.search.compiled`).

    Args:
        logp: (batch, vocab) the step's log-probabilities.
        finished: (batch,) bool, rows that emitted eos at an earlier step.
        eos: the eos id; last: the step at ``max_len`` (eos is forced).
        greedy, temperature, top_k, greedy_rows, top_p: as :func:`~captionlib.decode.search.sample`'s.

    Returns:
        (batch,) each: the drawn token (fed to the decoder), the token of the caption (0 for
        finished rows), its log-probability (0 when finished or forced), the distribution's
        entropy in nats (0 when finished), alive (1.0 for rows not finished before this
        step), and the new ``finished``.
    """
    if greedy:
        tok = logp.argmax(-1)
    else:
        scores = logp[greedy_rows:].detach()  # the rows drawn at random (the draws of a pass of them alone)
        if top_k > 0:  # a k of at least the vocabulary size keeps every token
            kth = scores.topk(min(top_k, scores.size(-1)), dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if top_p < 1.0:  # 1: every token (no filtering at all: the draws of plain sampling)
            scores = top_p_filtered(scores, temperature, top_p)
        tok = draw_categorical(scores, temperature)
        if greedy_rows:
            tok = torch.cat([logp[:greedy_rows].argmax(-1), tok])
    alive = (~finished).to(logp.dtype)
    if last:
        # truncation: eos is forced, so under the truncated policy its probability is 1
        # and it adds nothing to log p(caption) (else the policy gradient is biased)
        tok = torch.where(finished, tok, tok.new_full((), eos))
        lp = torch.zeros_like(alive)
    else:
        lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1) * alive
    ent = entropy(logp) * alive
    return tok, torch.where(finished, tok.new_zeros(()), tok), lp, ent, alive, finished | (tok == eos)



def _step_and_draw(model: Any, tokens: torch.Tensor, state: Any, finished: torch.Tensor, eos: int, greedy: bool,
                   temperature: float, top_k: int, greedy_rows: int,
                   top_p: float = 1.0) -> Tuple[Any, Tuple[torch.Tensor, ...]]:
    """One step of :func:`~captionlib.decode.search.sample` after its first: ``model.step`` on the
    previous ``tokens`` (rows,), then :func:`_draw_step` (not the last step) from its
    log-probabilities. Returns (the new state, the draw's six tensors). Compiled as one function
    (:func:`~captionlib.decode.search.compiled`), a step is one call and one CUDA graph replay: on
    an H100 each compiled call cost 200-330 us of host time, more than the GPU's work of a step
    (bench/README.md, "Speed")."""
    logp, state = model.step(tokens, state)
    return state, _draw_step(logp, finished, eos, False, greedy, temperature, top_k, greedy_rows, top_p)



def decode_loop(model: Any, v: torch.Tensor, max_len: int, greedy: bool, temperature: float, top_k: int,
                return_states: bool, greedy_rows: int, top_p: float = 1.0, *, sync_every: int,
                step_and_draw: Callable = _step_and_draw) -> SampleOutput:
    """The steps of :func:`~captionlib.decode.search.sample` (same arguments): until a check that every row has finished
    (a device-to-host copy every ``sync_every`` steps) finds them all finished, else all
    ``max_len`` steps; ``sync_every`` 0: all ``max_len`` steps and no host synchronisation (the
    static loop that :mod:`captionlib.decode.cuda_graph` captures). ``step_and_draw``: the
    function of the steps between the first and the last (:func:`_step_and_draw`, or it
    compiled). Returns the untrimmed outputs (batch, steps run): padding columns after the last
    row's eos are still there (:func:`trimmed`)."""
    watched = 0 if greedy else greedy_rows  # rows from here on are sampled: their end is checked first
    keep = watched  # rows that Dropout leaves as in eval mode
    with eval_rows(keep):
        logp, state = model.first_step(v)
    finished = torch.zeros(v.size(0), dtype=torch.bool, device=v.device)
    toks, lps, masks, ents, hids = [], [], [], [], []
    tok = None  # drawn at the end of each step; the first step (t == 0) does not read it
    for t in range(max_len):
        last = t == max_len - 1
        with eval_rows(keep):
            if 0 < t < max_len - 1:
                state, drawn = step_and_draw(model, tok, state, finished, model.eos_id, greedy, temperature, top_k,
                                             keep, top_p)
            else:  # the first draw and the last step (forced eos) run eagerly: no graph of their own
                if t > 0:
                    logp, state = model.step(tok, state)
                drawn = _draw_step(logp, finished, model.eos_id, last, greedy, temperature, top_k, keep, top_p)
        if return_states:
            hids.append(model.decoder.step_hidden(state))
        tok, out, lp, ent, alive, finished = drawn
        toks.append(out)
        lps.append(lp)
        ents.append(ent)
        masks.append(alive)
        if last:
            break
        if sync_every and (t + 1) % sync_every == 0 and all_ranks(bool(finished[watched:].all())):
            if not watched or all_ranks(bool(finished.all())):
                break
            # the samples have all ended before the greedy rows: every row is arg-max from here and
            # Dropout draws nothing, so the generator advances as in a pass of the samples alone
            greedy, keep, watched = True, v.size(0), 0
    return SampleOutput(tokens=torch.stack(toks, 1), logprobs=torch.stack(lps, 1), mask=torch.stack(masks, 1),
                        entropy=torch.stack(ents, 1), states=torch.stack(hids, 1) if return_states else None)



def trimmed(out: SampleOutput) -> SampleOutput:
    """``out`` without its columns after the last row's eos (one device-to-host copy): the
    columns where some row was alive are a prefix."""
    n = int((out.mask > 0).any(0).sum())
    return out.map(lambda x: x[:, :n])
