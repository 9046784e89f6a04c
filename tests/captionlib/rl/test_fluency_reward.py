"""The fluency penalty of the RL reward (SPIDEr-FL's form): a flagged caption's reward times
(1 - p), from the rule checks or a detector; every objective scores through Reward."""

import numpy as np
import pytest

from captionlib.metrics.cider_d import DocumentFrequency
from captionlib.rl import check_rl_options
from captionlib.rl.options import RLOptions
from captionlib.rl.rewards import Reward

REFS = {"a": [["a", "dog", "barks"], ["a", "dog", "is", "barking"]],
        "b": [["rain", "falls", "on", "a", "roof"], ["heavy", "rain", "falls"]]}
CANDIDATES = [["a", "dog", "barks"], ["a", "dog", "dog", "barks"], ["rain", "falls", "on", "a"],
              ["heavy", "rain", "falls"]]
KEYS = ["a", "a", "b", "b"]


@pytest.fixture
def cider_df(tmp_path):
    path = tmp_path / "cider_df.npz"
    DocumentFrequency.from_references(REFS).save(str(path))
    return str(path)


def test_flagged_captions_get_the_penalised_reward(cider_df):
    plain = Reward("cider_d:1.0", REFS, cider_df)(KEYS, CANDIDATES)
    out = Reward("cider_d:1.0", REFS, cider_df, fluency_penalty=0.9)(KEYS, CANDIDATES)
    # rules: "dog dog" repeats a word, "... on a" ends in a function word
    np.testing.assert_array_equal(out["fluency_error"], [0.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(out["reward"], plain["reward"] * np.array([1.0, 0.1, 0.1, 1.0]))
    np.testing.assert_array_equal(out["cider_d"], plain["cider_d"])  # the metric itself is unchanged
    assert plain["reward"][1] > 0 and plain["reward"][2] > 0  # so the penalty is seen
    assert "fluency_error" not in plain


def test_the_penalty_is_applied_to_the_summed_reward(cider_df):
    terms = "cider_d:1.0,bleu_4:0.5"
    plain = Reward(terms, REFS, cider_df)(KEYS, CANDIDATES)
    out = Reward(terms, REFS, cider_df, fluency_penalty=0.5)(KEYS, CANDIDATES)
    np.testing.assert_allclose(out["reward"], plain["reward"] * np.array([1.0, 0.5, 0.5, 1.0]))


def test_a_penalty_outside_0_1_is_refused(cider_df):
    with pytest.raises(ValueError, match=r"fluency_penalty must be in \[0, 1\], got 1.5"):
        Reward("cider_d:1.0", REFS, cider_df, fluency_penalty=1.5)


def test_the_options_are_checked_before_training():
    base = dict(init_param="x.pth", cider_df="df.npz")
    with pytest.raises(ValueError, match="fluency_model m.pth is read only with fluency_penalty > 0"):
        check_rl_options(RLOptions(fluency_model="m.pth", **base))
    with pytest.raises(ValueError, match="not to rl_conf reward_type embedding"):
        check_rl_options(RLOptions(rl_algo="ac", rl_conf={"reward_type": "embedding"}, fluency_penalty=0.9, **base))
    with pytest.raises(ValueError, match="fluency_penalty"):
        check_rl_options(RLOptions(fluency_penalty=2.0, **base))
    check_rl_options(RLOptions(rl_algo="mc_pg", fluency_penalty=0.9, **base))


def test_a_detector_file_decides_the_flags(cider_df, tmp_path):
    """With --fluency_model the detector's flags, not the rules', are penalised: a detector
    whose threshold every caption passes flags all four, one no caption reaches flags none."""
    import torch

    from captionlib.metrics.fluency import SPECIALS, BigramCounts, FluencyDetector, FluencyNet

    torch.manual_seed(0)
    vocab = list(SPECIALS) + sorted({w for c in CANDIDATES for w in c})
    plain = Reward("cider_d:1.0", REFS, cider_df)(KEYS, CANDIDATES)["reward"]
    for threshold, flagged in ((0.0, [1.0] * 4), (1.01, [0.0] * 4)):
        path = tmp_path / f"detector{threshold}.pth"
        FluencyDetector(vocab, FluencyNet(len(vocab), embed_dim=8, channels=16, layers=2), threshold,
                        counts=BigramCounts.from_rows(len(vocab), [[2, 3, 4]])).save(path)
        out = Reward("cider_d:1.0", REFS, cider_df, fluency_penalty=0.9, fluency_model=str(path))(KEYS, CANDIDATES)
        np.testing.assert_array_equal(out["fluency_error"], flagged)
        np.testing.assert_allclose(out["reward"], plain * (1 - 0.9 * np.array(flagged)))
