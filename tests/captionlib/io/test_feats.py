"""Tests of captionlib.io.feats: ark/HDF5 writers, the lazy reader, and ark -> h5 -> ark copies."""

import errno
import multiprocessing as mp
import os
import pickle
import re

import numpy as np
import pytest

from captionlib.io.datadir import read_scp
from captionlib.io.feats import FeatReader, FeatWriter, copy_feats


def _feats(seed=0):
    rng = np.random.default_rng(seed)
    # awkward values on purpose: tiny, huge, negative zero, float32 extremes
    out = {
        "clotho-validation-00002": rng.standard_normal((7, 5)).astype(np.float32),
        "clotho-validation-00001": (rng.standard_normal((13, 5)) * 1e30).astype(np.float32),
        "clotho-evaluation-00003": np.array([[-0.0, 1e-45, np.finfo(np.float32).max, -1, 2]] * 2, np.float32),
    }
    return out


def _write(prefix, filetype, feats):
    with FeatWriter(prefix, filetype) as w:
        for k, v in feats.items():
            w[k] = v
    return w


@pytest.mark.parametrize("filetype, ext", [("ark", ".ark"), ("hdf5", ".h5")])
def test_round_trip(tmp_path, filetype, ext):
    feats = _feats()
    w = _write(tmp_path / "feats.1", filetype, feats)
    assert w.num_frames == {k: v.shape[0] for k, v in feats.items()}
    assert w.dim == 5
    assert os.path.isfile(tmp_path / f"feats.1{ext}")
    scp = read_scp(tmp_path / "feats.1.scp")
    assert list(scp) == list(feats)  # write order
    for k, v in scp.items():
        assert os.path.isabs(v)
        assert v.startswith(str(tmp_path / f"feats.1{ext}") + ":")
        if filetype == "hdf5":
            assert v.endswith(":" + k)
    reader = FeatReader(tmp_path / "feats.1.scp")
    assert len(reader) == 3 and list(reader.keys()) == list(feats)
    assert "clotho-validation-00001" in reader and "nope" not in reader
    for k, v in feats.items():
        got = reader[k]
        assert got.dtype == np.float32 and got.shape == v.shape
        assert got.tobytes() == v.tobytes()
    with pytest.raises(KeyError):
        reader["nope"]
    reader.close()


def test_ark_to_h5_to_ark_is_bit_identical(tmp_path):
    feats = _feats(1)
    _write(tmp_path / "a" / "feats.1", "ark", feats)
    copy_feats(tmp_path / "a" / "feats.1.scp", tmp_path / "h" / "feats.1", "hdf5")
    copy_feats(tmp_path / "h" / "feats.1.scp", tmp_path / "b" / "feats.1", "ark")
    # the two ark files are byte-identical, and so are all arrays
    assert (tmp_path / "a" / "feats.1.ark").read_bytes() == (tmp_path / "b" / "feats.1.ark").read_bytes()
    with FeatReader(tmp_path / "b" / "feats.1.scp") as r:
        for k, v in feats.items():
            assert r[k].tobytes() == v.tobytes()


def test_mixed_scp_dispatches_per_line(tmp_path):
    a = {"x-1": np.ones((3, 2), np.float32)}
    h = {"x-2": np.full((4, 2), 2.0, np.float32)}
    _write(tmp_path / "feats.1", "ark", a)
    _write(tmp_path / "feats.2", "hdf5", h)
    lines = (tmp_path / "feats.1.scp").read_text() + (tmp_path / "feats.2.scp").read_text()
    (tmp_path / "feats.scp").write_text(lines)
    r = FeatReader(tmp_path / "feats.scp")
    np.testing.assert_array_equal(r["x-1"], a["x-1"])
    np.testing.assert_array_equal(r["x-2"], h["x-2"])
    assert dict(r.items()).keys() == {"x-1", "x-2"}


def test_missing_h5_dataset_is_a_clear_error(tmp_path):
    _write(tmp_path / "feats.1", "hdf5", {"a": np.zeros((1, 1))})
    (tmp_path / "bad.scp").write_text(f"b {tmp_path}/feats.1.h5:b\n")
    with pytest.raises(KeyError, match="dataset 'b' not found"):
        FeatReader(tmp_path / "bad.scp")["b"]


def test_malformed_scp_names_line(tmp_path):
    (tmp_path / "feats.scp").write_text("a /x.ark:1\nb\n")
    with pytest.raises(ValueError, match=r"feats.scp:2:"):
        FeatReader(tmp_path / "feats.scp")


