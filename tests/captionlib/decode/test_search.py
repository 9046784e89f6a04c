import pytest
import torch

from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.models.captioner import Captioner


class TableModel:
    """A first-order model with a fixed log-prob table: state = previous token."""

    def __init__(self, first, table, eos):
        self.first, self.table, self.eos_id = first, table, eos

    def first_step(self, v):
        return self.first.expand(v.size(0), -1).clone(), torch.zeros(v.size(0), dtype=torch.long)

    def step(self, tokens, state):
        return self.table[tokens].clone(), tokens

    def reorder_state(self, state, index):
        return state[index]


def _log(p):
    return torch.tensor(p).clamp(min=1e-12).log()


def toy():
    # tokens: 0 pad, 1 "a", 2 "b", 3 eos. Greedy picks "a" (0.6) then a flat step;
    # the best sequence is "b eos" (0.4 * 1.0) over "a x eos" (0.6 * 0.4 * ...)
    first = _log([0.0, 0.6, 0.4, 0.0])
    table = torch.stack(
        [
            _log([0, 0.3, 0.3, 0.4]),  # after pad (unused)
            _log([0, 0.35, 0.3, 0.35]),  # after a
            _log([0, 0.0, 0.0, 1.0]),  # after b -> eos
            _log([0, 0.0, 0.0, 1.0]),  # after eos
        ]
    )
    return TableModel(first, table, eos=3)


def test_beam_finds_better_sequence_than_greedy():
    m = toy()
    v = torch.zeros(2, 1)
    assert greedy_search(m, v, max_len=5)[0].tolist()[:1] == [1]
    best = beam_search(m, v, beam_size=2, max_len=5)
    assert best[0].tolist()[:2] == [2, 3]
    assert best[1].tolist()[:2] == [2, 3]


def test_beam_one_equals_greedy_on_captioner():
    torch.manual_seed(0)
    model = Captioner(30, decoder_conf={"hidden_size": 16}).eval()
    v = model.encode(torch.randn(3, 50, 64), torch.tensor([50, 30, 40]))
    g = greedy_search(model, v, max_len=10)
    b = beam_search(model, v, beam_size=1, max_len=10)
    assert torch.equal(g, b)
    assert ((g == model.eos_id).sum(1) == 1).all()  # exactly one eos per row


def test_sample_logprobs_and_mask():
    torch.manual_seed(0)
    m = toy()
    out = sample(m, torch.zeros(500, 1), max_len=6)
    first = out.tokens[:, 0]
    # empirical frequency of the first token follows the model
    assert abs((first == 1).float().mean().item() - 0.6) < 0.08
    lp = out.logprobs[:, 0]
    assert torch.allclose(lp[first == 1], torch.log(torch.tensor(0.6)))
    # mask covers tokens up to and including eos; tokens after eos are padding
    for row, mask in zip(out.tokens.tolist(), out.mask.tolist()):
        n = int(sum(mask))
        assert row[n - 1] == 3 and all(t == 0 for t in row[n:])


def test_beam_returns_the_sequence_it_ranked_at_max_len():
    # At max_len eos is forced at no cost (as in sampling), so a truncated hypothesis is
    # ranked by its prefix: [a a eos] = 0.8*0.4 = 0.32 beats [a b eos] = 0.8*0.35 = 0.28
    # and [b eos] = [a eos] = 0.2. Ranking the last step over all words instead would pick
    # [a b eos] ([a a a] = 0.128) and return a different sequence than it ranked.
    first = _log([0.0, 0.8, 0.2, 0.0])
    table = torch.stack(
        [_log([0, 0.3, 0.3, 0.4]), _log([0, 0.4, 0.35, 0.25]), _log([0, 0, 0, 1.0]), _log([0, 0, 0, 1.0])]
    )
    m = TableModel(first, table, eos=3)
    assert beam_search(m, torch.zeros(1, 1), beam_size=3, max_len=3)[0].tolist() == [1, 1, 3]
    assert greedy_search(m, torch.zeros(1, 1), max_len=3)[0].tolist() == [1, 1, 3]
    assert beam_search(m, torch.zeros(1, 1), beam_size=2, max_len=1)[0].tolist() == [3]


