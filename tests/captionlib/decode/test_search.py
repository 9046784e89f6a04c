import torch

from captionlib.decode.search import beam_search, greedy_search, sample
from captionlib.models.captioner import Captioner


class TableModel:
    """A first-order model with a fixed log-prob table: state = previous token."""

    def __init__(self, first, table, eos):
        self.first, self.table, self.eos_id = first, table, eos

    def first_step(self, v):
        return self.first.expand(v.size(0), -1).clone(), torch.zeros(v.size(0), dtype=torch.long)

    def step(self, tokens, state):
        return self.table[tokens].clone(), tokens

    def reorder_state(self, state, index):
        return state[index]


def _log(p):
    return torch.tensor(p).clamp(min=1e-12).log()


def toy():
    # tokens: 0 pad, 1 "a", 2 "b", 3 eos. Greedy picks "a" (0.6) then a flat step;
    # the best sequence is "b eos" (0.4 * 1.0) over "a x eos" (0.6 * 0.4 * ...)
    first = _log([0.0, 0.6, 0.4, 0.0])
    table = torch.stack(
        [
            _log([0, 0.3, 0.3, 0.4]),  # after pad (unused)
            _log([0, 0.35, 0.3, 0.35]),  # after a
            _log([0, 0.0, 0.0, 1.0]),  # after b -> eos
            _log([0, 0.0, 0.0, 1.0]),  # after eos
        ]
    )
    return TableModel(first, table, eos=3)


def test_beam_finds_better_sequence_than_greedy():
    m = toy()
    v = torch.zeros(2, 1)
    assert greedy_search(m, v, max_len=5)[0].tolist()[:1] == [1]
    best = beam_search(m, v, beam_size=2, max_len=5)
    assert best[0].tolist()[:2] == [2, 3]
    assert best[1].tolist()[:2] == [2, 3]


def test_beam_one_equals_greedy_on_captioner():
    torch.manual_seed(0)
    model = Captioner(30, decoder_conf={"hidden_size": 16}).eval()
    v = model.encode(torch.randn(3, 50, 64), torch.tensor([50, 30, 40]))
    g = greedy_search(model, v, max_len=10)
    b = beam_search(model, v, beam_size=1, max_len=10)
    assert torch.equal(g, b)
    assert ((g == model.eos_id).sum(1) == 1).all()  # exactly one eos per row


def test_sample_logprobs_and_mask():
    torch.manual_seed(0)
    m = toy()
    out = sample(m, torch.zeros(500, 1), max_len=6)
    first = out.tokens[:, 0]
    # empirical frequency of the first token follows the model
    assert abs((first == 1).float().mean().item() - 0.6) < 0.08
    lp = out.logprobs[:, 0]
    assert torch.allclose(lp[first == 1], torch.log(torch.tensor(0.6)))
    # mask covers tokens up to and including eos; tokens after eos are padding
    for row, mask in zip(out.tokens.tolist(), out.mask.tolist()):
        n = int(sum(mask))
        assert row[n - 1] == 3 and all(t == 0 for t in row[n:])


def test_beam_returns_the_sequence_it_ranked_at_max_len():
    # At max_len eos is forced at no cost (as in sampling), so a truncated hypothesis is
    # ranked by its prefix: [a a eos] = 0.8*0.4 = 0.32 beats [a b eos] = 0.8*0.35 = 0.28
    # and [b eos] = [a eos] = 0.2. Ranking the last step over all words instead would pick
    # [a b eos] ([a a a] = 0.128) and return a different sequence than it ranked.
    first = _log([0.0, 0.8, 0.2, 0.0])
    table = torch.stack(
        [_log([0, 0.3, 0.3, 0.4]), _log([0, 0.4, 0.35, 0.25]), _log([0, 0, 0, 1.0]), _log([0, 0, 0, 1.0])]
    )
    m = TableModel(first, table, eos=3)
    assert beam_search(m, torch.zeros(1, 1), beam_size=3, max_len=3)[0].tolist() == [1, 1, 3]
    assert greedy_search(m, torch.zeros(1, 1), max_len=3)[0].tolist() == [1, 1, 3]
    assert beam_search(m, torch.zeros(1, 1), beam_size=2, max_len=1)[0].tolist() == [3]
