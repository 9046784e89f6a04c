"""The Transformer encoder stack over a CNN encoder (issue 26 item 4, ``encoder_conf:
{transformer: {...}}``): its own module beside the encoder, batch-independent in eval mode,
trainable while the pretrained CNN is frozen, rebuilt from the model file."""

import pytest
import torch

from captionlib.models.captioner import Captioner, build_model
from captionlib.models.panns import Cnn10Encoder

CONF = dict(vocab_size=12, feats_dim=64, encoder="cnn10",
            encoder_conf={"transformer": {"num_layers": 2, "d_model": 32, "nhead": 4, "dim_feedforward": 64}},
            decoder="transformer", decoder_conf={"num_layers": 1, "d_model": 32, "nhead": 4, "dim_feedforward": 64})


def test_the_stack_is_a_module_of_its_own_and_the_cnn_keeps_the_authors_keys():
    torch.manual_seed(0)
    model = Captioner(**CONF)
    assert set(model.encoder.state_dict()) == set(Cnn10Encoder().state_dict())
    assert any(k.startswith("encoder_stack.layers.1.") for k in model.state_dict())
    assert model.decoder.memory_proj.__class__.__name__ == "Identity"  # memory of d_model 32, not the CNN's 512
    model.set_encoder_frozen(True)
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"encoder_stack", "decoder"}
    clone = build_model(CONF)
    clone.load_state_dict(model.state_dict())  # the model file's model_conf rebuilds it


def test_outputs_do_not_depend_on_the_batch_in_eval_mode():
    torch.manual_seed(0)
    model = Captioner(**CONF).eval()
    feats = torch.randn(3, 70, 64)
    lens = torch.tensor([70, 48, 33])
    with torch.no_grad():
        batch = model.encode(feats, lens)
        for i in range(3):
            alone = model.encode(feats[i: i + 1, : lens[i]], lens[i: i + 1])
            n = int(alone[2][0])
            assert int(batch[2][i]) == n == int(lens[i]) // 16
            torch.testing.assert_close(batch[0][i], alone[0][0], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(batch[1][i, :n], alone[1][0, :n], atol=1e-5, rtol=1e-4)
            assert not batch[1][i, n:].any()
    logits = model(feats, lens, torch.tensor([[3, 4], [5, 0], [6, 7]]))
    assert logits.shape == (3, 3, 12)


@pytest.mark.parametrize("bad, message", [({"num_layers": 0}, r"transformer\.num_layers must be a positive integer"),
                                          ({"d_model": 30, "nhead": 4}, "divisible by nhead"),
                                          ({"activation": "tanh"}, "activation must be one of"),
                                          ([2], "must be a mapping")])
def test_bad_stack_options_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        Captioner(**dict(CONF, encoder_conf={"transformer": bad}))
