import csv
from pathlib import Path

import pytest
import torch

from captionlib.models.captioner import Captioner, count_parameters, xe_loss, xe_targets
from captionlib.models.encoders import BatchIndependentBiGRU, CRNNEncoder, L4Pool2d
from captionlib.text.cleaner import clean_words

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def test_crnn_parameter_count_matches_seed_000():
    # seed 000 sec. 2.1: "The encoder has 679k parameters"
    assert count_parameters(CRNNEncoder(64)) == 679042


def test_whole_model_about_5m_with_clotho_vocabulary():
    path = SHARED / "clotho_captions_v2.1" / "clotho_captions_development.csv"
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    vocab = {w for r in rows for k in range(1, 6) for w in clean_words(r[f"caption_{k}"])}
    model = Captioner(len(vocab) + 3)
    total = count_parameters(model)
    assert 4.5e6 < total < 5.6e6, total


@pytest.mark.parametrize("shape, kernel", [((3, 2, 11, 8), (2, 4)), ((2, 5, 9, 6), (1, 4)), ((1, 1, 4, 4), (2, 4))])
def test_l4_pooling_matches_torch_lppool_and_its_gradient(shape, kernel):
    # odd sizes leave rows and columns no window covers; a window of zeros and negative inputs
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=torch.float64)
    x[0, 0, :kernel[0], :kernel[1]] = 0
    ours, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ours, y_ref = L4Pool2d(kernel)(ours), torch.nn.LPPool2d(4, kernel)(ref)
    grad = torch.randn_like(y_ref)
    y_ours.backward(grad)
    y_ref.backward(grad)
    assert y_ours.shape == y_ref.shape
    torch.testing.assert_close(y_ours, y_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-12, atol=1e-12)
    assert ours.grad[0, 0, :kernel[0], :kernel[1]].abs().sum() == 0


def test_l4_pooling_of_half_precision_runs_in_float32():
    # 20 ** 4 overflows fp16 (max 65504); the pooled value is exact in float32
    x = torch.full((1, 1, 2, 4), 20.0, dtype=torch.float16, requires_grad=True)
    y = L4Pool2d((2, 4))(x)
    assert y.dtype == torch.float32 and torch.isfinite(y).all()
    torch.testing.assert_close(y, torch.full((1, 1, 1, 1), 20.0 * 8 ** 0.25))
    y.sum().backward()
    assert x.grad.dtype == torch.float16 and torch.isfinite(x.grad).all()


def test_crnn_subsamples_time_by_4_and_pools_to_256():
    enc = CRNNEncoder(64).eval()
    v, frames = enc(torch.randn(2, 101, 64), torch.tensor([101, 40]))
    assert v.shape == (2, 256)
    assert frames.shape == (2, 25, 256)


@pytest.mark.parametrize("bigru", ["split", "packed"])
@pytest.mark.parametrize("length", [80, 81, 83])
def test_padding_does_not_change_the_embedding(length, bigru):
    # a clip's embedding must not depend on how much its batch-mates pad it
    torch.manual_seed(0)
    model = Captioner(10, encoder_conf={"bigru": bigru}).eval()
    x = torch.randn(1, length, 64) * 3 + 2
    v1 = model.encode(x, torch.tensor([length]))
    batch = torch.zeros(2, 200, 64)
    batch[0, :length] = x[0]
    batch[1] = torch.randn(200, 64)
    v2 = model.encode(batch, torch.tensor([length, 200]))
    assert torch.allclose(v1, v2[:1], atol=1e-6)


def test_split_bigru_matches_the_packed_one_with_the_same_state_dict():
    torch.manual_seed(0)
    split = BatchIndependentBiGRU(16, 8, impl="split")
    packed = BatchIndependentBiGRU(16, 8, impl="packed")
    assert list(split.state_dict()) == list(torch.nn.GRU(16, 8, bidirectional=True).state_dict())
    packed.load_state_dict(split.state_dict())
    x = torch.randn(4, 30, 16)
    lens = torch.tensor([30, 7, 1, 22])
    outs, grads = [], []
    for gru in (split, packed):
        xi = x.clone().requires_grad_(True)
        y = gru(xi, lens)
        (y * torch.linspace(-1, 1, y.size(-1))).pow(2).sum().backward()
        outs.append(y)
        grads.append([xi.grad] + [p.grad for p in gru.parameters()])
    assert torch.allclose(outs[0], outs[1], atol=1e-6)
    assert bool((outs[0][1, 7:] == 0).all()) and bool((outs[0][2, 1:] == 0).all())
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="split or packed"):
        BatchIndependentBiGRU(16, 8, impl="cudnn")


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)")


@CUDA
@pytest.mark.skipif(not torch.backends.cudnn.is_available(), reason="needs cuDNN")
def test_split_bigru_leaves_the_cudnn_flat_buffer_whole():
    # nn.GRU re-homes new weights into a flat buffer of its own on every call; the split
    # BiGRU's direction template must not, or the bidirectional buffer falls apart
    torch.manual_seed(0)
    gru = BatchIndependentBiGRU(16, 8).cuda()

    def storages():
        return {w.untyped_storage().data_ptr() for w in gru._flat_weights}

    before = storages()
    x, lens = torch.randn(3, 10, 16, device="cuda"), torch.tensor([10, 7, 5], device="cuda")
    gru(x, lens).sum().backward()
    assert len(before) == 1 and storages() == before
    assert all(torch.isfinite(p.grad).all() for p in gru.parameters())


