"""Paired bootstrap (Koehn 2004): determinism, power, null calibration, file pairing."""

import json

import numpy as np
import pytest

from captionlib.metrics.significance import BootstrapResult, paired_bootstrap, paired_bootstrap_files


def _scores(n=200, seed=1):
    return np.random.default_rng(seed).gamma(2.0, 0.3, size=n)  # CIDEr-D-like, >= 0, skewed


def test_deterministic_given_seed():
    a = _scores()
    b = a + np.random.default_rng(2).normal(0.01, 0.3, size=a.size)
    r1 = paired_bootstrap(a, b, num_resamples=2000, seed=5)
    r2 = paired_bootstrap(a, b, num_resamples=2000, seed=5)
    assert r1 == r2
    r3 = paired_bootstrap(a, b, num_resamples=2000, seed=6)
    assert (r3.p_value, r3.ci_low) != (r1.p_value, r1.ci_low)  # the seed is used
    assert isinstance(r1, BootstrapResult) and r1.num_resamples == 2000 and r1.num_items == a.size


def test_clear_improvement_is_significant():
    a = _scores()
    b = a + 0.2 + np.random.default_rng(3).normal(0.0, 0.1, size=a.size)
    r = paired_bootstrap(a, b, num_resamples=2000)
    assert r.p_value < 0.01
    assert r.p_value == pytest.approx(1 / 2001)  # no resample has delta <= 0
    assert 0 < r.ci_low < r.delta < r.ci_high
    # the other direction: b worse than a -> p close to 1
    assert paired_bootstrap(b, a, num_resamples=2000).p_value > 0.99


def test_identical_systems_p_is_one():
    a = _scores()
    r = paired_bootstrap(a, a.copy(), num_resamples=500)
    assert r.delta == 0.0 and r.p_value == 1.0 and r.ci_low == r.ci_high == 0.0


def test_delta_is_mean_difference():
    a = _scores(50, seed=7)
    b = _scores(50, seed=8)
    r = paired_bootstrap(list(a), list(b), num_resamples=100)
    assert r.delta == pytest.approx(b.mean() - a.mean(), abs=1e-12)


def test_null_rejection_rate_near_alpha():
    """b = a + zero-mean symmetric noise: p < 0.05 in about 5% of the data sets."""
    reps, rejected = 200, 0
    for rep in range(reps):
        rng = np.random.default_rng(1000 + rep)
        a = rng.gamma(2.0, 0.3, size=60)
        b = a + rng.normal(0.0, 0.2, size=60)
        rejected += paired_bootstrap(a, b, num_resamples=1000, seed=rep).p_value < 0.05
    # Binomial(200, 0.05): mean 10, sd 3.1; 1%..12% is a wide but meaningful band
    assert 2 <= rejected <= 24, rejected


def test_bad_input():
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no items"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([1.0, float("nan")], [1.0, 2.0])


def _per_clip(path, scores, metric="CIDEr-D"):
    path.write_text(json.dumps({metric: scores, "ROUGE-L": {c: 0.5 for c in scores}}))
    return path


def test_files_pair_by_clip_id(tmp_path):
    a = {"c1": 0.1, "c2": 0.5, "c3": 0.9}
    b = {"c3": 1.0, "c1": 0.3, "c2": 0.6}  # other order in the file
    fa, fb = _per_clip(tmp_path / "a.json", a), _per_clip(tmp_path / "b.json", b)
    r = paired_bootstrap_files(fa, fb, num_resamples=300)
    assert r == paired_bootstrap([0.1, 0.5, 0.9], [0.3, 0.6, 1.0], num_resamples=300)
    assert r.delta == pytest.approx(0.4 / 3)
    assert paired_bootstrap_files(fa, fb, metric="ROUGE-L", num_resamples=10).p_value == 1.0


def test_files_mismatched_clips_raise(tmp_path):
    fa = _per_clip(tmp_path / "a.json", {"c1": 0.1, "c2": 0.5})
    fb = _per_clip(tmp_path / "b.json", {"c1": 0.1, "c9": 0.5})
    with pytest.raises(ValueError, match="different clips") as e:
        paired_bootstrap_files(fa, fb)
    assert str(fa) in str(e.value) and str(fb) in str(e.value) and "c9" in str(e.value)


def test_files_missing_metric_names_file(tmp_path):
    fa = _per_clip(tmp_path / "a.json", {"c1": 0.1})
    fb = tmp_path / "b.json"
    fb.write_text(json.dumps({"ROUGE-L": {"c1": 0.2}}))
    with pytest.raises(ValueError, match="b.json: no per-clip CIDEr-D"):
        paired_bootstrap_files(fa, fb)
