"""BEATs encoder (captionlib.models.beats): the authors' checkpoint layout loads strictly after
its cfg and the features config are checked, bad checkpoints fail naming what differs and load
nothing, the computation is the authors' (Chen et al. 2023, github.com/microsoft/unilm
beats/BEATs.py and beats/backbone.py), and padding does not leak between the clips of a batch.

The checkpoint table and :func:`_authors_forward` are written from the authors' code (read, not
copied: ``BEATs.__init__``/``extract_features``, ``TransformerEncoder``,
``TransformerSentenceEncoderLayer`` with ``deep_norm``, ``MultiheadAttention.forward`` with its
``alpha = 32`` scaling, ``_relative_positions_bucket`` and the gated bias), not from our module.
Our module was also compared with the authors' code itself, run unmodified with random weights
(egs/clotho/README.md, "Pretrained encoders"); that code needs torchaudio, so it is not run here.
"""

import math
from pathlib import Path

import pytest
import torch
import yaml

from captionlib.models.beats import FBANK_MEAN, FBANK_STD, BEATsEncoder, load_pretrained
from captionlib.models.panns import FrontEndMismatchError
from captionlib.models.pretrained_load import CheckpointMismatchError

REPO = Path(__file__).resolve().parents[3]
FEATS_BEATS = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_beats.yaml").read_text())
TINY = dict(embed_dim=32, encoder_layers=2, encoder_embed_dim=48, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
            conv_pos=16, conv_pos_groups=4, num_buckets=64, max_distance=100)
#: the authors' cfg of such a checkpoint (BEATsConfig keys)
TINY_CFG = dict(TINY, input_patch_size=16, conv_bias=False, activation_fn="gelu", layer_norm_first=False,
                deep_norm=True, relative_position_embedding=True, gru_rel_pos=True, finetuned_model=True,
                predictor_class=5, dropout=0.1, encoder_layerdrop=0.05, layer_wise_gradient_decay_ratio=0.6)


