"""The encoder/decoder registry: Show-and-Tell (linear + lstm), Top-Down attention
(linear + att_lstm), S2VT-style (rnn + lstm), and the CRNN under an attention decoder."""

import pytest
import torch

from captionlib.decode.ensemble import Ensemble
from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.models.batch_parts import BatchParts, cat_encodings, pooled
from captionlib.models.captioner import (
    DECODERS,
    ENCODERS,
    Captioner,
    count_parameters,
    load_model_file,
    model_feats_dim,
    model_file_dict,
)
from captionlib.models.encoders import LinearEncoder, RNNEncoder

V = 14
D = 24
COMBOS = {
    "show_and_tell": dict(encoder="linear", encoder_conf={"output_size": 16}, decoder="lstm",
                          decoder_conf={"hidden_size": 20}),
    "top_down": dict(encoder="linear", encoder_conf={"output_size": 16}, decoder="att_lstm",
                     decoder_conf={"hidden_size": 20, "embed_size": 8, "att_size": 12}),
    "s2vt": dict(encoder="rnn", encoder_conf={"proj_size": 12, "hidden_size": 16}, decoder="lstm",
                 decoder_conf={"hidden_size": 20, "init_state": "audio"}),
    "rnn_gru_att": dict(encoder="rnn", encoder_conf={"proj_size": 0, "hidden_size": 16, "cell": "gru"},
                        decoder="att_lstm", decoder_conf={"hidden_size": 20, "embed_size": 8, "att_size": 12}),
}


def _model(name, seed=0):
    torch.manual_seed(seed)
    m = Captioner(V, feats_dim=D, **COMBOS[name]).eval()
    with torch.no_grad():  # peaky outputs so that captions differ between clips and end at different steps
        m.decoder.output.weight.mul_(4.0)
        for pname, param in m.named_parameters():
            if "weight_ih" in pname or pname.startswith(("decoder.init", "encoder.proj")):
                param.mul_(3.0)
    return m


def _feats(batch=11, frames=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, frames + 1, (batch,), generator=g)
    lens[0] = frames
    feats = torch.randn(batch, frames, D, generator=g)
    feats = feats * (torch.arange(frames)[None, :, None] < lens[:, None, None])
    return feats, lens


def test_registry_names():
    assert set(ENCODERS) == {"crnn", "linear", "rnn", "cnn14", "cnn10", "convnext", "beats"}
    assert set(DECODERS) == {"gru", "lstm", "att_lstm", "transformer"}
    with pytest.raises(ValueError, match="unknown encoder"):
        Captioner(V, feats_dim=D, encoder="cnn3d")
    with pytest.raises(ValueError, match="unknown decoder"):
        Captioner(V, feats_dim=D, encoder="linear", decoder="conformer")
    with pytest.raises(ValueError, match="not both"):
        Captioner(V, feats_dim=D, n_mels=D)


@pytest.mark.parametrize("name", sorted(COMBOS))
@torch.no_grad()
def test_batched_encoding_and_decoding_equal_each_clip_alone(name):
    # 11 clips > EVAL_CHUNK["cpu"]: the chunked eval encoding (memory padded per chunk) is covered too
    m = _model(name)
    feats, lens = _feats()
    v = m.encode(feats, lens)
    assert isinstance(v, BatchParts) == (COMBOS[name]["decoder"] == "att_lstm")
    greedy, beam = greedy_search(m, v, 8), beam_search(m, v, 3, 8)
    assert len({tuple(r.tolist()) for r in beam}) > 1  # clips are told apart
    for i in range(feats.size(0)):
        alone = m.encode(feats[i: i + 1, : int(lens[i])], lens[i: i + 1])
        assert torch.allclose(pooled(alone), pooled(v)[i: i + 1], atol=1e-6)
        g = greedy_search(m, alone, 8)[0]
        assert torch.equal(greedy[i, : g.numel()], g)
        b = beam_search(m, alone, 3, 8)[0]
        assert torch.equal(beam[i, : b.numel()], b)


