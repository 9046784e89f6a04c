"""--decode_compile cuda-graph: the whole sampling loop as one captured CUDA graph. On the CPU:
the static loop it captures (all max_len steps, no host synchronisation) gives sample()'s
captions, padded memories change nothing, and the cache and copy logic around the capture
(with the capture replaced by a recording of the loop). Its CUDA test runs only on a GPU."""

import logging

import pytest
import torch

from captionlib.decode import cuda_graph
from captionlib.decode.search import decode_loop, sample, trimmed
from captionlib.models.batch_parts import BatchParts, cat_encodings
from captionlib.models.captioner import Captioner

DECODERS = [
    ("gru", {}),
    ("att_lstm", {"hidden_size": 16, "att_size": 8}),
    ("transformer", {"num_layers": 1, "d_model": 16, "nhead": 2, "dim_feedforward": 32}),
]
FEATS, LENS = torch.randn(6, 40, 64), torch.tensor([40, 30, 20, 40, 10, 25])


def _model(decoder, conf, device="cpu"):
    torch.manual_seed(0)
    return Captioner(9, decoder=decoder, decoder_conf=conf).to(device)


def _same(a, b, exact=True):
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    for x, y in ((a.logprobs, b.logprobs), (a.entropy, b.entropy)):
        torch.testing.assert_close(x, y, rtol=0 if exact else 1e-5, atol=0 if exact else 1e-5)


@pytest.mark.parametrize("decoder, conf", DECODERS)
@pytest.mark.parametrize("greedy", [True, False])
def test_the_static_loop_gives_the_captions_of_sample(decoder, conf, greedy):
    model = _model(decoder, conf).train()
    with torch.no_grad():
        v = model.encode(FEATS, LENS)
        torch.manual_seed(3)
        want = sample(model, v, 40, greedy=greedy, sync_every=1, return_states=True)
        torch.manual_seed(3)
        full = decode_loop(model, v, 40, greedy, 1.0, 0, True, 0, sync_every=0)
    assert full.tokens.size(1) == 40  # all steps run
    assert greedy or want.tokens.size(1) < 40  # sample() stopped early (an untrained greedy decoder never ends)
    got = trimmed(full)
    _same(got, want)
    assert torch.equal(got.states, want.states)


@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_the_static_loop_of_a_baseline_and_samples_gives_the_captions_of_sample(decoder, conf):
    """greedy_rows (the RL baseline decoded with the samples): the static loop draws on for the
    sampled rows after they end, where sample() lets the greedy rows go on alone; the same captions."""
    model = _model(decoder, {**conf, "dropout": 0.3}).train()
    with torch.no_grad():
        v = model.encode(FEATS, LENS)
        both = cat_encodings([v, v.repeat_interleave(2, 0)])
        torch.manual_seed(3)
        want = sample(model, both, 40, sync_every=1, greedy_rows=6)
        torch.manual_seed(3)
        full = decode_loop(model, both, 40, False, 1.0, 0, False, 6, sync_every=0)
    _same(trimmed(full), want)


@pytest.mark.parametrize("decoder, conf", DECODERS[1:])
def test_memories_padded_to_the_frame_multiple_decode_alike(decoder, conf):
    model = _model(decoder, conf).eval()
    with torch.no_grad():
        v = model.encode(FEATS, LENS)
        padded = cuda_graph.padded_frames(v)
        assert v[1].size(1) % cuda_graph.FRAME_MULTIPLE != 0 and padded[1].size(1) % cuda_graph.FRAME_MULTIPLE == 0
        assert torch.equal(padded[1][:, : v[1].size(1)], v[1]) and not padded[1][:, v[1].size(1):].any()
        assert torch.equal(padded[0], v[0]) and torch.equal(padded[2], v[2])
        _same(sample(model, padded, 12, greedy=True), sample(model, v, 12, greedy=True), exact=False)
    plain = torch.randn(3, 8)
    assert cuda_graph.padded_frames(plain) is plain


def test_encodings_flatten_and_rebuild_in_order():
    a, b, c = torch.zeros(2, 3), torch.ones(2, 4, 5), torch.tensor([4, 2])
    v = BatchParts((a, BatchParts((b, c))))
    parts = cuda_graph.flat_parts(v)
    assert [p.data_ptr() for p in parts] == [a.data_ptr(), b.data_ptr(), c.data_ptr()]
    back = cuda_graph.with_parts(v, [p + 1 for p in parts])
    assert isinstance(back, BatchParts) and isinstance(back[1], BatchParts) and torch.equal(back[1][1], c + 1)
    assert cuda_graph.flat_parts(a) == [a] and cuda_graph.with_parts(a, [b]) is b