@pytest.mark.parametrize("device, calls", [("cpu", 3), pytest.param("cuda", 1, marks=CUDA)])
def test_eval_encoding_is_chunked_on_cpu_only(device, calls, monkeypatch):
    torch.manual_seed(0)
    model = Captioner(10).to(device).eval()
    seen, forward = [], model.encoder.forward
    monkeypatch.setattr(model.encoder, "forward", lambda *a: seen.append(a[0].size(0)) or forward(*a))
    with torch.no_grad():
        v = model.encode(torch.randn(20, 64, 64, device=device), torch.full((20,), 64, device=device))
    assert len(seen) == calls and sum(seen) == 20 and v.shape == (20, 256)


def test_rejects_mel_count_not_divisible_by_64():
    with pytest.raises(ValueError, match="divisible by 64"):
        CRNNEncoder(40)


def test_xe_targets_append_eos_and_loss_ignores_padding():
    ys = torch.tensor([[5, 6, 7], [8, 0, 0]])
    tgt = xe_targets(ys, torch.tensor([3, 1]), eos_id=9)
    assert tgt.tolist() == [[5, 6, 7, 9], [8, 9, 0, 0]]
    model = Captioner(10, decoder_conf={"hidden_size": 16})
    logits = model(torch.randn(2, 40, 64), torch.tensor([40, 30]), ys)
    assert logits.shape == (2, 4, 10)
    assert torch.isinf(logits[..., 0]).all() and (logits[..., 0] < 0).all()  # padding never emitted
    loss = xe_loss(logits, tgt)
    assert torch.isfinite(loss)


def test_normalization_buffers_are_saved():
    model = Captioner(10)
    model.set_normalization(torch.arange(64.0).numpy(), torch.full((64,), 2.0).numpy())
    sd = model.state_dict()
    assert sd["feats_mean"][3] == 3.0 and sd["feats_std"][0] == 2.0


def test_frozen_encoder_stays_in_eval_mode():
    model = Captioner(10)
    model.freeze_encoder = True
    model.train()
    assert model.training and model.decoder.training and not model.encoder.training
    before = model.encoder.cnn[0][0].running_mean.clone()
    model(torch.randn(2, 40, 64), torch.tensor([40, 30]), torch.tensor([[2, 3], [4, 0]]))
    assert torch.equal(before, model.encoder.cnn[0][0].running_mean)


def test_narrow_crnn_channels_and_frequency_pooling():
    enc = CRNNEncoder(32, rnn_units=16, channels=(8, 16, 16, 32, 32), freq_pooling=(4, 4, 2)).eval()
    v, frames = enc(torch.randn(3, 40, 32), torch.tensor([40, 40, 40]))
    assert v.shape == (3, 32) and frames.shape == (3, 10, 32)
    assert count_parameters(enc) < count_parameters(CRNNEncoder(64)) / 10
    with pytest.raises(ValueError, match="divisible by 32"):
        CRNNEncoder(48, freq_pooling=(4, 4, 2))
    with pytest.raises(ValueError, match="5 channels"):
        CRNNEncoder(64, channels=(8, 16))


def test_equal_lengths_skip_packing_with_the_same_result():
    torch.manual_seed(0)
    enc = CRNNEncoder(64).eval()
    x = torch.randn(2, 40, 64)
    full = torch.tensor([40, 40])
    v, _ = enc(x, full)
    # one clip padded by a single frame: the packed path; the other must not change
    v2, _ = enc(torch.cat([x, torch.zeros(2, 4, 64)], 1), torch.tensor([40, 44]))
    assert torch.allclose(v[0], v2[0], atol=1e-6)


def test_decoder_initial_state_from_audio():
    from captionlib.models.decoders import GRUDecoder

    torch.manual_seed(0)
    dec = GRUDecoder(12, embed_size=8, hidden_size=16, init_state="audio").eval()
    v = torch.randn(3, 8)
    ys = torch.randint(1, 11, (3, 4))
    logits = dec.forward_teacher(v, ys)
    # step-wise decoding sees the same initial state as teacher forcing
    logp, state = dec.first_step(v)
    assert torch.allclose(logp, torch.log_softmax(logits[:, 0], -1), atol=1e-5)
    logp, _ = dec.step(ys[:, 0], state)
    assert torch.allclose(logp, torch.log_softmax(logits[:, 1], -1), atol=1e-5)
    # the state starts from tanh(W v), not zeros: the output differs from the seed decoder's
    plain = GRUDecoder(12, embed_size=8, hidden_size=16)
    plain.load_state_dict({k: p for k, p in dec.state_dict().items() if not k.startswith("init.")})
    assert not torch.allclose(plain.eval().forward_teacher(v, ys), logits)
    with pytest.raises(ValueError, match="init_state"):
        GRUDecoder(12, init_state="random")