@pytest.mark.parametrize("name", sorted(COMBOS))
@torch.no_grad()
def test_teacher_forcing_equals_step_by_step_decoding(name):
    m = _model(name)
    feats, lens = _feats(batch=4)
    v = m.encode(feats, lens)
    ys = torch.randint(1, V - 1, (4, 5))
    teacher = torch.log_softmax(m.decoder.forward_teacher(v, ys), dim=-1)
    logp, state = m.first_step(v)
    steps = [logp]
    for t in range(ys.size(1)):
        logp, state = m.step(ys[:, t], state)
        steps.append(logp)
    assert torch.allclose(teacher, torch.stack(steps, dim=1), atol=1e-5)
    # reorder_state picks batch entries of every part of the state
    idx = torch.tensor([3, 3, 0])
    lp_r, _ = m.step(ys[idx, 0], m.reorder_state(m.first_step(v)[1], idx))
    lp_s, _ = m.step(ys[idx, 0], m.first_step(v[idx])[1])
    assert torch.allclose(lp_r, lp_s, atol=1e-6)


def test_attention_gradient_reaches_the_memory_and_padding_is_ignored():
    m = _model("top_down").train()
    m.decoder.dropout.p = m.encoder.dropout.p = 0.0
    feats, lens = _feats(batch=3)
    feats.requires_grad_(True)
    logits = m(feats, lens, torch.randint(1, V - 1, (3, 4)))
    logits[..., 1:].logsumexp(-1).sum().backward()
    grad = feats.grad
    valid = torch.arange(feats.size(1))[None, :] < lens[:, None]
    assert grad[valid].abs().sum(-1).gt(0).all()  # every valid region is attended
    assert grad[~valid].abs().sum() == 0  # padding never is


def test_encoders_by_hand():
    lin = LinearEncoder(D, output_size=5, dropout=0.0)
    x = torch.randn(2, 3, D)
    v, frames = lin(x, torch.tensor([1, 3]))
    assert torch.allclose(v[0], torch.relu(lin.proj(x[0, 0])), atol=1e-6)  # one frame: Show-and-Tell embedding
    assert torch.allclose(v[1], torch.relu(lin.proj(x[1])).mean(0), atol=1e-6)
    assert frames[0, 1:].abs().sum() == 0
    rnn = RNNEncoder(D, proj_size=6, hidden_size=7, dropout=0.0)
    v, out, pooled_frames = rnn.forward_with_cnn(x, torch.tensor([2, 3]))
    full, _ = rnn.rnn(torch.relu(rnn.proj(x)))
    assert torch.allclose(v[0], full[0, 1], atol=1e-6) and torch.allclose(v[1], full[1, 2], atol=1e-6)
    assert torch.allclose(pooled_frames[0], torch.relu(rnn.proj(x[0, :2])).mean(0), atol=1e-6)
    with pytest.raises(ValueError, match="lstm or gru"):
        RNNEncoder(D, cell="rnn")


def test_batch_parts_operations():
    a, b, n = torch.randn(3, 2), torch.randn(3, 4, 2), torch.tensor([4, 1, 2])
    p = BatchParts((a, b, n))
    assert p.size(0) == 3 and p.device == a.device and pooled(p) is a
    assert torch.equal(p[1:2][1], b[1:2]) and torch.equal(p.repeat_interleave(2, 0)[2], n.repeat_interleave(2))
    assert torch.equal(p[torch.tensor([2, 0])][0], a[[2, 0]])
    assert p[0:1].expand(5, -1)[1].shape == (5, 4, 2)
    short = BatchParts((a[:1], b[:1, :2], n[:1]))
    both = cat_encodings([p, short])
    assert both[1].shape == (4, 4, 2) and both[1][3, 2:].abs().sum() == 0
    with pytest.raises(ValueError, match="batch size"):
        BatchParts((a, b[:2]))
    with pytest.raises(ValueError, match="batch axis"):
        p.size(1)


