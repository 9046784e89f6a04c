"""``sample_logprobs: recompute``: samples drawn under ``no_grad``, their log-probabilities and
entropies recomputed by one teacher-forced decoder pass. Without dropout that pass is the
sampling loop's steps at once, so every objective's loss and gradients equal the loop's; with
dropout the samples are still the same."""

import pytest
import torch

from captionlib.decode.search import sample
from captionlib.models.captioner import Captioner
from captionlib.rl import policy_gradient
from captionlib.rl.actor_critic import ActorCritic
from captionlib.rl.options import RLOptions
from captionlib.rl.policy_gradient import SCST, PolicyGradient, teacher_forced_logprobs
from captionlib.rl.sle import SLE
from captionlib.rl.train import train_rl
from captionlib.text.tokenizer import Tokenizer
from rl_doubles import TOKENS, WordSetReward

DECODERS = {
    "gru": ("crnn", {"dropout": 0.0}, "gru", {"hidden_size": 16, "dropout": 0.0}),
    "att_lstm": ("linear", {"output_size": 16}, "att_lstm",
                 {"hidden_size": 20, "embed_size": 8, "att_size": 12, "dropout": 0.0}),
    "transformer": ("crnn", {"dropout": 0.0}, "transformer",
                    {"num_layers": 2, "d_model": 16, "nhead": 2, "dim_feedforward": 32, "dropout": 0.0}),
}
MAX_LEN = 5  # short enough that some captions are cut there (a forced eos) and others end before


def _model(decoder: str, seed: int = 0, **dropout) -> Captioner:
    encoder, encoder_conf, decoder, decoder_conf = DECODERS[decoder]
    torch.manual_seed(seed)
    return Captioner(len(TOKENS), encoder=encoder, encoder_conf=encoder_conf, decoder=decoder,
                     decoder_conf={**decoder_conf, **dropout}).train()


def _batch():
    torch.manual_seed(11)
    return ["c1", "c2", "c3"], torch.randn(3, 40, 64), torch.tensor([40, 32, 21])


OBJECTIVES = {
    "scst_sll_me": lambda how: SCST(WordSetReward(), Tokenizer(TOKENS), 1, "greedy", max_len=MAX_LEN,
                                    entropy_weight=0.1, sample_logprobs=how),
    "reinforce_plus": lambda how: PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=4, baseline="mean",
                                                 max_len=MAX_LEN, sample_logprobs=how),
    "sle": lambda how: SLE(WordSetReward(), Tokenizer(TOKENS), num_samples=3, max_len=MAX_LEN, sample_logprobs=how),
    "ac": lambda how: ActorCritic(WordSetReward(), Tokenizer(TOKENS), vocab_size=len(TOKENS), embed_size=256,
                                  warmup_steps=0, max_len=MAX_LEN, sample_logprobs=how),  # the CRNN's 256
}


