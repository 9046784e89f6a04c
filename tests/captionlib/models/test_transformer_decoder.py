"""The Transformer decoder (``decoder: transformer``): cached step-wise decoding against teacher
forcing and prefix recomputation, torch's own decoder layer, the padding mask, and the searches,
ensembles and sampling of captionlib on it."""

import importlib.util
from pathlib import Path

import pytest
import torch
from test_registry import D, V, _feats  # vocabulary 14 (0 = padding, 13 = eos), feature size 24, padded clips
from torch import nn

from captionlib.decode.ensemble import Ensemble
from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.models.batch_parts import BatchParts
from captionlib.models.captioner import Captioner, load_model_file, model_file_dict, xe_loss, xe_targets
from captionlib.models.transformer import TransformerDecoder, row_slots, sinusoidal_positions

ROOT = Path(__file__).resolve().parents[3]
TINY = dict(num_layers=2, d_model=16, nhead=4, dim_feedforward=32)
VARIANTS = [dict(norm_first=nf, positional=pos) for nf in (False, True) for pos in ("sinusoidal", "learned")]


def _decoder(seed=0, memory_size=20, **conf):
    torch.manual_seed(seed)
    return TransformerDecoder(V, memory_size=memory_size, **{**TINY, **conf}).eval()


def _encoding(batch=4, frames=7, size=20, seed=1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, frames + 1, (batch,), generator=g)
    lens[0] = frames
    memory = torch.randn(batch, frames, size, generator=g) * (torch.arange(frames)[None, :, None] < lens[:, None, None])
    return BatchParts((memory.mean(1), memory, lens))


def _captioner(seed=0, **conf):
    torch.manual_seed(seed)
    m = Captioner(V, feats_dim=D, encoder="linear", encoder_conf={"output_size": 20, "dropout": 0.0},
                  decoder="transformer", decoder_conf={**TINY, **conf}).eval()
    with torch.no_grad():  # peaky outputs so that captions differ between clips and end at different steps
        m.decoder.output.weight.mul_(4.0)
        m.encoder.proj.weight.mul_(3.0)
    return m


def _stepwise(dec, enc, ys):
    """Log-probs (batch, length + 1, vocab) fed ``ys`` one step at a time through the cache."""
    logp, state = dec.first_step(enc)
    out = [logp]
    for t in range(ys.size(1)):
        logp, state = dec.step(ys[:, t], state)
        out.append(logp)
    return torch.stack(out, 1), state


@pytest.mark.parametrize("conf", VARIANTS, ids=lambda c: f"{c['positional']}-{'pre' if c['norm_first'] else 'post'}")
@torch.no_grad()
def test_teacher_forced_logits_equal_cached_steps(conf):
    dec = _decoder(**conf)
    enc = _encoding()
    ys = torch.randint(1, V - 1, (4, 6))
    ys[1, 3:] = 0  # a shorter caption, 0-padded
    teacher = torch.log_softmax(dec.forward_teacher(enc, ys), dim=-1)
    steps, state = _stepwise(dec, enc, ys)
    assert teacher.shape == (4, 7, V) and torch.isinf(teacher[..., 0]).all()
    assert torch.allclose(teacher[..., 1:], steps[..., 1:], atol=1e-5)
    assert dec.step_hidden(state).shape == (4, 16)
    # the same token alignment as the other decoders: targets are xe_targets(ys)
    loss = xe_loss(dec.forward_teacher(enc, ys), xe_targets(ys, torch.tensor([6, 3, 6, 6]), V - 1))
    assert torch.isfinite(loss)


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_layer_equals_torch_transformer_decoder_layer(norm_first):
    layer = _decoder(norm_first=norm_first).layers[0]
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 6, 16)
    valid = torch.arange(6)[None, :] < torch.tensor([6, 2, 4])[:, None]
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    ref = nn.TransformerDecoderLayer.forward(layer, x, memory, tgt_mask=causal, tgt_is_causal=True,
                                             memory_key_padding_mask=~valid)
    out, _ = layer(x, None, layer.memory_keys_values(memory), valid[:, None, None, :])
    assert torch.allclose(out, ref, atol=1e-6)