def _published(layers=12, dim=768, ffn=3072, heads=12, embed=512, conv_pos=128, groups=16, buckets=320, classes=527):
    """The published checkpoint's names and shapes, from the authors' constructors."""
    table = {"patch_embedding.weight": (embed, 1, 16, 16),  # nn.Conv2d(1, embed_dim, 16, 16, bias=conv_bias=False)
             "layer_norm.weight": (embed,), "layer_norm.bias": (embed,),
             "post_extract_proj.weight": (dim, embed), "post_extract_proj.bias": (dim,),
             # weight_norm(nn.Conv1d(dim, dim, conv_pos, groups=conv_pos_groups), dim=2) in nn.Sequential
             "encoder.pos_conv.0.bias": (dim,), "encoder.pos_conv.0.weight_g": (1, 1, conv_pos),
             "encoder.pos_conv.0.weight_v": (dim, dim // groups, conv_pos),
             "encoder.layer_norm.weight": (dim,), "encoder.layer_norm.bias": (dim,),
             "predictor.weight": (classes, dim), "predictor.bias": (classes,)}
    for i in range(layers):
        p = f"encoder.layers.{i}"
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            table.update({f"{p}.self_attn.{proj}.weight": (dim, dim), f"{p}.self_attn.{proj}.bias": (dim,)})
        table.update({f"{p}.self_attn.relative_attention_bias.weight": (buckets, heads),  # layer 0's, shared
                      f"{p}.self_attn.grep_linear.weight": (8, dim // heads), f"{p}.self_attn.grep_linear.bias": (8,),
                      f"{p}.self_attn.grep_a": (1, heads, 1, 1),
                      f"{p}.fc1.weight": (ffn, dim), f"{p}.fc1.bias": (ffn,), f"{p}.fc2.weight": (dim, ffn),
                      f"{p}.fc2.bias": (dim,)})
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            table.update({f"{p}.{norm}.weight": (dim,), f"{p}.{norm}.bias": (dim,)})
    return table


def test_published_layout_is_the_encoder():
    enc = BEATsEncoder()
    assert {k: tuple(v.shape) for k, v in enc.state_dict().items()} == _published()
    assert sum(p.numel() for p in enc.parameters()) == 90_717_055  # the authors' model's count
    tiny = BEATsEncoder(**TINY, classes_num=0)
    expected = _published(2, 48, 64, 4, 32, 16, 4, 64)
    assert {k: tuple(v.shape) for k, v in tiny.state_dict().items()} == {
        k: v for k, v in expected.items() if not k.startswith("predictor")}


def _checkpoint(path, seed=0, cfg=TINY_CFG, **changes):
    """A checkpoint in the authors' layout ({"cfg", "model"}) with every tensor random (biases,
    LayerNorms, gates and the shared bias table included, so that every path counts); returns
    its state dict."""
    torch.manual_seed(seed)
    state = {k: v + 0.1 * torch.randn(v.shape) for k, v in BEATsEncoder(**TINY, classes_num=5).state_dict().items()}
    table = torch.randn(64, 4)
    for k in state:
        if k.endswith("relative_attention_bias.weight"):
            state[k] = table
    state.update(changes)
    torch.save({"cfg": cfg, "model": state}, path)
    return state


def _authors_forward(state, fbank):
    """The authors' ``extract_features`` + predictor (eval mode) on one clip's fbank (frames, 128),
    from the state dict alone: (tokens (1, L, 48), clip probabilities (1, 5))."""
    lin = lambda x, n: x @ state[f"{n}.weight"].T + state[f"{n}.bias"]  # noqa: E731
    ln = lambda x, n: torch.nn.functional.layer_norm(x, x.shape[-1:], state[f"{n}.weight"], state[f"{n}.bias"])  # noqa: E731
    x = ((fbank - FBANK_MEAN) / (2 * FBANK_STD))[None, None]
    x = torch.nn.functional.conv2d(x, state["patch_embedding.weight"], stride=16)
    x = ln(x.reshape(1, x.shape[1], -1).transpose(1, 2), "layer_norm")
    x = lin(x, "post_extract_proj")
    v, g = state["encoder.pos_conv.0.weight_v"], state["encoder.pos_conv.0.weight_g"]
    w = v * g / torch.norm(v.transpose(0, 2).reshape(v.shape[2], -1), dim=1).reshape(1, 1, -1)
    conv = torch.nn.functional.conv1d(x.transpose(1, 2), w, state["encoder.pos_conv.0.bias"], padding=8, groups=4)
    x = ln(x + torch.nn.functional.gelu(conv[:, :, :-1]).transpose(1, 2), "encoder.layer_norm")
    x = x.transpose(0, 1)  # T x B x C
    L, heads, d, alpha = x.shape[0], 4, 12, 32
    buckets = torch.zeros(L, L, dtype=torch.long)
    for i in range(L):  # _relative_positions_bucket(memory - context), bidirectional, 64 buckets, max 100
        for j in range(L):
            rel, n = j - i, 32
            b = n if rel > 0 else 0
            rel, exact = abs(rel), n // 2
            b += rel if rel < exact else min(exact + int(math.log(rel / exact) / math.log(100 / exact) * (n - exact)),
                                             n - 1)
            buckets[i, j] = b
    pos_bias = state["encoder.layers.0.self_attn.relative_attention_bias.weight"][buckets].permute(2, 0, 1)
    deep = math.pow(2 * 2, 1 / 4)
    for i in range(2):
        p = f"encoder.layers.{i}"
        q = lin(x, f"{p}.self_attn.q_proj") * d ** -0.5 / alpha
        k, val = lin(x, f"{p}.self_attn.k_proj"), lin(x, f"{p}.self_attn.v_proj")
        q, k, val = (t.reshape(L, heads, d).transpose(0, 1) for t in (q, k, val))
        att = torch.bmm(q, k.transpose(1, 2))
        att = (att - att.max(dim=-1, keepdim=True)[0]) * alpha
        query = q.view(1, heads, L, d) * alpha / d ** -0.5
        gate_a, gate_b = torch.sigmoid(lin(query, f"{p}.self_attn.grep_linear").view(1, heads, L, 2, 4).sum(-1)).chunk(
            2, dim=-1)
        gate = gate_a * (gate_b * state[f"{p}.self_attn.grep_a"] - 1.0) + 2.0
        att = torch.softmax(att + gate.view(heads, L, 1) * pos_bias, dim=-1)
        out = lin(torch.bmm(att, val).transpose(0, 1).reshape(L, 1, heads * d), f"{p}.self_attn.out_proj")
        x = ln(x * deep + out, f"{p}.self_attn_layer_norm")
        x = ln(x * deep + lin(torch.nn.functional.gelu(lin(x, f"{p}.fc1")), f"{p}.fc2"), f"{p}.final_layer_norm")
    x = x.transpose(0, 1)
    return x, torch.sigmoid(lin(x, "predictor").mean(dim=1))


def _loaded(tmp_path):
    state = _checkpoint(tmp_path / "beats.pt")
    enc = BEATsEncoder(**TINY, classes_num=5)
    load_pretrained(enc, str(tmp_path / "beats.pt"), FEATS_BEATS)
    return enc.eval(), state


def test_authors_checkpoint_loads_and_computes_the_authors_forward(tmp_path):
    enc, state = _loaded(tmp_path)
    assert all(torch.equal(v, state[k]) for k, v in enc.state_dict().items())
    torch.manual_seed(1)
    fbank = torch.randn(250, 128) * 3 + 10  # 15 steps of 8 patches: 120 tokens
    with torch.no_grad():
        tokens, lens = enc.tokens(fbank[None], torch.tensor([250]))
        ref, probs = _authors_forward(state, fbank)
        v, frames = enc(fbank[None], torch.tensor([250]))
    assert tokens.shape == (1, 15, 8, 48) and lens.tolist() == [15]
    assert (tokens.flatten(1, 2) - ref).abs().max() < 1e-5 * ref.abs().max()
    assert (torch.sigmoid(enc.predictor(tokens.flatten(1, 2)).mean(1)) - probs).abs().max() < 1e-6
    assert torch.allclose(frames, ref.unflatten(1, (15, 8)).mean(2), atol=1e-5)
    assert torch.allclose(v, frames.mean(1), atol=1e-6)


def test_batched_equals_alone():
    torch.manual_seed(0)
    enc = BEATsEncoder(**TINY, classes_num=0).eval()
    clips = [torch.randn(n, 128) * 3 + 10 for n in (200, 133, 7)]
    batch = torch.nn.utils.rnn.pad_sequence(clips, batch_first=True, padding_value=-3.0)
    lens = torch.tensor([c.size(0) for c in clips])
    with torch.no_grad():
        vb, fb = enc(batch, lens)
        assert enc.output_lengths(lens, 200).tolist() == [12, 8, 1] and fb.shape == (3, 12, 48)
        for i, c in enumerate(clips):
            v, f = enc(c[None], lens[i:i + 1])
            n = f.size(1)
            assert n == max(1, c.size(0) // 16)
            assert torch.allclose(fb[i, :n], f[0], atol=1e-5) and torch.allclose(vb[i], v[0], atol=1e-5)
            assert not fb[i, n:].any()


def test_training_mode_has_dropout_and_gradients():
    torch.manual_seed(0)
    enc = BEATsEncoder(**TINY, classes_num=0).train()
    x = torch.randn(2, 64, 128)
    v1, _ = enc(x, torch.tensor([64, 40]))
    v2, _ = enc(x, torch.tensor([64, 40]))
    assert not torch.allclose(v1, v2)
    v1.sum().backward()
    assert all(p.grad is not None for n, p in enc.named_parameters() if "predictor" not in n)


def _fails(tmp_path, error, feats_config=FEATS_BEATS, **kwargs):
    """Load a checkpoint saved by ``_checkpoint(**kwargs)``: ``error`` naming the file, no weight changed."""
    path = tmp_path / "bad.pt"
    _checkpoint(path, **kwargs)
    enc = BEATsEncoder(**TINY, classes_num=5)
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    with pytest.raises(error) as e:
        load_pretrained(enc, str(path), feats_config)
    assert str(path) in str(e.value)
    assert all(torch.equal(v, before[k]) for k, v in enc.state_dict().items())
    return str(e.value)


def test_bad_checkpoints_fail_naming_what_differs(tmp_path):
    # a renamed key: both named
    state = _checkpoint(tmp_path / "ok.pt")
    renamed = {("encoder.layers.1.self_attn.gate_a" if k == "encoder.layers.1.self_attn.grep_a" else k): v
               for k, v in state.items()}
    torch.save({"cfg": TINY_CFG, "model": renamed}, tmp_path / "renamed.pt")
    with pytest.raises(CheckpointMismatchError) as e:
        load_pretrained(BEATsEncoder(**TINY, classes_num=5), str(tmp_path / "renamed.pt"), FEATS_BEATS)
    assert e.value.missing == ["encoder.layers.1.self_attn.grep_a"]
    assert e.value.unexpected == ["encoder.layers.1.self_attn.gate_a"]
    # another architecture in the cfg: each differing key named with both values
    msg = _fails(tmp_path, ValueError, cfg=dict(TINY_CFG, max_distance=1280, deep_norm=False, predictor_class=527))
    assert "max_distance: checkpoint 1280, encoder 100" in msg and "deep_norm: checkpoint False, encoder True" in msg
    assert "predictor_class: checkpoint 527, encoder 5" in msg
    # the authors' default for a key absent from the cfg
    msg = _fails(tmp_path, ValueError, cfg={k: v for k, v in TINY_CFG.items() if k != "gru_rel_pos"})
    assert "gru_rel_pos: checkpoint False, encoder True" in msg
    msg = _fails(tmp_path, ValueError, cfg=None)
    assert "no 'cfg' mapping" in msg
    # layers whose copies of the shared bias table differ
    msg = _fails(tmp_path, ValueError,
                 **{"encoder.layers.1.self_attn.relative_attention_bias.weight": torch.zeros(64, 4)})
    assert "encoder.layers.1.self_attn.relative_attention_bias.weight" in msg
    # features of another front end
    msg = _fails(tmp_path, FrontEndMismatchError, feats_config=dict(FEATS_BEATS, frontend="stft", fs=32000))
    assert "frontend: 'stft' (BEATs: 'kaldi')" in msg and "fs: 32000 (BEATs: 16000)" in msg
    # 64 bands: the weights would fit (4 patches per time step), but the checkpoints were trained on 128
    msg = _fails(tmp_path, FrontEndMismatchError, feats_config=dict(FEATS_BEATS, n_mels=64))
    assert "n_mels: 64 (BEATs: 128)" in msg
    with pytest.raises(FileNotFoundError, match="github.com/microsoft/unilm/tree/master/beats"):
        load_pretrained(BEATsEncoder(**TINY), str(tmp_path / "absent.pt"), FEATS_BEATS)


def test_self_supervised_checkpoint_has_no_head(tmp_path):
    torch.manual_seed(0)
    state = BEATsEncoder(**TINY, classes_num=0).state_dict()
    cfg = dict(TINY_CFG, finetuned_model=False)
    torch.save({"cfg": cfg, "model": state}, tmp_path / "ssl.pt")
    enc = BEATsEncoder(**TINY, classes_num=0)
    load_pretrained(enc, str(tmp_path / "ssl.pt"), FEATS_BEATS)
    assert enc.predictor is None
    with pytest.raises(ValueError, match="finetuned_model: checkpoint False, encoder True"):
        load_pretrained(BEATsEncoder(**TINY, classes_num=5), str(tmp_path / "ssl.pt"), FEATS_BEATS)
    with pytest.raises(ValueError, match="n_mels must be a positive multiple of 16"):
        BEATsEncoder(n_mels=120)


def test_features_configs_are_beats_front_end():
    from captionbin import caption_dump_feats
    from captionlib.models.beats import check_front_end

    pre = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_pretrained_beats.yaml").read_text())
    for conf in (FEATS_BEATS, pre):
        check_front_end(conf, "conf")
    assert {k: v for k, v in pre.items() if k not in ("feats_type", "encoder", "pretrained")} == {
        k: v for k, v in FEATS_BEATS.items() if k != "feats_type"}
    args = caption_dump_feats.get_parser().parse_args(
        ["--config", str(REPO / "egs" / "clotho" / "conf" / "feats_pretrained_beats.yaml"), "--wav_scp", "x",
         "--out_prefix", "y"])
    caption_dump_feats.check_feats_type(vars(args))
    assert (args.encoder, args.frontend, args.n_mels) == ("beats", "kaldi", 128)


def test_gradients_reach_the_gates_and_the_bias_table_as_the_authors(tmp_path):
    # fine-tuning trains the gated relative position bias: its gradients come through SDPA's mask
    enc, state = _loaded(tmp_path)
    torch.manual_seed(2)
    fbank = torch.randn(100, 128) * 3 + 10
    tokens, _ = enc.tokens(fbank[None], torch.tensor([100]))
    (tokens.flatten(1, 2) ** 2).sum().backward()
    ref_state = {k: v.clone().requires_grad_(True) for k, v in state.items()}
    table = "encoder.layers.0.self_attn.relative_attention_bias.weight"
    for i in range(2):  # the authors' layers all use layer 0's table
        ref_state[f"encoder.layers.{i}.self_attn.relative_attention_bias.weight"] = ref_state[table]
    ref, _ = _authors_forward(ref_state, fbank)
    (ref ** 2).sum().backward()
    layers = enc.encoder.layers
    for ours, key in [(layers[0].self_attn.relative_attention_bias.weight, table),
                      (layers[1].self_attn.grep_a, "encoder.layers.1.self_attn.grep_a"),
                      (layers[0].self_attn.grep_linear.weight, "encoder.layers.0.self_attn.grep_linear.weight")]:
        theirs = ref_state[key].grad
        assert ours.grad is not None and theirs.abs().max() > 0, key
        assert (ours.grad - theirs).abs().max() < 1e-4 * theirs.abs().max(), key
