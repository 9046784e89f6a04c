"""Sampling with the decoder step and the draw compiled as graphs (``--decode_compile``,
issue 27): each traces into one graph (``fullgraph``), with ``aot_eager`` (tracing and
autograd, eager kernels, the same random draws) it gives the eager outputs and gradients,
and SCST trains alike with it. CUDA graphs (``reduce-overhead``) need a GPU: not run here."""

import json
import logging

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from captionlib.decode import loop, search
from captionlib.decode.options import COMPILE_MODES
from captionlib.decode.search import compiled, greedy_search, sample
from captionlib.models.batch_parts import BatchParts, cat_encodings
from captionlib.models.captioner import Captioner
from captionlib.train.options import TrainOptions
from tiny_training import train_tiny_xe

pytestmark = pytest.mark.long(0.4)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

DECODERS = [
    ("gru", {"hidden_size": 16}),
    ("transformer", {"num_layers": 1, "d_model": 16, "nhead": 2, "dim_feedforward": 32}),
]


def _sample_and_backward(model, feats, lens, mode):
    """One sampling pass in training mode (dropout on) and its backward pass."""
    torch.manual_seed(1)
    model.zero_grad()
    v = model.encode(feats, lens).repeat_interleave(3, 0)
    out = sample(model, v, 12, compile_mode=mode)
    (out.logprobs.sum() + out.entropy.sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return out, grads, torch.rand(1)


@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_compiled_sampling_is_one_graph_per_step_and_matches_eager(decoder, conf):
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Captioner(9, decoder=decoder, decoder_conf=conf).train()
    feats, lens = torch.randn(6, 40, 64), torch.tensor([40, 30, 20, 40, 10, 25])
    want, want_grads, want_after = _sample_and_backward(model, feats, lens, "none")
    assert want.tokens.size(1) > 2 and not want.mask.all()  # rows of several lengths
    for _ in range(2):  # the second call replays the graphs compiled by the first
        got, grads, after = _sample_and_backward(model, feats, lens, "aot_eager")
        assert torch.equal(got.tokens, want.tokens) and torch.equal(got.mask, want.mask)
        torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grads, want_grads, rtol=1e-5, atol=1e-5)
        assert torch.equal(after, want_after)  # the same random draws, dropout's included
    assert not counters["graph_break"]
    # the step and the draw, one graph (batch size and cache length are symbols), not one per
    # position; dynamo specialises a size of 1, so a Transformer's first cached position (a
    # cache of length 1) gets a graph of its own
    first = counters["stats"]["unique_graphs"]
    assert first == {"gru": 1, "transformer": 2}[decoder], dict(counters["stats"])
    model.eval()
    with torch.no_grad():
        v = model.encode(feats, lens)
        model.decode_compile = "aot_eager"  # what --decode_compile sets: greedy decoding reads it
        greedy = greedy_search(model, v, 12)
        assert counters["stats"]["unique_graphs"] == 2 * first  # eval mode and no gradients: compiled again
        model.decode_compile = "none"
        assert torch.equal(greedy, greedy_search(model, v, 12))


