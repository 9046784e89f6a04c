"""Tests of captionlib.io.importers: self-critical.pytorch npy/npz layouts and one-HDF5 video features."""

import os

import h5py
import numpy as np
import pytest

from captionlib.io.datadir import read_scp, write_scp
from captionlib.io.feats import FeatReader
from captionlib.io.importers import default_feats_type, import_feats

RNG = np.random.default_rng(0)


def _clip2id(tmp_path, mapping, name="clip2id"):
    p = tmp_path / name
    write_scp(p, mapping)
    return p


def _read(prefix):
    return dict(FeatReader(f"{prefix}.scp").items())


@pytest.fixture
def sc_dirs(tmp_path):
    fc, att = tmp_path / "cocotalk_fc", tmp_path / "cocobu_att"
    fc.mkdir(), att.mkdir()
    arrays = {"391895": RNG.standard_normal((5, 5, 8)), "522418": RNG.standard_normal((36, 8)).astype(np.float32)}
    for cid, a in arrays.items():
        np.save(fc / f"{cid}.npy", a.reshape(-1, 8).mean(0))
        np.savez_compressed(att / f"{cid}.npz", feat=a)
    clip2id = _clip2id(tmp_path, {"coco-391895": "391895", "coco-522418": "522418"})
    return fc, att, arrays, clip2id


@pytest.mark.parametrize("filetype", ["ark", "hdf5"])
def test_sc_fc_and_att_round_trip(tmp_path, sc_dirs, filetype):
    fc, att, arrays, clip2id = sc_dirs
    n = import_feats(clip2id, "sc_fc", fc, tmp_path / "fc" / "feats.1", filetype)
    assert n == {"coco-391895": 1, "coco-522418": 1}
    got = _read(tmp_path / "fc" / "feats.1")
    for cid in arrays:
        np.testing.assert_array_equal(got[f"coco-{cid}"], np.load(fc / f"{cid}.npy")[None].astype(np.float32))
    assert (tmp_path / "fc" / "feats_type.1").read_text() == "cocotalk_fc\n"

    n = import_feats(clip2id, "sc_att", f"{att}/", tmp_path / "att" / "feats.1", filetype)
    assert n == {"coco-391895": 25, "coco-522418": 36}
    got = _read(tmp_path / "att" / "feats.1")
    for cid, a in arrays.items():
        np.testing.assert_array_equal(got[f"coco-{cid}"], a.reshape(-1, 8).astype(np.float32))
    d = tmp_path / "att"
    assert (d / "feats_dim.1").read_text() == "8\n" and (d / "feats_type.1").read_text() == "cocobu_att\n"
    assert read_scp(d / "utt2num_frames.1") == {"coco-391895": "25", "coco-522418": "36"}


def test_hdf5_round_trip(tmp_path):
    src = tmp_path / "msrvtt_resnet152.h5"
    arrays = {"video0": RNG.standard_normal((20, 6)).astype(np.float32), "video7": RNG.standard_normal(6)}
    with h5py.File(src, "w") as f:
        for k, a in arrays.items():
            f[k] = a
    clip2id = _clip2id(tmp_path, {"msrvtt-video0": "video0", "msrvtt-video7": "video7"})
    n = import_feats(clip2id, "hdf5", src, tmp_path / "d" / "feats.3", "hdf5", feats_type="resnet152_avg")
    assert n == {"msrvtt-video0": 20, "msrvtt-video7": 1}
    got = _read(tmp_path / "d" / "feats.3")
    np.testing.assert_array_equal(got["msrvtt-video0"], arrays["video0"])
    np.testing.assert_array_equal(got["msrvtt-video7"], arrays["video7"][None].astype(np.float32))
    assert (tmp_path / "d" / "feats_type.3").read_text() == "resnet152_avg\n"
    assert sorted(os.listdir(tmp_path / "d")) == ["feats.3.h5", "feats.3.scp", "feats_dim.3", "feats_type.3",
                                                  "utt2num_frames.3"]


def test_default_feats_type():
    assert default_feats_type("/data/coco/cocobu_att/") == "cocobu_att"
    assert default_feats_type("msvd resnet.hdf5") == "msvd_resnet"