def test_off_a_gpu_or_with_gradients_sample_decodes_eagerly():
    model = _model("gru", {}).eval()
    v = model.encode(FEATS, LENS)
    assert not cuda_graph.replayable(v.detach())  # the CPU
    with torch.no_grad():
        assert cuda_graph.graphed_sample(model, v, 12, True, 1.0, 0, False) is None
        _same(sample(model, v, 12, greedy=True, compile_mode="cuda-graph"), sample(model, v, 12, greedy=True))
    torch.manual_seed(1)
    got = sample(model, v, 12, compile_mode="cuda-graph")  # with gradients: the eager loop, same draws
    torch.manual_seed(1)
    _same(got, sample(model, v, 12))
    assert got.logprobs.requires_grad


class _Recording:
    """Stands in for a captured CUDA graph on the CPU: replay() runs the static loop again on
    the static inputs and writes its results into the static outputs."""

    def __init__(self, model, static_v, settings):
        self.run = lambda: decode_loop(model, static_v, *settings, sync_every=0)
        self.output = self.run()

    def replay(self):
        for static, new in zip(vars(self.output).values(), vars(self.run()).values()):
            if static is not None:
                static.copy_(new)


def _recorded_capture(model, parts, v, settings):
    """Stands in for ``cuda_graph._capture``: a :class:`_Recording` of the loop on static copies
    of ``parts``."""
    inputs = [t.clone() for t in parts]
    graph = _Recording(model, cuda_graph.with_parts(v, inputs), settings)
    return cuda_graph._Graph(graph, inputs, graph.output)


def test_the_cache_copies_inputs_in_and_clones_trimmed_outputs_out(monkeypatch):
    captures = []

    def capture(*args):
        entry = _recorded_capture(*args)
        captures.append(entry.graph)
        return entry

    monkeypatch.setattr(cuda_graph, "replayable", lambda v: not torch.is_grad_enabled())
    monkeypatch.setattr(cuda_graph, "_capture", capture)
    monkeypatch.setattr(cuda_graph, "_GRAPHS", type(cuda_graph._GRAPHS)())
    monkeypatch.setattr(cuda_graph, "CACHE_SIZE", 2)
    model = _model("transformer", DECODERS[2][1]).eval()
    with torch.no_grad():
        v1, v2 = model.encode(FEATS, LENS), model.encode(FEATS.flip(0), LENS.flip(0))
        first = cuda_graph.graphed_sample(model, v1, 12, True, 1.0, 0, False)
        second = cuda_graph.graphed_sample(model, v2, 12, True, 1.0, 0, False)  # same shapes: a replay
        assert len(captures) == 1
        _same(first, sample(model, v1, 12, greedy=True), exact=False)
        _same(second, sample(model, v2, 12, greedy=True), exact=False)
        assert first.tokens.data_ptr() != captures[0].output.tokens.data_ptr()  # cloned out of the static outputs
        cuda_graph.graphed_sample(model, v1[:3], 12, True, 1.0, 0, False)  # another batch size
        cuda_graph.graphed_sample(model, v1, 8, True, 1.0, 0, False)  # another max_len: the first is dropped
        assert len(captures) == 3 and len(cuda_graph._GRAPHS) == 2
        cuda_graph.graphed_sample(model, v1, 12, True, 1.0, 0, False)
        assert len(captures) == 4
        model.decoder.train()  # a module's mode (dropout) is part of the key, not only the model's flag
        cuda_graph.graphed_sample(model, v1, 12, True, 1.0, 0, False)
        assert len(captures) == 5


@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_a_graphed_pass_of_a_baseline_and_samples_keeps_the_baseline_rows_greedy(decoder, conf, monkeypatch):
    """sample(compile_mode="cuda-graph", greedy_rows=k) in training mode, through the cache with the
    capture replaced by a recording: the first k rows are the eval-mode greedy captions (arg-max
    and no dropout reach the captured loop), the others samples."""
    monkeypatch.setattr(cuda_graph, "replayable", lambda v: not torch.is_grad_enabled())
    monkeypatch.setattr(cuda_graph, "_capture", _recorded_capture)
    monkeypatch.setattr(cuda_graph, "_GRAPHS", type(cuda_graph._GRAPHS)())
    model = _model(decoder, {**conf, "dropout": 0.3}).eval()
    with torch.no_grad():
        v = model.encode(FEATS, LENS)
        greedy = sample(model, v, 12, greedy=True)
        model.train()
        torch.manual_seed(3)
        both = sample(model, cat_encodings([v, v.repeat_interleave(2, 0)]), 12, compile_mode="cuda-graph",
                      greedy_rows=6)
    assert len(cuda_graph._GRAPHS) == 1 and both.states is None
    assert torch.equal(trimmed(both.rows(slice(0, 6))).tokens, greedy.tokens)
    assert both.mask[6:, 0].all() and not torch.equal(both.tokens[6:12], both.tokens[12:])  # drawn rows


