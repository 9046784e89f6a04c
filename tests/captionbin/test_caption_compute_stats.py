"""Tests of caption_compute_stats / captionlib.io.stats.compute_feats_stats."""

import subprocess
import sys

import numpy as np
import pytest
import yaml

from captionbin import caption_compute_stats
from captionlib.io.feats import FeatWriter
from captionlib.io.stats import compute_feats_stats


def _feats(seed, n, dim=6):
    rng = np.random.default_rng(seed)
    return {
        f"clip-{seed}-{i}": (rng.standard_normal((rng.integers(1, 40), dim)) * (i + 1) + 100 * i - 20).astype(
            np.float32
        )
        for i in range(n)
    }


def test_get_parser_main_without_args_and_print_config():
    assert caption_compute_stats.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_compute_stats.main([])
    assert e.value.code != 0
    out = subprocess.run(
        [sys.executable, "-m", "captionbin.caption_compute_stats", "--print_config"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert set(yaml.safe_load(out)) >= {"feats_scp", "output"}


def test_matches_numpy_on_concatenated_frames_mixed_ark_h5(tmp_path):
    a, b = _feats(0, 3), _feats(1, 4)
    with FeatWriter(tmp_path / "feats.1", "ark") as w:
        for k, v in a.items():
            w[k] = v
    with FeatWriter(tmp_path / "feats.2", "hdf5") as w:
        for k, v in b.items():
            w[k] = v
    scp = tmp_path / "feats.scp"
    scp.write_text((tmp_path / "feats.1.scp").read_text() + (tmp_path / "feats.2.scp").read_text())
    out = tmp_path / "stats" / "feats_stats.npz"
    caption_compute_stats.main(["--feats_scp", str(scp), "--output", str(out)])
    s = np.load(out)
    assert set(s.files) == {"count", "sum", "sum_square", "mean", "std"}
    allx = np.concatenate([v.astype(np.float64) for v in list(a.values()) + list(b.values())])
    assert s["count"].shape == () and int(s["count"]) == allx.shape[0]
    for key in ("sum", "sum_square", "mean", "std"):
        assert s[key].shape == (6,) and s[key].dtype == np.float64
    np.testing.assert_allclose(s["sum"], allx.sum(0), rtol=1e-12)
    np.testing.assert_allclose(s["sum_square"], (allx**2).sum(0), rtol=1e-12)
    np.testing.assert_allclose(s["mean"], allx.mean(0), rtol=1e-10)
    np.testing.assert_allclose(s["std"], allx.std(0), rtol=1e-7)
    # normalised frames have zero mean and unit variance
    z = (allx - s["mean"]) / s["std"]
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-7)
    np.testing.assert_allclose(z.std(0), 1, atol=1e-7)


def test_errors(tmp_path):
    (tmp_path / "empty.scp").write_text("")
    with pytest.raises(ValueError, match="no clips"):
        compute_feats_stats(tmp_path / "empty.scp", tmp_path / "o.npz")
    with FeatWriter(tmp_path / "feats.1", "hdf5") as w:
        w["a"] = np.zeros((3, 4))
    with FeatWriter(tmp_path / "feats.2", "hdf5") as w:
        w["b"] = np.zeros((3, 5))
    scp = tmp_path / "feats.scp"
    scp.write_text((tmp_path / "feats.1.scp").read_text() + (tmp_path / "feats.2.scp").read_text())
    with pytest.raises(ValueError, match="clip b has dim 5, expected 4"):
        compute_feats_stats(scp, tmp_path / "o.npz")
    with pytest.raises(SystemExit) as e:
        caption_compute_stats.main(["--feats_scp", str(scp), "--output", str(tmp_path / "o.npz")])
    assert e.value.code == 1
    assert not (tmp_path / "o.npz").exists()