def test_errors_name_clip_id_and_file(tmp_path, sc_dirs):
    fc, att, _, _ = sc_dirs
    out = tmp_path / "o" / "feats.1"
    clip2id = _clip2id(tmp_path, {"coco-1": "391895", "coco-2": "999"})
    with pytest.raises(FileNotFoundError, match=r"clip2id:2: clip coco-2 \(id 999\): .*cocotalk_fc/999.npy"):
        import_feats(clip2id, "sc_fc", fc, out)
    assert not os.path.exists(f"{out}.scp")
    np.save(fc / "999.npy", np.zeros((2, 8)))
    with pytest.raises(ValueError, match=r"clip coco-2 \(id 999\): .*999.npy: expected an fc vector"):
        import_feats(clip2id, "sc_fc", fc, out)
    a = np.zeros(8)
    a[3] = np.nan
    np.save(fc / "999.npy", a)
    with pytest.raises(ValueError, match=r"clip coco-2 \(id 999\): .*999.npy: 1 non-finite"):
        import_feats(clip2id, "sc_fc", fc, out)
    np.save(fc / "999.npy", np.zeros(9))
    with pytest.raises(ValueError, match=r"clip coco-2 \(id 999\): .*999.npy: .*dimension 9 differs from 8"):
        import_feats(clip2id, "sc_fc", fc, out)
    np.savez(att / "999.npz", x=np.zeros((2, 8)))
    with pytest.raises(ValueError, match=r"clip coco-2 \(id 999\): .*999.npz: no array 'feat'"):
        import_feats(clip2id, "sc_att", att, out)
    with pytest.raises(FileNotFoundError, match="no such feature directory"):
        import_feats(clip2id, "sc_att", tmp_path / "nope", out)
    with pytest.raises(ValueError, match="layout"):
        import_feats(clip2id, "npy", fc, out)
    bad_id = _clip2id(tmp_path, {"coco-1": "../cocotalk_fc/391895"}, "bad_ids")
    with pytest.raises(ValueError, match="cannot name a file"):
        import_feats(bad_id, "sc_fc", fc, out)
    src = tmp_path / "v.h5"
    with h5py.File(src, "w") as f:
        f["391895"] = np.zeros((3, 4))
        f["grp/x"] = np.zeros(2)
        f["cube"] = np.zeros((2, 2, 2))
    with pytest.raises(KeyError, match=r"clip coco-2 \(id 999\): no dataset '999' in .*v.h5"):
        import_feats(clip2id, "hdf5", src, out)
    cube = _clip2id(tmp_path, {"c": "cube"}, "cube_ids")
    with pytest.raises(ValueError, match=r"clip c \(id cube\): .*v.h5: dataset 'cube' has shape \(2, 2, 2\)"):
        import_feats(cube, "hdf5", src, out)
    with pytest.raises(FileNotFoundError, match="no such HDF5 file"):
        import_feats(cube, "hdf5", tmp_path / "none.h5", out)


def test_unreadable_sources_are_value_errors_naming_the_file(tmp_path, sc_dirs):
    """Not-HDF5 source, truncated .npz / .npy: ValueError naming the clip2id line, clip, id and file."""
    fc, att, _, _ = sc_dirs
    out = tmp_path / "o" / "feats.1"
    clip2id = _clip2id(tmp_path, {"coco-1": "391895", "coco-2": "522418"})
    not_h5 = tmp_path / "feats not h5.h5"
    not_h5.write_bytes(b"this is not an HDF5 file" * 10)
    with pytest.raises(ValueError, match=r"feats not h5.h5 is not a readable HDF5 file"):
        import_feats(clip2id, "hdf5", not_h5, out)
    data = (att / "522418.npz").read_bytes()
    (att / "522418.npz").write_bytes(data[: len(data) // 2])  # truncated: no zip central directory
    with pytest.raises(ValueError, match=r"clip2id:2: clip coco-2 \(id 522418\): .*cocobu_att/522418.npz: "
                                         r"cannot read features \(BadZipFile"):
        import_feats(clip2id, "sc_att", att, out)
    data = (fc / "522418.npy").read_bytes()
    (fc / "522418.npy").write_bytes(data[:100])  # header only: too few bytes for the array
    with pytest.raises(ValueError, match=r"clip2id:2: clip coco-2 \(id 522418\): .*cocotalk_fc/522418.npy: "
                                         r"cannot read features"):
        import_feats(clip2id, "sc_fc", fc, out)
    (fc / "522418.npy").write_bytes(b"")
    with pytest.raises(ValueError, match=r"clip coco-2 \(id 522418\): .*522418.npy: cannot read features \(EOFError"):
        import_feats(clip2id, "sc_fc", fc, out)
    assert not os.path.exists(f"{out}.scp")