def test_writer_errors_and_no_commit_on_exception(tmp_path):
    with pytest.raises(ValueError, match="filetype"):
        FeatWriter(tmp_path / "f", "npy")
    for filetype in ("ark", "hdf5"):
        prefix = tmp_path / filetype / "feats.1"
        with pytest.raises(ValueError, match="duplicate"):
            with FeatWriter(prefix, filetype) as w:
                w["a"] = np.zeros((2, 3))
                w["a"] = np.zeros((2, 3))
        assert not os.path.exists(str(prefix) + ".scp")  # nothing committed
        with FeatWriter(prefix, filetype) as w:
            with pytest.raises(ValueError, match="whitespace"):
                w["a b"] = np.zeros((2, 3))
            with pytest.raises(ValueError, match="2-D"):
                w["a"] = np.zeros(3)
            w["a"] = np.zeros((2, 3))
            with pytest.raises(ValueError, match="dimension 4"):
                w["b"] = np.zeros((2, 4))
        assert list(read_scp(str(prefix) + ".scp")) == ["a"]
        assert not [f for f in os.listdir(prefix.parent) if f.endswith(".tmp")]


@pytest.mark.parametrize("filetype", ["ark", "hdf5"])
def test_a_failed_rewrite_leaves_the_earlier_shard_whole(tmp_path, filetype):
    """A re-run that stops at a bad clip (here a duplicate key) must not truncate the shard an
    earlier run wrote at the same prefix: its scp still reads every clip (the ark used to be
    rewritten in place, its old scp then pointed past the end)."""
    prefix = tmp_path / "feats.1"
    first = {k: np.full((5, 3), i, np.float32) for i, k in enumerate(["a", "b", "c"])}
    with FeatWriter(prefix, filetype) as w:
        for k, v in first.items():
            w[k] = v
    with pytest.raises(ValueError, match="duplicate"):
        with FeatWriter(prefix, filetype) as w:
            w["a"] = np.zeros((2, 3))
            w["a"] = np.zeros((2, 3))
    reader = FeatReader(str(prefix) + ".scp")
    assert {k: reader[k].tolist() for k in first} == {k: v.tolist() for k, v in first.items()}
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def _read_in_child(reader, key, queue):
    queue.put((os.getpid(), reader[key].sum().item(), reader._pid))


@pytest.mark.parametrize("filetype", ["ark", "hdf5"])
def test_reader_reopens_after_fork_and_pickle(tmp_path, filetype):
    feats = {"a": np.arange(6, dtype=np.float32).reshape(3, 2), "b": np.ones((2, 2), np.float32)}
    _write(tmp_path / "feats.1", filetype, feats)
    reader = FeatReader(tmp_path / "feats.1.scp")
    assert reader["a"].sum() == 15  # opens the file in the parent
    parent_handles = reader._h5 if filetype == "hdf5" else reader._ark
    assert len(parent_handles) == 1
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_read_in_child, args=(reader, "b", q))
    p.start()
    child_pid, total, seen_pid = q.get(timeout=30)
    p.join(timeout=30)
    assert p.exitcode == 0
    assert total == 4 and seen_pid == child_pid != os.getpid()
    # parent handles untouched and still usable
    assert reader["b"].sum() == 4
    # pickling (spawn-style workers) drops open handles
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._h5 == {} and clone._ark == {}
    np.testing.assert_array_equal(clone["a"], feats["a"])


@pytest.mark.parametrize("data, message", [
    (np.zeros(5, np.float32), r"clip a has features of shape \(5,\), expected \(frames, dim\)"),
    (np.zeros((2, 3, 4), np.float32), r"clip a has features of shape \(2, 3, 4\), expected \(frames, dim\)"),
    (np.zeros((0, 4), np.float32), "clip a has 0 frames of features"),
    (np.array([b"x", b"y"]), "clip a: the features at .* are not numbers"),
])
def test_reader_refuses_what_is_no_feature_matrix_naming_the_clip(tmp_path, data, message):
    """caption_compute_stats failed with an IndexError traceback on a 1-D dataset, with numpy's
    broadcasting message on a 3-D one, and caption_decode captioned a clip of 0 frames."""
    import h5py

    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["a"] = data
    (tmp_path / "feats.scp").write_text(f"a {tmp_path / 'f.h5'}:a\n")
    with pytest.raises(ValueError, match=message):
        FeatReader(str(tmp_path / "feats.scp"))["a"]


@pytest.mark.parametrize("filetype", ["ark", "hdf5"])
def test_a_full_disk_at_close_names_the_file_and_leaves_no_temporary_files(tmp_path, filetype):
    """The last buffered writes fail at close on a full disk: the error names the file, the
    temporary files go, and the dump committed before stays whole."""
    prefix = tmp_path / "feats.1"
    with FeatWriter(prefix, filetype) as w:
        w["a"] = np.ones((3, 4), np.float32)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full(*_):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=rf"writing {re.escape(str(w.data_path))}: No space left on device"):
        with FeatWriter(prefix, filetype) as w:
            w["b"] = np.zeros((2, 4), np.float32)
            if filetype == "ark":
                w._helper.close = full
            else:
                w._h5.close()  # the file is closed for real; its close then fails as a full disk's would
                w._h5 = type("H5", (), {"close": full})()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