@torch.no_grad()
def test_cached_step_equals_recomputing_the_whole_prefix_after_reordering():
    dec = _decoder(norm_first=True)
    enc = _encoding()
    ys = torch.randint(1, V - 1, (4, 6))
    _, state = _stepwise(dec, enc, ys[:, :3])
    rows, prefix = torch.arange(4), ys[:, :3]
    # beam search's select/repeat of rows, twice: rows of one clip attend to its memory together
    for t, idx in ((3, torch.tensor([2, 2, 0, 3, 1])), (4, torch.tensor([4, 0, 1, 1])), (5, None)):
        if idx is not None:
            reordered = dec.reorder_state(state, idx)
            rows, prefix = rows[idx], prefix[idx]
            assert reordered.memory is state.memory and torch.equal(reordered.clip, rows)  # kept once per clip
            state = reordered
        logp, state = dec.step(ys[rows, t], state)
        prefix = torch.cat([prefix, ys[rows, t: t + 1]], 1)
        full = torch.log_softmax(dec.forward_teacher(enc[rows], prefix)[:, -1], dim=-1)
        assert torch.allclose(logp[:, 1:], full[:, 1:], atol=1e-5)
    slot, most = row_slots(torch.tensor([2, 2, 0, 3, 2]), 4)
    assert slot.tolist() == [0, 1, 0, 0, 2] and most == 3


@torch.no_grad()
def test_padding_mask_is_respected():
    dec = _decoder()
    enc = _encoding()
    _, memory, lens = enc
    padded = torch.arange(memory.size(1))[None, :, None] >= lens[:, None, None]
    assert padded.any()
    noisy = memory + 100.0 * torch.randn_like(memory) * padded
    other = BatchParts((enc[0], noisy, lens))
    ys = torch.randint(1, V - 1, (4, 4))
    assert torch.allclose(dec.forward_teacher(enc, ys)[..., 1:], dec.forward_teacher(other, ys)[..., 1:], atol=1e-6)
    assert torch.allclose(_stepwise(dec, enc, ys)[0][..., 1:], _stepwise(dec, other, ys)[0][..., 1:], atol=1e-6)
    # a pooled (batch, embed) vector is a memory of one slot
    v = enc[0]
    one_slot = BatchParts((v, v[:, None], torch.ones(4, dtype=torch.long)))
    assert torch.allclose(dec.forward_teacher(v, ys)[..., 1:], dec.forward_teacher(one_slot, ys)[..., 1:], atol=1e-6)


@torch.no_grad()
def test_batched_equals_alone_for_greedy_and_beam():
    m = _captioner()
    feats, lens = _feats()  # 11 clips > EVAL_CHUNK["cpu"]: the chunked, padded eval encoding too
    v = m.encode(feats, lens)
    greedy, beam = greedy_search(m, v, 8), beam_search(m, v, 3, 8)
    assert len({tuple(r.tolist()) for r in beam}) > 1  # clips are told apart
    for i in range(feats.size(0)):
        alone = m.encode(feats[i: i + 1, : int(lens[i])], lens[i: i + 1])
        g = greedy_search(m, alone, 8)[0]
        assert torch.equal(greedy[i, : g.numel()], g)
        b = beam_search(m, alone, 3, 8)[0]
        assert torch.equal(beam[i, : b.numel()], b)


