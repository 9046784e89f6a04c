"""Greedy decoding, sampling and batched beam search over a step-wise decoder.

Works with any object exposing ``first_step(v)``, ``step(tokens, state)``,
``reorder_state(state, index)`` and ``eos_id`` (a :class:`~captionlib.models.captioner.Captioner`,
or a word-level ensemble of several). Sequences are returned as (batch, length) id
tensors padded with 0 after eos; eos itself is kept in the sequence.
"""

from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass
class SampleOutput:
    """Result of :func:`sample`.

    Attributes:
        tokens: (batch, length) sampled ids, eos included, 0 after it.
        logprobs: (batch, length) log-probability of each sampled token (0 after eos, and
            0 for an eos forced at ``max_len``); differentiable when sampling with gradients.
        mask: (batch, length) 1.0 for tokens up to and including eos.
        entropy: (batch, length) entropy of each step's distribution (masked).
        states: per-step decoder hidden vectors (batch, length, hidden) when requested.
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor
    states: Optional[torch.Tensor] = None


def sample(
    model: Any,
    v: torch.Tensor,
    max_len: int = 30,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    return_states: bool = False,
) -> SampleOutput:
    """Draw one caption per row of ``v`` (multinomial, or arg-max when ``greedy``).

    Args:
        model: step-wise decoder (see module docstring).
        v: (batch, embed) audio embeddings (repeat rows to draw several samples per clip).
        max_len: maximum tokens, eos included.
        greedy: take the arg-max instead of sampling.
        temperature: divides the logits before sampling (1.0 = the model's distribution).
        top_k: sample among the k most probable tokens only (0 = all).
        return_states: also return the decoder's hidden vector before each token,
            (batch, length, hidden), as used by critics and learned baselines.

    Returns:
        :class:`SampleOutput`. ``logprobs`` are those of the model's own (temperature 1)
        distribution so that policy gradients stay unbiased.
    """
    batch = v.size(0)
    eos = model.eos_id
    logp, state = model.first_step(v)
    finished = torch.zeros(batch, dtype=torch.bool, device=v.device)
    toks, lps, masks, ents, hids = [], [], [], [], []
    for t in range(max_len):
        if return_states:
            hids.append(model.decoder.step_hidden(state))
        if greedy:
            tok = logp.argmax(-1)
        else:
            scores = logp.detach() / temperature
            if top_k > 0:
                kth = scores.topk(top_k, dim=-1).values[:, -1:]
                scores = scores.masked_fill(scores < kth, float("-inf"))
            tok = torch.multinomial(torch.softmax(scores, dim=-1), 1).squeeze(1)
        alive = (~finished).to(logp.dtype)
        if t == max_len - 1:
            # truncation: eos is forced, so under the truncated policy its probability is 1
            # and it adds nothing to log p(caption) (else the policy gradient is biased)
            tok = torch.where(finished, tok, tok.new_full((), eos))
            lps.append(torch.zeros_like(alive))
        else:
            lps.append(logp.gather(1, tok.unsqueeze(1)).squeeze(1) * alive)
        toks.append(torch.where(finished, tok.new_zeros(()), tok))
        ents.append(torch.special.entr(logp.exp()).sum(-1) * alive)
        masks.append(alive)
        finished = finished | (tok == eos)
        if bool(finished.all()):
            break
        logp, state = model.step(tok, state)
    return SampleOutput(
        tokens=torch.stack(toks, 1),
        logprobs=torch.stack(lps, 1),
        mask=torch.stack(masks, 1),
        entropy=torch.stack(ents, 1),
        states=torch.stack(hids, 1) if return_states else None,
    )


@torch.no_grad()
def greedy_search(model: Any, v: torch.Tensor, max_len: int = 30) -> torch.Tensor:
    """Arg-max decoding; returns (batch, length) ids (eos kept, 0-padded)."""
    return sample(model, v, max_len=max_len, greedy=True).tokens


@torch.no_grad()
def beam_search(
    model: Any, v: torch.Tensor, beam_size: int = 3, max_len: int = 30, length_penalty: float = 0.0
) -> torch.Tensor:
    """Batched beam search over all clips of a batch at once.

    Finished hypotheses stay in the beam with their final score (their only
    continuation is padding at no cost), so they compete with unfinished ones until the
    end. At ``max_len`` eos is forced at no cost, as in :func:`sample`, so the hypothesis
    ranked best is exactly the one returned. Final ranking uses ``score / length ** length_penalty`` (0 = plain log-prob sum).

    Args:
        model: step-wise decoder; v: (batch, embed).
        beam_size: hypotheses kept per clip (1 = greedy).

    Returns:
        (batch, length) ids of the best hypothesis per clip (eos kept, 0-padded).
    """
    batch, k, eos = v.size(0), beam_size, model.eos_id

    def forced_eos(logp: torch.Tensor) -> torch.Tensor:
        # truncation at max_len: eos is the only continuation, at no cost (as in sample())
        out = torch.full_like(logp, float("-inf"))
        out[:, eos] = 0.0
        return out

    logp, state = model.first_step(v)  # (B, V)
    if max_len <= 1:
        logp = forced_eos(logp)
    vocab = logp.size(-1)
    scores, tok = logp.topk(min(k, vocab), dim=-1)  # (B, k)
    k = scores.size(1)
    base = torch.arange(batch, device=v.device).repeat_interleave(k)
    state = model.reorder_state(state, base)
    seqs = tok.reshape(batch * k, 1)
    scores = scores.reshape(batch * k)
    finished = seqs[:, 0] == eos
    lengths = torch.ones(batch * k, device=v.device)
    for t in range(1, max_len):
        if bool(finished.all()):
            break
        logp, state = model.step(seqs[:, -1].clamp(min=0), state)
        if t == max_len - 1:
            logp = forced_eos(logp)
        # finished beams: only padding continues them, at no cost
        logp = torch.where(finished[:, None], torch.full_like(logp, float("-inf")), logp)
        logp[:, 0] = torch.where(finished, torch.zeros_like(scores), logp.new_full((), float("-inf")))
        cand = (scores[:, None] + logp).reshape(batch, k * vocab)
        scores, idx = cand.topk(k, dim=-1)
        src = (idx // vocab + torch.arange(batch, device=v.device)[:, None] * k).reshape(-1)
        tok = (idx % vocab).reshape(-1)
        scores = scores.reshape(-1)
        seqs = torch.cat([seqs[src], tok[:, None]], dim=1)
        state = model.reorder_state(state, src)
        prev_finished = finished[src]
        lengths = lengths[src] + (~prev_finished).float()
        finished = prev_finished | (tok == eos)
    final = scores / lengths.pow(length_penalty) if length_penalty else scores
    best = final.reshape(batch, k).argmax(-1) + torch.arange(batch, device=v.device) * k
    return seqs[best]
