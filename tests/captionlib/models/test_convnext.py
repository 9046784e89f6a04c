"""Audio ConvNeXt encoder (captionlib.models.convnext): the authors' checkpoint layout loads
strictly, bad checkpoints fail naming the offending keys, the computation is the authors'
(Pellegrini et al. 2023, github.com/topel/audioset-convnext-inf
src/audioset_convnext_inf/pytorch/convnext.py), padding does not leak between the clips of a
batch, and feats_convnext.yaml is the authors' front end.

The checkpoint table below is written from the authors' code (``ConvNeXt.__init__``, ``Block``,
``LayerNorm``, ``convnext_tiny`` with ``after_stem_dim=[252, 56]`` as ``from_pretrained`` builds
it; torchlibrosa's ``Spectrogram`` / ``LogmelFilterBank`` with 224 mel bins), not from our
module: a module whose names or shapes drift from the published checkpoints fails here.
"""

import logging
from pathlib import Path

import librosa
import numpy as np
import pytest
import torch
import yaml
from torch.nn import functional as F

from captionlib.audio.features import LogMel
from captionlib.models.convnext import MIN_FRAMES, ConvNeXtEncoder, DropPath, load_pretrained
from captionlib.models.panns import FRONT_END_KEYS, FrontEndMismatchError, front_end_tensors
from captionlib.models.pretrained_load import CheckpointMismatchError
from checkpoints import assert_load_fails

REPO = Path(__file__).resolve().parents[3]
FEATS_CONVNEXT = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_convnext.yaml").read_text())
DIMS, DEPTHS = (96, 192, 384, 768), (3, 3, 9, 3)


def _norm(name, n, batch_norm=False):
    """State-dict entries of a LayerNorm(n) (the authors' or torch's), or of a BatchNorm2d(n)."""
    entries = {f"{name}.weight": (n,), f"{name}.bias": (n,)}
    if batch_norm:
        entries.update({f"{name}.running_mean": (n,), f"{name}.running_var": (n,), f"{name}.num_batches_tracked": ()})
    return entries


def _published():
    """The published checkpoint's names and shapes, from the authors' constructors."""
    table = {
        # torchlibrosa Spectrogram(n_fft=window_size=1024), LogmelFilterBank(n_mels=mel_bins=224)
        "spectrogram_extractor.stft.conv_real.weight": (513, 1, 1024),
        "spectrogram_extractor.stft.conv_imag.weight": (513, 1, 1024),
        "logmel_extractor.melW": (513, 224),
        **_norm("bn0", 224, batch_norm=True),  # nn.BatchNorm2d(224)
        # stem_audioset = nn.Conv2d(1, 96, kernel_size=(4, 4), stride=(4, 4), padding=(4, 0)), then LayerNorm(96)
        "downsample_layers.0.0.weight": (96, 1, 4, 4), "downsample_layers.0.0.bias": (96,),
        **_norm("downsample_layers.0.1", 96),
        # nn.LayerNorm(dims[-1]); nn.Linear(dims[-1], num_classes=527)
        **_norm("norm", 768), "head_audioset.weight": (527, 768), "head_audioset.bias": (527,),
    }
    for i in range(3):  # LayerNorm(dims[i]) then nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2)
        table.update(_norm(f"downsample_layers.{i + 1}.0", DIMS[i]))
        table[f"downsample_layers.{i + 1}.1.weight"] = (DIMS[i + 1], DIMS[i], 2, 2)
        table[f"downsample_layers.{i + 1}.1.bias"] = (DIMS[i + 1],)
    for i, (depth, d) in enumerate(zip(DEPTHS, DIMS)):  # Block(dim): dwconv 7x7 groups=dim, norm, pwconv1/2, gamma
        for j in range(depth):
            b = f"stages.{i}.{j}"
            table.update({f"{b}.dwconv.weight": (d, 1, 7, 7), f"{b}.dwconv.bias": (d,), **_norm(f"{b}.norm", d),
                          f"{b}.pwconv1.weight": (4 * d, d), f"{b}.pwconv1.bias": (4 * d,),
                          f"{b}.pwconv2.weight": (d, 4 * d), f"{b}.pwconv2.bias": (d,), f"{b}.gamma": (d,)})
    return table


PUBLISHED = _published()
FRONT_END = {k: PUBLISHED[k] for k in FRONT_END_KEYS}