@torch.no_grad()
def test_word_level_ensemble_of_a_gru_and_a_transformer_model():
    tfm = _captioner(positional="learned")
    torch.manual_seed(3)
    gru = Captioner(V, feats_dim=D, encoder="linear", encoder_conf={"output_size": 16},
                    decoder_conf={"hidden_size": 12}).eval()
    feats, lens = _feats(batch=5)
    ens = Ensemble([gru, tfm])
    v = ens.encode(feats, lens)
    lp, _ = ens.first_step(v)
    expected = torch.logaddexp(gru.first_step(gru.encode(feats, lens))[0], tfm.first_step(tfm.encode(feats, lens))[0])
    assert torch.allclose(lp, expected - torch.log(torch.tensor(2.0)), atol=1e-6)
    torch.manual_seed(0)
    assert sample(ens, v.repeat_interleave(2, 0), 6).tokens.size(0) == 10
    greedy, beam = greedy_search(ens, v, 8), beam_search(ens, v, 3, 8)
    for i in range(5):
        alone = ens.encode(feats[i: i + 1, : int(lens[i])], lens[i: i + 1])
        g, b = greedy_search(ens, alone, 8)[0], beam_search(ens, alone, 3, 8)[0]
        assert torch.equal(greedy[i, : g.numel()], g) and torch.equal(beam[i, : b.numel()], b)


def test_sampling_with_step_hidden_and_gradients():
    m = _captioner(norm_first=True, tie_embeddings=True).train()
    feats, lens = _feats(batch=3)
    torch.manual_seed(0)
    out = sample(m, m.encode(feats, lens).repeat_interleave(2, 0), max_len=6, return_states=True)
    assert out.states.shape == (6, out.tokens.size(1), m.decoder.hidden_size)
    (out.logprobs.sum() + out.states.sum()).backward()
    assert m.decoder.embed.weight.grad.abs().sum() > 0 and m.encoder.proj.weight.grad.abs().sum() > 0


@torch.no_grad()
def test_tied_embeddings_survive_a_model_file(tmp_path):
    conf = {"vocab_size": V, "feats_dim": D, "encoder": "linear", "encoder_conf": {"output_size": 20},
            "decoder": "transformer", "decoder_conf": {**TINY, "tie_embeddings": True}}
    m = Captioner(**conf).eval()
    assert m.decoder.output.weight is m.decoder.embed.weight
    torch.save(model_file_dict(m, conf, [str(i) for i in range(V)]), tmp_path / "m.pth")
    loaded, _ = load_model_file(str(tmp_path / "m.pth"))
    assert loaded.decoder.output.weight is loaded.decoder.embed.weight
    feats, lens = _feats(batch=3)
    expected = beam_search(m, m.encode(feats, lens), 3, 8)
    assert torch.equal(beam_search(loaded, loaded.encode(feats, lens), 3, 8), expected)


def test_positions_and_errors():
    pe = sinusoidal_positions(torch.arange(3), 6)
    assert torch.allclose(pe[2, 0::2], torch.sin(2 / 10000 ** (torch.arange(0, 6, 2) / 6)))
    assert torch.allclose(pe[2, 1::2], torch.cos(2 / 10000 ** (torch.arange(0, 6, 2) / 6)))
    dec = _decoder(positional="learned", max_len=4)
    with pytest.raises(ValueError, match="max_len 4"):
        dec.forward_teacher(_encoding(), torch.ones(4, 4, dtype=torch.long))
    for bad, match in [({"nhead": 3}, "divisible"), ({"activation": "tanh"}, "activation"),
                       ({"positional": "rotary"}, "positional"), ({"num_layers": 0}, "num_layers")]:
        with pytest.raises(ValueError, match=match):
            TransformerDecoder(V, **{**TINY, **bad})


def test_decoding_benchmark_runs_on_tiny_sizes(capsys):
    spec = importlib.util.spec_from_file_location("bench_transformer_decode",
                                                  ROOT / "bench" / "bench_transformer_decode.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--num_threads", "1", "--reps", "1", "--batch_size", "3", "--length", "4", "--vocab", "30",
                "--min_s", "1", "--max_s", "2", "--decoder_conf", "{num_layers: 2, d_model: 8, nhead: 2}"])
    out = capsys.readouterr().out
    assert "choose the same tokens: True" in out and "| key/value cache (step) |" in out, out
