"""PANNs CNN14 / CNN10 encoders (captionlib.models.panns): the authors' checkpoint layout loads
strictly, bad checkpoints fail naming every offending key, the computation is the authors'
(Kong et al. 2020, github.com/qiuqiangkong/audioset_tagging_cnn pytorch/models.py), padding
does not leak between the clips of a batch, and both register as captioner encoders.

The checkpoint tables below are written from the authors' code (``Cnn10`` / ``Cnn14`` /
``ConvBlock`` constructors, torchlibrosa's ``STFT`` and ``LogmelFilterBank``), not from our
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

from captionlib.decode.search import greedy_search
from captionlib.models.batch_parts import BatchParts
from captionlib.models.captioner import Captioner
from captionlib.models.panns import (
    FRONT_END_KEYS,
    Cnn10Encoder,
    Cnn14Encoder,
    FrontEndMismatchError,
    front_end_tensors,
    load_pretrained,
)
from captionlib.models.pretrained_load import CheckpointMismatchError
from checkpoints import assert_load_fails

REPO = Path(__file__).resolve().parents[3]
FEATS_PANNS = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml").read_text())


def _bn(name, n):
    """The state-dict entries of a torch BatchNorm2d(n) (as the authors' checkpoints hold them)."""
    return {f"{name}.weight": (n,), f"{name}.bias": (n,), f"{name}.running_mean": (n,),
            f"{name}.running_var": (n,), f"{name}.num_batches_tracked": ()}


# torchlibrosa Spectrogram(n_fft=window_size=1024) and LogmelFilterBank(n_mels=mel_bins=64)
FRONT_END = {
    "spectrogram_extractor.stft.conv_real.weight": (513, 1, 1024),  # Conv1d(1, n_fft // 2 + 1, n_fft)
    "spectrogram_extractor.stft.conv_imag.weight": (513, 1, 1024),
    "logmel_extractor.melW": (513, 64),  # librosa.filters.mel(...).T
}
# Cnn10: bn0 = BatchNorm2d(64); ConvBlock(1, 64) .. ConvBlock(256, 512) with conv1/conv2 3x3 without
# bias and bn1/bn2; fc1 = Linear(512, 512); fc_audioset = Linear(512, classes_num=527)
CNN10_PUBLISHED = {
    **FRONT_END, **_bn("bn0", 64),
    "conv_block1.conv1.weight": (64, 1, 3, 3), "conv_block1.conv2.weight": (64, 64, 3, 3),
    **_bn("conv_block1.bn1", 64), **_bn("conv_block1.bn2", 64),
    "conv_block2.conv1.weight": (128, 64, 3, 3), "conv_block2.conv2.weight": (128, 128, 3, 3),
    **_bn("conv_block2.bn1", 128), **_bn("conv_block2.bn2", 128),
    "conv_block3.conv1.weight": (256, 128, 3, 3), "conv_block3.conv2.weight": (256, 256, 3, 3),
    **_bn("conv_block3.bn1", 256), **_bn("conv_block3.bn2", 256),
    "conv_block4.conv1.weight": (512, 256, 3, 3), "conv_block4.conv2.weight": (512, 512, 3, 3),
    **_bn("conv_block4.bn1", 512), **_bn("conv_block4.bn2", 512),
    "fc1.weight": (512, 512), "fc1.bias": (512,),
    "fc_audioset.weight": (527, 512), "fc_audioset.bias": (527,),
}
# Cnn14: Cnn10's first four blocks, then ConvBlock(512, 1024), ConvBlock(1024, 2048); fc1 2048 -> 2048
CNN14_PUBLISHED = {
    **{k: s for k, s in CNN10_PUBLISHED.items() if not k.startswith("fc")},
    "conv_block5.conv1.weight": (1024, 512, 3, 3), "conv_block5.conv2.weight": (1024, 1024, 3, 3),
    **_bn("conv_block5.bn1", 1024), **_bn("conv_block5.bn2", 1024),
    "conv_block6.conv1.weight": (2048, 1024, 3, 3), "conv_block6.conv2.weight": (2048, 2048, 3, 3),
    **_bn("conv_block6.bn1", 2048), **_bn("conv_block6.bn2", 2048),
    "fc1.weight": (2048, 2048), "fc1.bias": (2048,),
    "fc_audioset.weight": (527, 2048), "fc_audioset.bias": (527,),
}


def _authors_front_end(sr=32000, n_fft=1024, n_mels=64, fmin=50, fmax=14000, window=None):
    """torchlibrosa's front-end tensors, computed here from their definition: row k of the STFT
    kernels is w[n] * exp(-2 pi i k n / n_fft) (real, imaginary parts) with w the periodic Hann
    window; melW is librosa's mel matrix transposed; float32."""
    n = np.arange(n_fft)
    w = 0.5 - 0.5 * np.cos(2 * np.pi * n / n_fft) if window is None else window
    phase = 2 * np.pi * np.outer(np.arange(n_fft // 2 + 1), n) / n_fft
    return {
        FRONT_END_KEYS[0]: torch.tensor((np.cos(phase) * w)[:, None, :], dtype=torch.float32),
        FRONT_END_KEYS[1]: torch.tensor((-np.sin(phase) * w)[:, None, :], dtype=torch.float32),
        FRONT_END_KEYS[2]: torch.tensor(librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin,
                                                            fmax=fmax).T, dtype=torch.float32),
    }


def _authors_checkpoint(path, table, seed=0, **front_end):
    """Write ``{"model": state_dict, "iteration": ...}`` (the authors' main.py layout) with
    random values of the published names and shapes and the authors' front end."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in table.items():
        if key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(660000)
        elif key.endswith("running_var"):
            state[key] = torch.rand(shape, generator=g) + 0.5
        else:
            state[key] = torch.randn(shape, generator=g) * 0.05
    state.update(_authors_front_end(**front_end))
    torch.save({"model": state, "iteration": 660000}, path)
    return state


def test_published_layouts_are_the_encoders():
    for cls, table, ts, size in ((Cnn10Encoder, CNN10_PUBLISHED, 16, 512), (Cnn14Encoder, CNN14_PUBLISHED, 32, 2048)):
        with torch.device("meta"):  # shapes only: no 80M-parameter initialisation
            enc = cls()
        ours = {k: tuple(v.shape) for k, v in enc.state_dict().items()}
        published = {k: s for k, s in table.items() if k not in FRONT_END}
        assert ours == published, cls.__name__
        assert (enc.time_subsampling, enc.output_size) == (ts, size)


def test_authors_checkpoint_loads_strictly(tmp_path, caplog):
    path = tmp_path / "Cnn10_mAP=0.380.pth"
    state = _authors_checkpoint(path, CNN10_PUBLISHED)
    enc = Cnn10Encoder()
    with caplog.at_level(logging.INFO):
        load_pretrained(enc, str(path), FEATS_PANNS)
    ours = enc.state_dict()
    assert set(ours) == set(state) - set(FRONT_END)
    for key, value in ours.items():
        assert torch.equal(value, state[key]), key
    line = [r.getMessage() for r in caplog.records if "front-end keys" in r.getMessage()]
    assert len(line) == 1 and all(k in line[0] for k in FRONT_END) and str(path) in line[0]


def test_front_end_of_the_features_config_is_the_authors():
    ours, authors = front_end_tensors(FEATS_PANNS), _authors_front_end()
    for key in FRONT_END:
        assert ours[key].shape == FRONT_END[key] and ours[key].dtype == torch.float32
        assert (ours[key] - authors[key]).abs().max() < 1e-6, key
    with pytest.raises(ValueError, match="no fs"):
        front_end_tensors({**FEATS_PANNS, "fs": None})


def _fails(path, state, error=CheckpointMismatchError, feats_config=FEATS_PANNS):
    return assert_load_fails(path, state, Cnn10Encoder(), load_pretrained, feats_config, error)


def test_renamed_key_fails_naming_both_keys(tmp_path):
    state = _authors_checkpoint(tmp_path / "ok.pth", CNN10_PUBLISHED)
    state["conv_block2.bn1.running_avg"] = state.pop("conv_block2.bn1.running_mean")
    err = _fails(tmp_path / "renamed.pth", state)
    assert err.missing == ["conv_block2.bn1.running_mean"] and err.unexpected == ["conv_block2.bn1.running_avg"]
    assert "conv_block2.bn1.running_mean" in str(err) and "conv_block2.bn1.running_avg" in str(err)
    assert isinstance(err, ValueError)


def test_every_offending_key_is_listed(tmp_path):
    state = _authors_checkpoint(tmp_path / "ok.pth", CNN10_PUBLISHED)
    state["fc_audioset.weight"] = torch.zeros(10, 512)  # a head of 10 classes
    del state["fc1.bias"], state[FRONT_END_KEYS[2]]
    state["module.extra"] = torch.zeros(1)
    err = _fails(tmp_path / "bad.pth", state)
    assert err.missing == sorted(["fc1.bias", FRONT_END_KEYS[2]]) and err.unexpected == ["module.extra"]
    assert err.mis_shaped == [("fc_audioset.weight", (10, 512), (527, 512))]
    assert "fc_audioset.weight: checkpoint (10, 512), expected (527, 512)" in str(err)


def test_front_end_of_other_settings_fails(tmp_path):
    # the melW of Cnn14_16k (16 kHz, 50-8000 Hz): same shape, other filters
    state = _authors_checkpoint(tmp_path / "16k.pth", CNN10_PUBLISHED, sr=16000, fmax=8000)
    with pytest.raises(FrontEndMismatchError, match="front end differs from the features config") as e:
        load_pretrained(Cnn10Encoder(), str(tmp_path / "16k.pth"), FEATS_PANNS)
    assert str(tmp_path / "16k.pth") in str(e.value) and FRONT_END_KEYS[2] in str(e.value)
    assert FRONT_END_KEYS[0] not in str(e.value)
    # a Hamming window: the STFT kernels differ
    state = _authors_checkpoint(tmp_path / "ham.pth", CNN10_PUBLISHED, window=np.hamming(1025)[:-1])
    err = _fails(tmp_path / "ham.pth", state, FrontEndMismatchError)
    assert FRONT_END_KEYS[0] in str(err) and FRONT_END_KEYS[2] not in str(err)
    # a 512-point STFT (n_fft of the 16 kHz models): shapes differ, listed with them
    state = _authors_checkpoint(tmp_path / "512.pth", CNN10_PUBLISHED, n_fft=512)
    err = _fails(tmp_path / "512.pth", state)
    assert (FRONT_END_KEYS[0], (257, 1, 512), (513, 1, 1024)) in err.mis_shaped
    assert (FRONT_END_KEYS[2], (257, 64), (513, 64)) in err.mis_shaped
    # the same checkpoint is right for a features config with that front end
    load_pretrained(Cnn10Encoder(), str(tmp_path / "16k.pth"),
                    {**FEATS_PANNS, "fs": 16000, "fmax": 8000, "win_length_s": 0.064})


def test_a_file_that_is_not_a_state_dict_fails(tmp_path):
    torch.save({"model": {"fc1.weight": [1.0]}}, tmp_path / "list.pth")
    with pytest.raises(ValueError, match="list.pth: not a state dict: entry 'fc1.weight' is a list"):
        load_pretrained(Cnn10Encoder(), str(tmp_path / "list.pth"), FEATS_PANNS)
    with pytest.raises(FileNotFoundError):
        load_pretrained(Cnn10Encoder(), str(tmp_path / "absent.pth"), FEATS_PANNS)


def _authors_forward(enc, feats, time_pools):
    """The authors' Cnn10/Cnn14 forward in eval mode from the log-mel (our features) on, written
    from pytorch/models.py with F ops on the encoder's parameters: the clip ``embedding``
    (Cnn14.forward) and the frame vectors (Cnn14_DecisionLevelMax, before fc_audioset)."""
    def bn(x, m):
        return F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, False, 0.0, m.eps)

    x = bn(feats[:, None].transpose(1, 3), enc.bn0).transpose(1, 3)  # (1, 1, T, 64)
    for i, pool in enumerate(time_pools):
        b = getattr(enc, f"conv_block{i + 1}")
        x = F.relu(bn(F.conv2d(x, b.conv1.weight, padding=1), b.bn1))
        x = F.relu(bn(F.conv2d(x, b.conv2.weight, padding=1), b.bn2))
        x = F.avg_pool2d(x, kernel_size=(pool, pool))
    x = x.mean(dim=3)  # (1, C, T')
    emb = F.relu(enc.fc1(x.max(dim=2)[0] + x.mean(dim=2)))
    seg = F.max_pool1d(x, 3, 1, 1) + F.avg_pool1d(x, 3, 1, 1)
    return emb, F.relu(enc.fc1(seg.transpose(1, 2)))


@torch.no_grad()
@pytest.mark.parametrize("cls, pools, lens", [(Cnn10Encoder, [2] * 4, [200, 137, 45, 16, 9]),
                                              (Cnn14Encoder, [2] * 5 + [1], [130, 97, 64, 31])])
def test_batched_equals_alone_and_the_authors_forward(cls, pools, lens):
    torch.manual_seed(0)
    enc = cls().eval()
    for m in enc.modules():  # non-trivial BatchNorm statistics, as a trained model has
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    lens = torch.tensor(lens)
    feats = torch.randn(len(lens), int(lens.max()), 64) * 10 - 40  # dB-like values
    padded = feats.clone()
    padded[torch.arange(feats.size(1))[None, :] >= lens[:, None]] = 1e3  # loud padding: it must not leak
    v, frames = enc(padded, lens)
    ts = enc.time_subsampling
    out_lens = enc.output_lengths(lens, feats.size(1))
    assert v.shape == (len(lens), enc.output_size) and frames.shape == (len(lens), feats.size(1) // ts, enc.output_size)
    assert out_lens.tolist() == [max(int(n) // ts, 1) for n in lens]
    for i, n in enumerate(lens.tolist()):
        k = int(out_lens[i])
        assert frames[i, k:].abs().sum() == 0
        v1, f1 = enc(feats[i: i + 1, :n], lens[i: i + 1])
        torch.testing.assert_close(v[i], v1[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(frames[i, :k], f1[0, :k], rtol=1e-4, atol=1e-5)
        if n >= ts:  # the authors' forward needs at least one pooled frame
            emb, seg = _authors_forward(enc, feats[i: i + 1, :n], pools)
            torch.testing.assert_close(v1, emb, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(f1, seg, rtol=1e-4, atol=1e-5)


def test_fc_audioset_is_not_used_and_dropout_is_where_the_authors_have_it():
    enc = Cnn10Encoder().train()
    feats, lens = torch.randn(2, 40, 64), torch.tensor([40, 33])
    v, frames = enc(feats, lens)
    (v.sum() + frames.sum()).backward()
    assert enc.fc_audioset.weight.grad is None and enc.conv_block1.conv1.weight.grad.abs().sum() > 0
    assert enc.dropout.p == 0.2 and enc.fc_dropout.p == 0.5
    with pytest.raises(ValueError, match="n_mels >= 16"):
        Cnn10Encoder(n_mels=8)


@pytest.mark.parametrize("decoder, conf", [
    ("transformer", {"num_layers": 1, "d_model": 32, "nhead": 4, "dim_feedforward": 64}),
    ("gru", {"hidden_size": 24}),
])
def test_captioner_with_cnn10(decoder, conf):
    torch.manual_seed(0)
    model = Captioner(12, feats_dim=64, encoder="cnn10", decoder=decoder, decoder_conf=conf)
    feats, lens = torch.randn(3, 50, 64), torch.tensor([50, 20, 7])
    ys = torch.randint(1, 11, (3, 4))
    logits = model(feats, lens, ys)
    assert logits.shape == (3, 5, 12) and torch.isfinite(logits[..., 1:]).all()
    logits[..., 1:].logsumexp(-1).sum().backward()
    assert model.encoder.conv_block1.conv1.weight.grad.abs().sum() > 0
    model.eval()
    v = model.encode(feats, lens)
    assert isinstance(v, BatchParts) == (decoder == "transformer")
    if decoder == "transformer":
        assert v[1].shape == (3, 3, 512) and v[2].tolist() == [3, 1, 1]
    tokens = greedy_search(model, v, 6)
    assert tokens.shape[0] == 3 and tokens.shape[1] <= 6
    alone = greedy_search(model, model.encode(feats[2:, :7], lens[2:]), 6)[0]
    assert torch.equal(tokens[2, : alone.numel()], alone)


def test_a_features_config_that_is_not_the_checkpoints_is_named_as_the_cause(tmp_path):
    """The checkpoint is right, the features config is not (issue "Hardening 3"): the message says
    they disagree, lists the options that differ from the checkpoint's front end (that of
    feats_panns.yaml) and names that config, in one line; nothing is loaded."""
    from captionlib.models.panns import PANNS_FRONT_END

    assert PANNS_FRONT_END == {k: FEATS_PANNS[k] for k in PANNS_FRONT_END}
    state = _authors_checkpoint(tmp_path / "Cnn10.pth", CNN10_PUBLISHED)
    mini = yaml.safe_load((REPO / "egs" / "mini_clotho" / "conf" / "feats_logmel.yaml").read_text())
    err = assert_load_fails(tmp_path / "Cnn10.pth", state, Cnn10Encoder(), load_pretrained, {**mini, "fs": 32000},
                            CheckpointMismatchError)
    msg = str(err)
    assert msg.startswith(f"{tmp_path / 'Cnn10.pth'}: the features config and the checkpoint disagree "
                          "(the checkpoint itself is fine; nothing was loaded): the features config has n_fft 2048 "
                          "(checkpoint: 1024), win_length_s 0.04 (checkpoint: 0.032)"), msg
    assert "fmin 0.0 (checkpoint: 50)" in msg and "fmax None (checkpoint: 14000)" in msg and "\n" not in msg
    assert msg.endswith("the checkpoint's front end is the one of egs/clotho/conf/feats_panns.yaml for the "
                        "published PANNs checkpoints: dump the features with that config")
    assert (FRONT_END_KEYS[2], (513, 64), (1025, 64)) in err.mis_shaped  # the keys stay in the error
    # same shapes, other values (fmin): the front end differs, and the option is named
    err = _fails(tmp_path / "fmin.pth", state, FrontEndMismatchError, {**FEATS_PANNS, "fmin": 0})
    assert "the features config has fmin 0 (checkpoint: 50); the checkpoint's front end is the one of" in str(err)
    # other mel bins: bn0 is mis-shaped too, still the features config's n_mels
    err = assert_load_fails(tmp_path / "80.pth", state, Cnn10Encoder(n_mels=80), load_pretrained,
                            {**FEATS_PANNS, "n_mels": 80}, CheckpointMismatchError)
    assert "the features config has n_mels 80 (checkpoint: 64);" in str(err)
    # a checkpoint of another front end: what its mel matrix tells
    state = _authors_checkpoint(tmp_path / "512.pth", CNN10_PUBLISHED, n_fft=512)
    err = _fails(tmp_path / "512.pth", state)
    assert ("the features config has n_fft 1024 (checkpoint: 512); the checkpoint's logmel_extractor.melW is "
            "(257, 64): dump the features with the front end it was trained with") in str(err)