def _authors_front_end(sr=32000, n_fft=1024, n_mels=224, fmin=50, fmax=14000):
    """torchlibrosa's front-end tensors from their definition: row k of the STFT kernels is
    w[n] * exp(-2 pi i k n / n_fft) with w the periodic Hann window; melW is librosa's mel
    matrix transposed; float32."""
    n = np.arange(n_fft)
    w = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft)
    phase = 2 * np.pi * np.outer(np.arange(n_fft // 2 + 1), n) / n_fft
    mel = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax)
    return {
        FRONT_END_KEYS[0]: torch.tensor((np.cos(phase) * w)[:, None, :], dtype=torch.float32),
        FRONT_END_KEYS[1]: torch.tensor((-np.sin(phase) * w)[:, None, :], dtype=torch.float32),
        FRONT_END_KEYS[2]: torch.tensor(mel.T, dtype=torch.float32),
    }


def _authors_checkpoint(path, seed=0, **front_end):
    """Write ``{"model": state_dict, "iteration": ..., "test_mAP": ...}`` (the authors' main.py
    layout) with random values of the published names and shapes, trained-like scales (norm
    weights near 1, layer scales of 0.25-0.75), and the authors' front end."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in PUBLISHED.items():
        if key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(70000)
        elif key.endswith("running_var"):
            state[key] = torch.rand(shape, generator=g) + 0.5
        elif key.endswith("gamma"):
            state[key] = torch.rand(shape, generator=g) * 0.5 + 0.25
        elif key.endswith(".weight") and len(shape) == 1:
            state[key] = 1 + torch.randn(shape, generator=g) * 0.1
        else:
            state[key] = torch.randn(shape, generator=g) * 0.05
    state.update(_authors_front_end(**front_end))
    torch.save({"model": state, "iteration": 70000, "test_mAP": np.float64(0.465)}, path)
    return state


def test_published_layout_is_the_encoder():
    with torch.device("meta"):
        enc = ConvNeXtEncoder()
    ours = {k: tuple(v.shape) for k, v in enc.state_dict().items()}
    assert ours == {k: s for k, s in PUBLISHED.items() if k not in FRONT_END}
    # the authors' count (checkpoints/config.yaml nb_params: trainable parameters, front end frozen)
    assert sum(p.numel() for p in enc.parameters()) == 28_222_767
    assert (enc.output_size, enc.cnn_output_size, enc.time_subsampling) == (768, 768, 32)


def test_authors_checkpoint_loads_strictly(tmp_path, caplog):
    path = tmp_path / "convnext_tiny_465mAP_BL_AC_70kit.pth"
    state = _authors_checkpoint(path)
    enc = ConvNeXtEncoder()
    with caplog.at_level(logging.INFO):
        load_pretrained(enc, str(path), FEATS_CONVNEXT)
    ours = enc.state_dict()
    assert set(ours) == set(state) - set(FRONT_END)
    for key, value in ours.items():
        assert torch.equal(value, state[key]), key
    assert any("front-end keys" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)


def test_front_end_of_the_features_config_is_the_authors():
    assert (FEATS_CONVNEXT["fs"], FEATS_CONVNEXT["n_fft"], FEATS_CONVNEXT["n_mels"]) == (32000, 1024, 224)
    assert (FEATS_CONVNEXT["fmin"], FEATS_CONVNEXT["fmax"]) == (50, 14000)
    assert (FEATS_CONVNEXT["log"], FEATS_CONVNEXT["pad_mode"]) == ("db", "reflect")
    extractor = LogMel(win_length_s=FEATS_CONVNEXT["win_length_s"], hop_length_s=FEATS_CONVNEXT["hop_length_s"],
                       n_fft=FEATS_CONVNEXT["n_fft"])
    assert extractor.frame_params(32000) == (1024, 320)
    ours, authors = front_end_tensors(FEATS_CONVNEXT), _authors_front_end()
    for key in FRONT_END:
        assert ours[key].shape == FRONT_END[key] and ours[key].dtype == torch.float32
        assert (ours[key] - authors[key]).abs().max() < 1e-6, key


def _fails(path, state, error=CheckpointMismatchError):
    return assert_load_fails(path, state, ConvNeXtEncoder(), load_pretrained, FEATS_CONVNEXT, error)


def test_renamed_key_fails_naming_both_keys(tmp_path):
    state = _authors_checkpoint(tmp_path / "ok.pth")
    state["stages.2.5.layer_scale"] = state.pop("stages.2.5.gamma")
    err = _fails(tmp_path / "renamed.pth", state)
    assert err.missing == ["stages.2.5.gamma"] and err.unexpected == ["stages.2.5.layer_scale"]
    assert "stages.2.5.gamma" in str(err) and "stages.2.5.layer_scale" in str(err)


def test_other_stem_fails_with_its_shape(tmp_path):
    # convnext_tiny's default after_stem_dim=[56]: Conv2d(1, 96, kernel_size=(18, 4), ...)
    state = _authors_checkpoint(tmp_path / "ok.pth")
    state["downsample_layers.0.0.weight"] = torch.zeros(96, 1, 18, 4)
    err = _fails(tmp_path / "stem56.pth", state)
    assert err.mis_shaped == [("downsample_layers.0.0.weight", (96, 1, 18, 4), (96, 1, 4, 4))]


def test_front_end_mismatch_fails(tmp_path):
    # 224 bins up to 16 kHz: same shapes, other filters
    state = _authors_checkpoint(tmp_path / "fmax.pth", fmax=16000)
    err = _fails(tmp_path / "fmax.pth", state, FrontEndMismatchError)
    assert FRONT_END_KEYS[2] in str(err) and FRONT_END_KEYS[0] not in str(err)
    assert "feats_convnext.yaml" in str(err)
    # the 64 bins of PANNs' front end: the mel matrix is mis-shaped
    state = _authors_checkpoint(tmp_path / "64.pth", n_mels=64)
    err = _fails(tmp_path / "64.pth", state)
    assert err.mis_shaped == [(FRONT_END_KEYS[2], (513, 64), (513, 224))]
    with pytest.raises(FileNotFoundError, match="zenodo.org/record/8020843"):
        load_pretrained(ConvNeXtEncoder(), str(tmp_path / "absent.pth"), FEATS_CONVNEXT)


def _authors_forward(enc, feats):
    """The authors' ConvNeXt forward in eval mode from the log-mel (1, T, 224) on, written from
    convnext.py with F ops on the encoder's parameters: the clip embedding (forward_features,
    before head_audioset) and the frame embeddings (batch, T', 768) (the last stage averaged
    over frequency, as the DCASE 2024 baseline's frame_embs)."""
    def ln_channels_first(x, m):  # the authors' LayerNorm(data_format="channels_first")
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return m.weight[:, None, None] * (x - u) / torch.sqrt(s + 1e-6) + m.bias[:, None, None]

    bn = enc.bn0
    x = F.batch_norm(feats[:, None].transpose(1, 3), bn.running_mean, bn.running_var, bn.weight, bn.bias,
                     False, 0.0, bn.eps).transpose(1, 3)  # (1, 1, T, 224)
    stem = enc.downsample_layers[0]
    x = ln_channels_first(F.conv2d(x, stem[0].weight, stem[0].bias, stride=(4, 4), padding=(4, 0)), stem[1])
    for i in range(4):
        if i:
            down = enc.downsample_layers[i]
            x = F.conv2d(ln_channels_first(x, down[0]), down[1].weight, down[1].bias, stride=2)
        for b in enc.stages[i]:
            y = F.conv2d(x, b.dwconv.weight, b.dwconv.bias, padding=3, groups=x.size(1)).permute(0, 2, 3, 1)
            y = F.layer_norm(y, (x.size(1),), b.norm.weight, b.norm.bias, 1e-6)
            y = F.linear(F.gelu(F.linear(y, b.pwconv1.weight, b.pwconv1.bias)), b.pwconv2.weight, b.pwconv2.bias)
            x = x + (b.gamma * y).permute(0, 3, 1, 2)
    x = x.mean(dim=3)  # (1, 768, T')
    clip = F.layer_norm(x.max(dim=2)[0] + x.mean(dim=2), (768,), enc.norm.weight, enc.norm.bias, 1e-6)
    return clip, x.transpose(1, 2)


@torch.no_grad()
def test_batched_equals_alone_and_the_authors_forward(tmp_path):
    _authors_checkpoint(tmp_path / "ck.pth", seed=1)
    enc = ConvNeXtEncoder()
    load_pretrained(enc, str(tmp_path / "ck.pth"), FEATS_CONVNEXT)
    enc.eval()
    lens = torch.tensor([130, 101, 57, 31, 24, 10])
    torch.manual_seed(0)
    feats = torch.randn(len(lens), int(lens.max()), 224) * 10 - 40  # dB-like values
    padded = feats.clone()
    padded[torch.arange(feats.size(1))[None, :] >= lens[:, None]] = 1e3  # loud padding: it must not leak
    v, frames = enc(padded, lens)
    out_lens = enc.output_lengths(lens, feats.size(1))
    assert v.shape == (len(lens), 768) and frames.shape == (len(lens), (130 // 4 + 2) // 8, 768)
    assert out_lens.tolist() == [max((n // 4 + 2) // 8, 1) for n in lens.tolist()] == [4, 3, 2, 1, 1, 1]
    for i, n in enumerate(lens.tolist()):
        k = int(out_lens[i])
        assert frames[i, k:].abs().sum() == 0
        v1, f1 = enc(feats[i: i + 1, :n], lens[i: i + 1])
        torch.testing.assert_close(v[i], v1[0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(frames[i, :k], f1[0, :k], rtol=1e-4, atol=1e-4)
        if n >= MIN_FRAMES:  # the authors' forward needs at least one output frame
            clip, seg = _authors_forward(enc, feats[i: i + 1, :n])
            assert seg.shape == f1.shape == (1, k, 768)
            torch.testing.assert_close(v1, clip, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(f1, seg, rtol=1e-4, atol=1e-4)
    # the authors' 10 s clip: 1001 frames -> 31 (their config.yaml: a 252-frame stem output)
    assert enc.output_lengths(torch.tensor([1001]), 1001).tolist() == [31]


def test_training_mode_drop_path_and_unused_head():
    enc = ConvNeXtEncoder(drop_path_rate=0.1).train()
    rates = [b.drop_path.p for stage in enc.stages for b in stage]
    assert len(rates) == 18 and rates[0] == 0 and rates[-1] == pytest.approx(0.1)
    feats, lens = torch.randn(2, 40, 224), torch.tensor([40, 33])
    v, frames = enc(feats, lens)
    (v.sum() + frames.sum()).backward()
    assert enc.head_audioset.weight.grad is None and enc.downsample_layers[0][0].weight.grad.abs().sum() > 0
    drop = DropPath(0.5).train()
    out = drop(torch.ones(1000, 3, 2, 2))
    assert set(out.unique().tolist()) == {0.0, 2.0} and 350 < int((out[:, 0, 0, 0] == 0).sum()) < 650
    assert torch.equal(drop.eval()(torch.ones(4, 3)), torch.ones(4, 3))
    with pytest.raises(ValueError, match="n_mels >= 32"):
        ConvNeXtEncoder(n_mels=16)


def test_a_conette_resave_is_named_with_the_rename_to_undo(tmp_path):
    """CoNeTTE's ConvNeXtBlock renames the published layer scales ``gamma`` to ``scale_layer``
    when it loads them, so a state dict it saves again has the new names: one line says so and
    how to rename them back; loading stays strict (nothing loaded)."""
    state = _authors_checkpoint(tmp_path / "ok.pth")
    resaved = {k[: -len("gamma")] + "scale_layer" if k.endswith(".gamma") else k: v for k, v in state.items()}
    err = _fails(tmp_path / "conette.pth", resaved)
    msg = str(err)
    assert len(err.missing) == len(err.unexpected) == sum(DEPTHS) and "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'conette.pth'}: the checkpoint does not match ConvNeXtEncoder (nothing was "
                          "loaded): it looks like a CoNeTTE re-save"), msg
    assert "<block>.gamma to <block>.scale_layer (18 keys, stages.0.0.scale_layer ...)" in msg, msg
    assert "rename every 'stages.<i>.<j>.scale_layer' key back to 'stages.<i>.<j>.gamma'" in msg, msg
    assert "stages.2.5.gamma" not in msg  # not the 36 keys
    # renamed back, it loads
    load_pretrained(ConvNeXtEncoder(), str(tmp_path / "ok.pth"), FEATS_CONVNEXT)


def test_the_reference_front_end_is_feats_convnext_yaml():
    from captionlib.models.convnext import CONVNEXT_FRONT_END

    assert CONVNEXT_FRONT_END == {k: FEATS_CONVNEXT[k] for k in CONVNEXT_FRONT_END}