@torch.no_grad()
def test_ensemble_of_attention_and_gru_models():
    att = _model("top_down")
    torch.manual_seed(3)
    gru = Captioner(V, feats_dim=D, encoder="linear", encoder_conf={"output_size": 16},
                    decoder_conf={"hidden_size": 12}).eval()
    feats, lens = _feats(batch=5)
    one = Ensemble([att])
    assert torch.equal(beam_search(one, one.encode(feats, lens), 3, 8), beam_search(att, att.encode(feats, lens), 3, 8))
    ens = Ensemble([att, gru])
    v = ens.encode(feats, lens)
    assert isinstance(v, BatchParts) and len(v) == 2
    lp, _ = ens.first_step(v)
    expected = torch.logaddexp(att.first_step(att.encode(feats, lens))[0], gru.first_step(gru.encode(feats, lens))[0])
    assert torch.allclose(lp, expected - torch.log(torch.tensor(2.0)), atol=1e-6)
    torch.manual_seed(0)
    out = sample(ens, v.repeat_interleave(2, 0), 6)
    assert out.tokens.size(0) == 10
    b = beam_search(ens, v, 3, 8)
    for i in range(5):
        alone = beam_search(ens, ens.encode(feats[i: i + 1, : int(lens[i])], lens[i: i + 1]), 3, 8)[0]
        assert torch.equal(b[i, : alone.numel()], alone)


def test_model_files_round_trip_and_read_the_old_feature_key(tmp_path):
    conf = {"vocab_size": V, "feats_dim": D, **COMBOS["top_down"]}
    m = Captioner(**conf)
    torch.save(model_file_dict(m, conf, [str(i) for i in range(V)]), tmp_path / "m.pth")
    loaded, obj = load_model_file(str(tmp_path / "m.pth"))
    assert model_feats_dim(obj["model_conf"]) == D
    assert count_parameters(loaded) == count_parameters(m) > 0
    old = {"vocab_size": V, "n_mels": 64, "decoder_conf": {"hidden_size": 8}, "encoder_conf": {"rnn_units": 8}}
    assert model_feats_dim(old) == 64 and Captioner(**old).feats_mean.numel() == 64


@pytest.mark.parametrize("change, expected", [
    (lambda o: o["token_list"].extend(["x", "y"]),
     f"its token_list has {V + 2} tokens, its model_conf vocab_size is {V}"),
    (lambda o: o["token_list"].pop(), f"its token_list has {V - 1} tokens"),
    (lambda o: o["model_conf"].update(bogus=1), "unexpected keyword argument 'bogus'"),
    (lambda o: o.update(model_conf="crnn"), "model_conf must be a mapping and token_list a list, got str"),
    (lambda o: o["model"].pop(next(iter(o["model"]))), "Missing key"),
])
def test_a_model_file_that_does_not_build_its_model_is_named(tmp_path, change, expected):
    """A token list longer than the vocabulary decoded wrong words silently; the others ended in
    tracebacks that did not name the file (a tampered packed model among them)."""
    conf = {"vocab_size": V, "feats_dim": D, **COMBOS["top_down"]}
    obj = model_file_dict(Captioner(**conf), dict(conf), [str(i) for i in range(V)])
    change(obj)
    torch.save(obj, tmp_path / "m.pth")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'm.pth'}: .*") as e:
        load_model_file(str(tmp_path / "m.pth"))
    assert expected in str(e.value)


def test_caption_train_offers_the_registry():
    from captionbin.caption_train import get_parser

    actions = {a.dest: a for a in get_parser()._actions}
    assert sorted(actions["encoder"].choices) == sorted(ENCODERS)
    assert sorted(actions["decoder"].choices) == sorted(DECODERS)


@pytest.mark.parametrize("conf, expected", [
    (dict(encoder="linear", decoder="gru", decoder_conf={"num_layer": 2}),
     r"decoder_conf \(decoder 'gru'\): unknown key\(s\) 'num_layer' of GRUDecoder; its keys: .*hidden_size"),
    (dict(encoder="linear", encoder_conf={"output_sise": 8}),
     r"encoder_conf \(encoder 'linear'\): unknown key\(s\) 'output_sise' of LinearEncoder; its keys: output_size"),
    (dict(encoder="linear", encoder_conf={"transformer": {"n_layers": 1}}),
     r"encoder_conf\.transformer: unknown key\(s\) 'n_layers' of TransformerEncoderStack"),
    (dict(encoder="linear", specaug_conf={"time_mask": 3}),
     r"specaug_conf: unknown key\(s\) 'time_mask' of SpecAugment"),
])
def test_an_unknown_conf_key_is_named_with_the_keys_taken(conf, expected):
    """A typo in a nested mapping used to end in Python's TypeError, naming the class's
    __init__ but neither the config key nor what it takes."""
    with pytest.raises(ValueError, match=expected):
        Captioner(V, feats_dim=D, **conf)