@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_compiled_pass_of_baseline_and_samples_matches_eager(decoder, conf):
    """sample(greedy_rows=...) compiled: the greedy rows without dropout and the sampled rows
    with it, then (the samples ended) every row greedy, without graph breaks, as eagerly."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Captioner(9, decoder=decoder, decoder_conf={**conf, "dropout": 0.3}).train()
    outs = []
    with torch.no_grad():
        model.decoder.output.bias[1] += 6.0  # the greedy word; eos second (ends the samples)
        model.decoder.output.bias[model.eos_id] += 5.0
        v = model.encode(torch.randn(6, 40, 64), torch.tensor([40, 30, 20, 40, 10, 25]))
        for mode in ("none", "aot_eager"):
            torch.manual_seed(1)
            outs.append((sample(model, cat_encodings([v, v.repeat_interleave(2, 0)]), 40, compile_mode=mode,
                                greedy_rows=6), torch.rand(1)))
    (want, want_after), (got, after) = outs
    assert want.mask[:6, -1].any() and not want.mask[6:, -1].any()  # the greedy rows went on alone
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.mask, want.mask) and torch.equal(after, want_after)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5)
    assert not counters["graph_break"]


@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_a_training_run_stays_within_the_recompile_limit(decoder, conf):
    """RL updates (sampled in training mode, greedy baselines in eval mode without gradients,
    then both in one pass without gradients, as on a GPU with --sample_logprobs recompute) with
    other batch sizes, temperatures and top-k, then validation batches of 3, 2 and 1 clips: dynamo
    compiles a few versions, never past its limit (its default of 8 versions was reached by a
    Transformer's run; ``fullgraph`` then raises). The one pass costs versions per batch size
    (``greedy_rows`` is read as a constant)."""
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = Captioner(9, decoder=decoder, decoder_conf=conf)
    model.decode_compile = "eager"

    def encode(n):
        return model.encode(torch.randn(n, 40, 64), torch.full((n,), 40))

    for n, temperature, top_k in [(4, 1.0, 0), (2, 0.7, 3), (3, 1.0, 0)]:
        model.train()
        v = encode(n)
        out = sample(model, v.repeat_interleave(2, 0), 8, temperature=temperature, top_k=top_k)
        with torch.no_grad():
            sample(model, cat_encodings([v, v.repeat_interleave(2, 0)]), 8, temperature=temperature, top_k=top_k,
                   greedy_rows=n)
        model.eval()
        with torch.no_grad():
            greedy_search(model, v, 8)
        out.logprobs.sum().backward()
    with torch.no_grad():
        for n in (3, 2, 1):
            assert greedy_search(model, encode(n), 8).size(0) == n
    assert 4 <= counters["stats"]["unique_graphs"] <= search.RECOMPILE_LIMIT, dict(counters["stats"])


def test_outputs_of_cuda_graph_replays_are_cloned_through_decoder_states():
    """What ``reduce-overhead`` returns is copied out of the graphs' memory pool before the
    sampling loop keeps it (a Transformer state: a named tuple of tuples, and None)."""
    from captionlib.models.transformer import TransformerState

    k, v, h = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4), torch.randn(2, 8)
    state = TransformerState(h, ((k, v),), ((v, k),), torch.ones(2, 1, 1, 3, dtype=torch.bool), None)
    logp = torch.randn(2, 9)
    got_logp, got = search._cloned((logp, state))
    assert isinstance(got, TransformerState) and got.clip is None
    pairs = [(got_logp, logp), (got.hidden, h), (got.caches[0][0], k), (got.caches[0][1], v),
             (got.memory[0][0], v), (got.memory_mask, state.memory_mask)]
    for a, b in pairs:
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    assert set(search.CUDA_GRAPH_MODES) <= set(COMPILE_MODES)
    # a Top-Down state (BatchParts) stays one: a plain tuple made the next step recompile
    parts = search._cloned(BatchParts((h, k)))
    assert type(parts) is BatchParts and torch.equal(parts[1], k) and parts[1].data_ptr() != k.data_ptr()


def test_compile_modes_are_checked_and_row_sharded_draws_stay_eager(monkeypatch, caplog):
    assert TrainOptions.__dataclass_fields__["decode_compile"].default == "none"
    assert compiled(loop._draw_step, "none") is loop._draw_step
    with pytest.raises(ValueError, match="compile mode must be one of none, default, reduce-overhead"):
        compiled(loop._draw_step, "reduce_overhead")
    assert set(COMPILE_MODES) >= {"none", "default", "reduce-overhead", "aot_eager"}
    # several ranks drawing the global batch's rows: a collective per draw cannot be captured
    monkeypatch.setattr(search, "row_sharded", lambda: True)
    monkeypatch.setattr(search, "_EAGER_LOGGED", [])
    with caplog.at_level(logging.WARNING):
        assert compiled(loop._draw_step, "reduce-overhead") is loop._draw_step
        assert compiled(loop._step_and_draw, "reduce-overhead") is loop._step_and_draw
    assert [r.getMessage() for r in caplog.records].count(
        "compile mode reduce-overhead: sampling runs eagerly under row-sharded randomness (several ranks)") == 1


def test_scst_trains_alike_with_decode_compile(tmp_path):
    """Stage 5-6's entry points with ``--decode_compile aot_eager``: validation's greedy
    captions and SCST's samples and baselines run through the compiled graphs and give the
    eager run's history."""
    from captionlib.rl.options import RLOptions
    from captionlib.rl.train import train_rl

    torch._dynamo.reset()
    data = train_tiny_xe(tmp_path)
    histories, graphs_made = {}, []
    for mode in ("none", "aot_eager"):
        counters.clear()
        out = tmp_path / f"scst_{mode}"
        train_rl(RLOptions(rl_algo="scst", init_param=str(tmp_path / "xe" / "valid.cider_d.best.pth"),
                           cider_df=str(tmp_path / "cider_df.npz"), train_data_dir=str(data),
                           valid_data_dir=str(data), output_dir=str(out), batch_size=2, max_epoch=2,
                           max_len=6, decode_compile=mode))
        histories[mode] = json.loads((out / "history.json").read_text())
        graphs_made.append(counters["stats"]["unique_graphs"])
    assert graphs_made[0] == 0 and graphs_made[1] >= 2, graphs_made  # the option reached the sampling loop
    eager, graphs = histories["none"], histories["aot_eager"]
    assert [h["steps"] for h in graphs] == [h["steps"] for h in eager] == [2, 2]
    for a, b in zip(eager, graphs):
        for key in ("train_reward", "train_baseline", "train_entropy", "train_sample_len", "valid_cider_d",
                    "valid_bleu_4"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
    weights = [torch.load(tmp_path / f"scst_{m}" / "latest.pth", weights_only=True)["model"] for m in histories]
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_reduce_overhead_replays_cuda_graphs_like_eager(decoder, conf):
    """On a GPU: greedy decoding under ``no_grad`` (each call a new CUDA graph tree iteration)
    gives the eager captions on every replay, and sampled updates with gradients summed over
    two passes (``accum_grad`` 2) keep the parameters finite."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Captioner(9, decoder=decoder, decoder_conf=conf).cuda().eval()
    feats = torch.randn(6, 40, 64, device="cuda")
    lens = torch.tensor([40, 30, 20, 40, 10, 25], device="cuda")
    with torch.no_grad():
        v = model.encode(feats, lens)
        want = sample(model, v, 12, greedy=True)
        for _ in range(4):  # compile, run eagerly, record, replay
            got = sample(model, v, 12, greedy=True, compile_mode="reduce-overhead")
            assert torch.equal(got.tokens, want.tokens)
            torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-4, atol=1e-4)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(4):
        for _ in range(2):
            out = sample(model, model.encode(feats, lens).repeat_interleave(2, 0), 12, compile_mode="reduce-overhead")
            assert out.mask[:, 0].all() and torch.isfinite(out.logprobs).all()
            (-(out.logprobs * out.mask).sum()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert all(torch.isfinite(p).all() for p in model.parameters())
