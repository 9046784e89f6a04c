"""Tests of caption_import_feats (one job, each layout once)."""

import h5py
import numpy as np
import pytest

from captionbin import caption_import_feats
from captionlib.io.datadir import read_scp, write_scp
from captionlib.io.feats import FeatReader


def test_parser_required():
    assert caption_import_feats.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_import_feats.main(["--layout", "sc_fc"])
    assert e.value.code != 0


@pytest.mark.parametrize("layout", ["sc_fc", "sc_att", "hdf5"])
def test_round_trip(tmp_path, layout):
    rng = np.random.default_rng(1)
    arrays = {"42": rng.standard_normal((3, 3, 5)).astype(np.float32), "7": rng.standard_normal((4, 5))}
    src = tmp_path / "src"
    src.mkdir()
    if layout == "sc_fc":
        arrays = {k: a.reshape(-1, 5)[0] for k, a in arrays.items()}
        for k, a in arrays.items():
            np.save(src / f"{k}.npy", a)
    elif layout == "sc_att":
        for k, a in arrays.items():
            np.savez_compressed(src / f"{k}.npz", feat=a)
    else:
        src = tmp_path / "feats.h5"
        arrays = {k: a.reshape(-1, 5) for k, a in arrays.items()}
        with h5py.File(src, "w") as f:
            for k, a in arrays.items():
                f[k] = a
    write_scp(tmp_path / "clip2id", {"coco-42": "42", "coco-7": "7"})
    out = tmp_path / "dump" / "feats.1"
    caption_import_feats.main(["--clip2id", str(tmp_path / "clip2id"), "--layout", layout, "--source", str(src),
                               "--out_prefix", str(out), "--filetype", "hdf5"])
    got = FeatReader(f"{out}.scp")
    for k, a in arrays.items():
        np.testing.assert_array_equal(got[f"coco-{k}"], a.reshape(-1, 5).astype(np.float32))
    assert (tmp_path / "dump" / "feats_dim.1").read_text() == "5\n"
    assert set(read_scp(tmp_path / "dump" / "utt2num_frames.1")) == {"coco-42", "coco-7"}


def test_missing_id_exits_1(tmp_path, capsys):
    src = tmp_path / "feats.h5"
    with h5py.File(src, "w") as f:
        f["1"] = np.zeros((2, 3))
    write_scp(tmp_path / "clip2id", {"a": "1", "b": "2"})
    with pytest.raises(SystemExit) as e:
        caption_import_feats.main(["--clip2id", str(tmp_path / "clip2id"), "--layout", "hdf5", "--source", str(src),
                                   "--out_prefix", str(tmp_path / "feats.1")])
    assert e.value.code == 1
    assert f"ERROR: {tmp_path / 'clip2id'}:2: clip b (id 2): no dataset '2' in {src}\n" in capsys.readouterr().err