@torch.no_grad()
def reference_beam_search(model, v, beam_size, max_len, length_penalty):
    """The plain beam search (every hypothesis stepped over the full vocabulary), as it was
    before finished hypotheses were dropped from the model's batch."""
    batch, eos = v.size(0), model.eos_id

    def forced_eos(logp):
        out = torch.full_like(logp, float("-inf"))
        out[:, eos] = 0.0
        return out

    logp, state = model.first_step(v)
    if max_len <= 1:
        logp = forced_eos(logp)
    vocab = logp.size(-1)
    scores, tok = logp.topk(min(beam_size, vocab), dim=-1)
    k = scores.size(1)
    state = model.reorder_state(state, torch.arange(batch).repeat_interleave(k))
    seqs, scores = tok.reshape(batch * k, 1), scores.reshape(batch * k)
    finished, lengths = seqs[:, 0] == eos, torch.ones(batch * k)
    for t in range(1, max_len):
        if bool(finished.all()):
            break
        logp, state = model.step(seqs[:, -1], state)
        if t == max_len - 1:
            logp = forced_eos(logp)
        logp = torch.where(finished[:, None], torch.full_like(logp, float("-inf")), logp)
        logp[:, 0] = torch.where(finished, torch.zeros_like(scores), logp.new_full((), float("-inf")))
        scores, idx = (scores[:, None] + logp).reshape(batch, k * vocab).topk(k, dim=-1)
        src = (idx // vocab + torch.arange(batch)[:, None] * k).reshape(-1)
        tok, scores = (idx % vocab).reshape(-1), scores.reshape(-1)
        seqs = torch.cat([seqs[src], tok[:, None]], dim=1)
        state = model.reorder_state(state, src)
        prev_finished = finished[src]
        lengths = lengths[src] + (~prev_finished).float()
        finished = prev_finished | (tok == eos)
    final = scores / lengths.pow(length_penalty) if length_penalty else scores
    return seqs[final.reshape(batch, k).argmax(-1) + torch.arange(batch) * k]


def ragged_captioner(seed):
    """A small random captioner whose clips end at different steps: peaky output layer
    (weights x5) with a raised eos bias; random embeddings make the clips differ."""
    torch.manual_seed(seed)
    m = Captioner(40, decoder_conf={"hidden_size": 32}).eval()
    with torch.no_grad():
        m.decoder.output.weight.mul_(5.0)
        m.decoder.output.bias.mul_(5.0)
        m.decoder.output.bias[m.eos_id] += 1.0
    return m, torch.randn(12, m.encoder.output_size)


def assert_equals_per_clip_loop(model, v, k, max_len, lp, reference=True):
    batched = beam_search(model, v, k, max_len, lp)
    if reference:
        assert torch.equal(batched, reference_beam_search(model, v, k, max_len, lp))
    for i in range(v.size(0)):
        alone = beam_search(model, v[i : i + 1], k, max_len, lp)[0]
        assert torch.equal(batched[i, : alone.numel()], alone)
        assert not batched[i, alone.numel() :].any()  # only padding beyond
    return batched


def test_batched_beam_equals_per_clip_loop_and_reference():
    model, v = ragged_captioner(2)
    lengths = (beam_search(model, v, 5, 12) != 0).sum(1)
    assert len(set(lengths.tolist())) >= 5 and (lengths < 12).sum() >= 8  # clips end at different steps
    for k in (1, 2, 3, 5):
        for max_len in (1, 2, 5, 12):
            for lp in (0.0, 0.7, 1.0):
                assert_equals_per_clip_loop(model, v, k, max_len, lp)


def test_batched_beam_equals_per_clip_loop_on_ensemble():
    from captionlib.decode.ensemble import Ensemble

    (m1, v1), (m2, v2) = ragged_captioner(1), ragged_captioner(2)
    ens = Ensemble([m1, m2]).eval()
    v = torch.cat([v1, v2], dim=-1)
    lengths = (beam_search(ens, v, 4, 12) != 0).sum(1)
    assert len(set(lengths.tolist())) >= 3
    for k, max_len, lp in [(1, 12, 0.0), (3, 12, 0.0), (4, 6, 1.0), (5, 12, 0.5), (4, 1, 0.0)]:
        assert_equals_per_clip_loop(ens, v, k, max_len, lp)


class PerClipTableModel(TableModel):
    """A TableModel whose first distribution is chosen per clip by ``v[:, 0]``."""

    def first_step(self, v):
        return self.first[v[:, 0].long()].clone(), torch.zeros(v.size(0), dtype=torch.long)


def test_batched_beam_equals_per_clip_loop_with_ties():
    # clip 0: words 1-4 tie (p = 1/4 each) and end there, so its beam holds 4 finished
    # hypotheses of equal score; clip 1 says word 5 until max_len. topk may reorder equal
    # scores, so re-ranking clip 0's finished beam while clip 1 goes on could change which
    # tied caption comes first; a clip whose hypotheses have all finished keeps its beam.
    eos = 6  # 0 padding, 1-5 words
    first = torch.stack([_log([0, 0.25, 0.25, 0.25, 0.25, 0, 0]), _log([0, 0, 0, 0, 0, 1, 0])])
    ends = _log([0, 0, 0, 0, 0, 0, 1])
    table = torch.stack([_log([0] + [1 / 6] * 6)] + [ends] * 4 + [_log([0, 0, 0, 0, 0, 0.9, 0.1]), ends])
    m = PerClipTableModel(first, table, eos)
    v = torch.tensor([[0.0], [1.0], [0.0]])
    for k in (1, 2, 3, 4, 5):
        for max_len in (1, 2, 3, 8):
            assert_equals_per_clip_loop(m, v, k, max_len, 0.0, reference=False)
    m = toy()
    for k in (1, 2, 3, 4):
        for max_len in (1, 2, 3, 5):
            assert_equals_per_clip_loop(m, torch.zeros(3, 1), k, max_len, 0.0, reference=False)


def test_draw_categorical_follows_the_softmax():
    from captionlib.decode.search import draw_categorical

    torch.manual_seed(0)
    logits = torch.tensor([[float("-inf"), 0.0, 1.0, -2.0, 0.5, 3.0]])
    n = 200000
    for temperature in (1.0, 2.0):
        drawn = draw_categorical(logits.expand(n, -1), temperature)
        freq = torch.bincount(drawn, minlength=6).double() / n
        p = torch.softmax(logits[0].double() / temperature, -1)
        assert freq[0] == 0  # probability 0 is never drawn
        assert bool((((freq - p).abs() / (p * (1 - p) / n).sqrt().clamp(min=1e-12))[1:] < 4.5).all()), (freq, p)


def test_beam_nbest_is_ranked_and_starts_with_the_best():
    # after "a": a .4, b .25, eos .35; after "b": eos. Beam 3, max_len 4 ends with
    # [b eos] .4 > [a eos] .6*.35 = .21 > [a a a eos] .6*.4*.4 = .096 (eos forced at max_len)
    first = _log([0.0, 0.6, 0.4, 0.0])
    table = torch.stack([_log([0, 0.3, 0.3, 0.4]), _log([0, 0.4, 0.25, 0.35]), _log([0, 0, 0, 1.0]),
                         _log([0, 0, 0, 1.0])])
    m = TableModel(first, table, eos=3)
    got = beam_search(m, torch.zeros(2, 1), beam_size=3, max_len=4, nbest=3)
    assert got.shape == (2, 3, 4)
    assert [[t for t in row if t] for row in got[1].tolist()] == [[2, 3], [1, 3], [1, 1, 1, 3]]
    assert got[:, :2].tolist() == beam_search(m, torch.zeros(2, 1), beam_size=3, max_len=4, nbest=2).tolist()
    model, v = ragged_captioner(3)
    for k, lp in [(2, 0.0), (5, 0.7)]:
        ranked = beam_search(model, v, k, 12, lp, nbest=k)
        assert torch.equal(ranked[:, 0], beam_search(model, v, k, 12, lp))
        assert all(len({tuple(r) for r in rows}) == k for rows in ranked.tolist())  # k distinct hypotheses
    with pytest.raises(ValueError, match="nbest"):
        beam_search(model, v, 2, 12, nbest=3)


def _reference_sample(model, v, max_len):
    """The sampling loop as it was before ``sync_every``: check every step, stop when all rows
    are done (the oracle of the CPU outputs)."""
    from captionlib.decode.search import draw_categorical

    logp, state = model.first_step(v)
    finished = torch.zeros(v.size(0), dtype=torch.bool)
    toks, lps, ents, masks, hids = [], [], [], [], []
    for t in range(max_len):
        hids.append(model.decoder.step_hidden(state))
        tok = draw_categorical(logp.detach())
        alive = (~finished).float()
        if t == max_len - 1:
            tok = torch.where(finished, tok, tok.new_full((), model.eos_id))
            lps.append(torch.zeros_like(alive))
        else:
            lps.append(logp.gather(1, tok.unsqueeze(1)).squeeze(1) * alive)
        toks.append(torch.where(finished, tok.new_zeros(()), tok))
        ents.append(-(logp.exp() * logp.masked_fill(torch.isinf(logp), 0.0)).sum(-1) * alive)
        masks.append(alive)
        finished = finished | (tok == model.eos_id)
        if bool(finished.all()):
            break
        logp, state = model.step(tok, state)
    return [torch.stack(x, 1) for x in (toks, lps, masks, ents, hids)]


@pytest.mark.parametrize("decoder, conf", [
    ("gru", {"hidden_size": 16}),
    ("transformer", {"num_layers": 1, "d_model": 16, "nhead": 2, "dim_feedforward": 32}),
])
def test_sample_on_cpu_is_the_per_step_loop_for_any_sync_every(decoder, conf):
    """The CPU sampling loop's outputs are unchanged (same seed, same samples), and checking for
    finished rows only every k steps (the default off the CPU) gives the same outputs."""
    torch.manual_seed(0)
    model = Captioner(9, decoder=decoder, decoder_conf=conf).eval()
    with torch.no_grad():
        v = model.encode(torch.randn(6, 40, 64), torch.tensor([40, 30, 20, 40, 10, 25])).repeat_interleave(3, 0)
        torch.manual_seed(1)
        want = _reference_sample(model, v, 12)
        after = torch.rand(1)
        assert 2 < want[0].size(1)  # rows of several lengths: the padding after eos is exercised
        for k in (None, 1, 2, 3, 5, 12, 20):
            torch.manual_seed(1)
            out = sample(model, v, 12, return_states=True, sync_every=k)
            for name, a, b in zip(("tokens", "logprobs", "mask", "entropy", "states"), want,
                                  (out.tokens, out.logprobs, out.mask, out.entropy, out.states)):
                assert torch.equal(a, b), (k, name)
            if k in (None, 1):  # on the CPU: not one draw more than the per-step loop
                assert torch.equal(torch.rand(1), after)
    with pytest.raises(ValueError, match="sync_every"):
        sample(model, v, 12, sync_every=0)


@pytest.mark.parametrize("decoder, conf", [
    ("gru", {"hidden_size": 16}),
    ("att_lstm", {"hidden_size": 16, "att_size": 8}),
    ("transformer", {"num_layers": 1, "d_model": 16, "nhead": 2, "dim_feedforward": 32}),
])
@pytest.mark.parametrize("greedy_first", [False, True])
@pytest.mark.parametrize("sync_every", [1, 3])
@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (1.3, 3)])
def test_greedy_rows_are_the_two_passes_of_a_baseline_and_samples(decoder, conf, greedy_first, sync_every,
                                                                   temperature, top_k):
    """sample(greedy_rows=k) in training mode: its first k rows are the eval-mode greedy captions,
    the others the samples of a separate pass (dropout on, same seed), and the generator ends where
    that pass leaves it, whether the greedy rows end first or outlast the samples (then they go on
    without drawing)."""
    from captionlib.decode.search import trimmed
    from captionlib.models.batch_parts import cat_encodings

    torch.manual_seed(0)
    model = Captioner(9, decoder=decoder, decoder_conf={**conf, "dropout": 0.3}).train()
    with torch.no_grad():  # eos the most probable word (the greedy captions end at once) or the second
        model.decoder.output.bias[model.eos_id] += 3.0 if greedy_first else 5.0
        model.decoder.output.bias[1] += 0.0 if greedy_first else 6.0
    with torch.no_grad():
        v = model.encode(torch.randn(4, 40, 64), torch.tensor([40, 30, 20, 25]))
        vs = v.repeat_interleave(3, 0)
        model.eval()
        greedy = greedy_search(model, v, 40)
        model.train()
        torch.manual_seed(1)
        want = sample(model, vs, 40, sync_every=sync_every, return_states=True, temperature=temperature, top_k=top_k)
        after = torch.rand(1)
        torch.manual_seed(1)
        both = sample(model, cat_encodings([v, vs]), 40, sync_every=sync_every, return_states=True, greedy_rows=4,
                      temperature=temperature, top_k=top_k)
        assert torch.equal(torch.rand(1), after)
    # the case the parameter names: the greedy captions end first, or after the samples' last
    assert greedy.size(1) < want.tokens.size(1) if greedy_first else greedy.size(1) > want.tokens.size(1) + 3
    assert torch.equal(trimmed(both.rows(slice(0, 4))).tokens, greedy)
    got = trimmed(both.rows(slice(4, None)))
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.mask, want.mask)
    for a, b in ((got.logprobs, want.logprobs), (got.entropy, want.entropy), (got.states, want.states)):
        torch.testing.assert_close(a, b)  # the float rounding of a larger batch at most
    with pytest.raises(ValueError, match="greedy_rows"):
        sample(model, v, 12, greedy_rows=5)