def _loss_and_grads(decoder: str, objective: str, how: str):
    model = _model(decoder)
    torch.manual_seed(3)
    obj = OBJECTIVES[objective](how)  # ac: the critic's initial weights
    torch.manual_seed(4)
    loss, stats = obj(model, _batch())
    params = [p for p in model.parameters() if p.requires_grad]
    return loss, stats, torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_teacher_forced_pass_is_the_loop_without_dropout(decoder):
    model = _model(decoder)
    _, feats, lens = _batch()
    v = model.encode(feats, lens).repeat_interleave(4, 0)
    torch.manual_seed(5)
    loop = sample(model, v, MAX_LEN)
    lengths = loop.mask.sum(1)
    assert loop.tokens.size(1) == MAX_LEN and lengths.min() < MAX_LEN  # cut captions and ended ones
    again = teacher_forced_logprobs(model, v, loop, MAX_LEN)
    assert torch.equal(again.tokens, loop.tokens) and torch.equal(again.mask, loop.mask)
    assert torch.allclose(again.logprobs, loop.logprobs, atol=1e-5)
    assert torch.allclose(again.entropy, loop.entropy, atol=1e-5)
    assert (again.logprobs[lengths == MAX_LEN, -1] == 0).all()  # the forced eos costs nothing
    assert again.logprobs.requires_grad and again.entropy.requires_grad


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
@pytest.mark.parametrize("decoder", ["gru", "transformer"])
def test_each_objective_gets_the_loops_loss_and_gradients(decoder, objective):
    loss, stats, grads = _loss_and_grads(decoder, objective, "loop")
    loss2, stats2, grads2 = _loss_and_grads(decoder, objective, "recompute")
    assert stats2["reward"] == stats["reward"] and stats2["sample_len"] == stats["sample_len"]
    assert torch.allclose(loss2, loss, atol=1e-5)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    for g, g2 in zip(grads, grads2):
        assert (g is None) == (g2 is None)
        if g is not None:
            assert torch.allclose(g2, g, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("decoder", ["gru", "transformer"])
def test_with_dropout_the_samples_are_the_same(decoder):
    model = _model(decoder, dropout=0.3)
    _, feats, lens = _batch()
    v = model.encode(feats, lens)
    outs = {}
    for how in ("loop", "recompute"):
        obj = OBJECTIVES["reinforce_plus"](how)
        torch.manual_seed(7)
        outs[how] = obj.draw(model, v.repeat_interleave(4, 0))[1]
    assert torch.equal(outs["loop"].tokens, outs["recompute"].tokens)
    # the gradient's dropout masks are drawn anew: other log-probabilities of the same captions
    assert not torch.allclose(outs["loop"].logprobs, outs["recompute"].logprobs)


WITH_GREEDY_BASELINE = {
    "scst": lambda: SCST(WordSetReward(), Tokenizer(TOKENS), max_len=MAX_LEN, sample_logprobs="recompute"),
    "scst_separate": lambda: SCST(WordSetReward(), Tokenizer(TOKENS), max_len=MAX_LEN, sample_logprobs="recompute",
                                  baseline_encoding="separate"),
    "reinforce_plus": lambda: PolicyGradient(WordSetReward(), Tokenizer(TOKENS), num_samples=3, baseline="greedy",
                                             max_len=MAX_LEN, sample_logprobs="recompute"),
    "sle": lambda: SLE(WordSetReward(), Tokenizer(TOKENS), num_samples=3, max_len=MAX_LEN, sample_logprobs="recompute"),
}


@pytest.mark.parametrize("objective", sorted(WITH_GREEDY_BASELINE))
@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_one_pass_of_baseline_and_samples_gives_the_two_passes_loss(decoder, objective, monkeypatch):
    """On a device of joint_pass_devices (here the CPU, made one), the greedy baseline and the samples
    are decoded in one pass (one call of sample, with greedy_rows): with decoder dropout on, the
    rewards, loss and gradients are those of two passes (the same draws), up to float rounding."""
    calls = _recorded_sample_calls(monkeypatch)
    results, candidates = [], []
    for devices in ((), ("cpu",)):
        model = _model(decoder, dropout=0.3)
        obj = WITH_GREEDY_BASELINE[objective]()
        obj.joint_pass_devices = devices
        torch.manual_seed(4)
        loss, stats = obj(model, _batch())
        results.append((loss, stats, torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad],
                                                          allow_unused=True)))
        candidates.append(obj.reward.calls[0][1])
    assert calls == [0, 3]  # the samples alone (the baseline by greedy_search), then both in one pass
    assert candidates[1] == candidates[0]  # the samples' and the baseline's words
    (loss, stats, grads), (loss2, stats2, grads2) = results
    assert stats2["reward"] == stats["reward"] and stats2["baseline"] == stats["baseline"]
    assert stats2["sample_len"] == stats["sample_len"]
    torch.testing.assert_close(loss2, loss)
    for g, g2 in zip(grads, grads2):
        assert (g is None) == (g2 is None)
        if g is not None:
            torch.testing.assert_close(g2, g)


def _recorded_sample_calls(monkeypatch):
    """The ``greedy_rows`` of each call of ``sample`` by the objectives (0 when not given)."""
    calls = []

    def recorded(*args, **kwargs):
        calls.append(kwargs.get("greedy_rows", 0))
        return sample(*args, **kwargs)

    monkeypatch.setattr(policy_gradient, "sample", recorded)
    return calls


@pytest.mark.parametrize("case", ["attention_dropout", "loop"])
def test_two_passes_where_one_would_not_equal_them(case, monkeypatch):
    """On a device of joint_pass_devices, still two passes for a decoder whose eval mode differs
    in more than Dropout (attention dropout) and for samples with gradients (sample_logprobs loop)."""
    calls = _recorded_sample_calls(monkeypatch)
    model = _model("transformer", dropout=0.3, **({"attention_dropout": 0.1} if case == "attention_dropout" else {}))
    obj = SCST(WordSetReward(), Tokenizer(TOKENS), max_len=MAX_LEN,
               sample_logprobs="loop" if case == "loop" else "recompute")
    obj.joint_pass_devices = ("cpu",)
    obj(model, _batch())
    assert calls == [0]


def test_objectives_that_do_not_read_it_refuse_it():
    with pytest.raises(ValueError, match="sample_logprobs must be one of"):
        SCST(WordSetReward(), Tokenizer(TOKENS), sample_logprobs="twice")
    with pytest.raises(ValueError, match=r"rl_conf \(rl_algo mc_pg\): unknown key 'sample_logprobs'"):
        train_rl(RLOptions(rl_algo="mc_pg", rl_conf={"sample_logprobs": "recompute"}, init_param="x.pth",
                           cider_df="df.npz", train_data_dir="d", valid_data_dir="d", output_dir="o"))