def test_a_failed_capture_is_logged_once_and_the_process_decodes_eagerly(monkeypatch, caplog):
    calls = []

    def capture(*_):
        calls.append(1)
        try:
            raise ValueError("operation not permitted when stream is capturing")
        except ValueError:  # what capture_end raises hides the op's error: the log names the op's
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture") from None

    monkeypatch.setattr(cuda_graph, "replayable", lambda v: True)
    monkeypatch.setattr(cuda_graph, "_capture", capture)
    monkeypatch.setattr(cuda_graph, "_DISABLED", [])
    model = _model("gru", {}).eval()
    with torch.no_grad(), caplog.at_level(logging.WARNING):
        v = model.encode(FEATS, LENS)
        assert cuda_graph.graphed_sample(model, v, 12, True, 1.0, 0, False) is None
        assert cuda_graph.graphed_sample(model, v[:2], 12, True, 1.0, 0, False) is None  # another shape
        _same(sample(model, v, 12, greedy=True, compile_mode="cuda-graph"), sample(model, v, 12, greedy=True))
    msgs = [r.getMessage() for r in caplog.records]
    assert len(calls) == 1 and len(msgs) == 1, msgs
    assert "could not be captured (ValueError: operation not permitted when stream is capturing); every pass" \
        in msgs[0], msgs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("decoder, conf", DECODERS)
def test_replayed_graphs_decode_like_the_eager_loop_on_a_gpu(decoder, conf):
    """Greedy captions of a replayed graph are the eager loop's, for new inputs of a captured
    shape too; sampled captions are valid (their draws come from graph-safe Philox offsets)."""
    model = _model(decoder, conf, "cuda").eval()
    feats, lens = FEATS.cuda(), LENS.cuda()
    with torch.no_grad():
        for f, n in ((feats, lens), (feats.flip(0), lens.flip(0)), (feats[:4], lens[:4])):
            v = model.encode(f, n)
            want = sample(model, v, 12, greedy=True)
            for _ in range(2):  # capture, replay
                _same(sample(model, v, 12, greedy=True, compile_mode="cuda-graph"), want, exact=False)
        v = model.encode(feats, lens)
        greedy = sample(model, v, 12, greedy=True)
        model.train()
        out = sample(model, model.encode(feats, lens).repeat_interleave(3, 0), 12, compile_mode="cuda-graph")
        assert out.mask[:, 0].all() and torch.isfinite(out.logprobs).all() and (out.tokens >= 0).all()
        # the RL baseline and the samples in one replay: the greedy rows as in eval mode (no dropout)
        both = sample(model, cat_encodings([v, v.repeat_interleave(3, 0)]), 12, compile_mode="cuda-graph",
                      greedy_rows=v.size(0))
        assert torch.equal(trimmed(both.rows(slice(0, v.size(0)))).tokens, greedy.tokens)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_replays_under_autocast_read_the_weights_of_the_moment_on_a_gpu(monkeypatch):
    """--amp bf16: a graph captured in one autocast region, replayed in another after an
    optimizer step, decodes like the eager loop with the new weights (autocast's weight cache
    is off during the capture, so the graph casts the current weights itself)."""
    monkeypatch.setattr(cuda_graph, "_GRAPHS", type(cuda_graph._GRAPHS)())
    model = _model("gru", {}, "cuda").eval()
    feats, lens = FEATS.cuda(), LENS.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            with torch.no_grad():
                v = model.encode(feats, lens)
                got = sample(model, v, 12, greedy=True, compile_mode="cuda-graph")
                want = sample(model, v, 12, greedy=True)
            _same(got, want, exact=False)
            model.train()  # cuDNN's RNN backward runs in training mode only
            loss = model.decoder.forward_teacher(model.encode(feats, lens), got.tokens).float().logsumexp(-1).mean()
        loss.backward()
        model.eval()
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert len(cuda_graph._GRAPHS) == 1  # one capture, replayed with the updated weights


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_capture_broken_by_a_host_sync_leaves_the_stream_and_eager_decoding_usable(monkeypatch):
    monkeypatch.setattr(cuda_graph, "_DISABLED", [])
    model = _model("gru", {}, "cuda").eval()
    step = model.decoder.step

    def syncing_step(tokens, state):
        tokens.sum().item()  # a host synchronisation: not capturable
        return step(tokens, state)

    monkeypatch.setattr(model.decoder, "step", syncing_step)
    with torch.no_grad():
        v = model.encode(FEATS.cuda(), LENS.cuda())
        got = sample(model, v, 12, greedy=True, compile_mode="cuda-graph")
        assert cuda_graph._DISABLED
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        _same(got, sample(model, v, 12, greedy=True))
