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


# ---------------------------------------------------------------- audio: ids from wav.scp (issue 26 item 5)
def _audio_dir(tmp_path, names):
    """An audio tree <tmp>/clotho/<split>/<name>.wav (empty files: only the paths matter) and its wav.scp."""
    wav_scp = {}
    for i, (split, name) in enumerate(names, start=1):
        wav = tmp_path / "clotho" / split / f"{name}.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        wav.write_bytes(b"")
        wav_scp[f"clotho-{split}-{i:05d}"] = str(wav)
    write_scp(tmp_path / "wav.scp", wav_scp)
    return tmp_path / "wav.scp"


def _import(tmp_path, *args):
    out = tmp_path / "dump" / "feats.1"
    caption_import_feats.main(["--wav_scp", str(tmp_path / "wav.scp"), "--out_prefix", str(out), *args])
    return FeatReader(f"{out}.scp")


def test_frames_npy_by_file_name(tmp_path):
    """No clip2id: the id of a clip is its file name without .wav (spaces kept); (T, D) frames and
    a clip embedding (D,) -> (1, D)."""
    _audio_dir(tmp_path, [("validation", "Whistling"), ("validation", "living room clock")])
    rng = np.random.default_rng(2)
    emb = tmp_path / "beats"
    emb.mkdir()
    frames = rng.standard_normal((7, 6)).astype(np.float16)
    clip_vec = rng.standard_normal(6)
    np.save(emb / "Whistling.npy", frames)
    np.save(emb / "living room clock.npy", clip_vec)
    got = _import(tmp_path, "--layout", "frames_npy", "--source", str(emb), "--feats_dim", "6")
    np.testing.assert_array_equal(got["clotho-validation-00001"], frames.astype(np.float32))
    np.testing.assert_array_equal(got["clotho-validation-00002"], clip_vec[None, :].astype(np.float32))
    assert (tmp_path / "dump" / "feats_dim.1").read_text() == "6\n"
    assert (tmp_path / "dump" / "feats_type.1").read_text() == "beats\n"
    assert read_scp(tmp_path / "dump" / "utt2num_frames.1") == {"clotho-validation-00001": "7",
                                                                "clotho-validation-00002": "1"}


@pytest.mark.parametrize("layout", ["frames_npy", "hdf5"])
def test_audio_root_keeps_the_split_of_a_repeated_file_name(tmp_path, layout):
    """Clotho v2.1 repeats file names across splits (e.g. FREEZER_DOOR_OPEN_CLOSE.wav in development
    and evaluation): with --audio_root the ids are <split>/<name>, a tree mirroring the audio's
    (.npy files in split directories, or HDF5 groups), and each clip gets its own features."""
    _audio_dir(tmp_path, [("development", "FREEZER_DOOR_OPEN_CLOSE"), ("evaluation", "FREEZER_DOOR_OPEN_CLOSE")])
    rng = np.random.default_rng(3)
    arrays = {split: rng.standard_normal((int(n), 4)).astype(np.float32)
              for split, n in (("development", 5), ("evaluation", 3))}
    if layout == "frames_npy":
        src = tmp_path / "eat"
        for split, a in arrays.items():
            (src / split).mkdir(parents=True)
            np.save(src / split / "FREEZER_DOOR_OPEN_CLOSE.npy", a)
    else:
        src = tmp_path / "eat.h5"
        with h5py.File(src, "w") as f:
            for split, a in arrays.items():
                f[f"{split}/FREEZER_DOOR_OPEN_CLOSE"] = a
    got = _import(tmp_path, "--layout", layout, "--source", str(src), "--audio_root", str(tmp_path / "clotho"))
    np.testing.assert_array_equal(got["clotho-development-00001"], arrays["development"])
    np.testing.assert_array_equal(got["clotho-evaluation-00002"], arrays["evaluation"])


def _import_error(tmp_path, capsys, *args):
    with pytest.raises(SystemExit) as e:
        _import(tmp_path, *args)
    return e.value.code, capsys.readouterr().err


def test_audio_errors_name_the_clip_and_the_file(tmp_path, capsys):
    wav_scp = _audio_dir(tmp_path, [("validation", "Whistling"), ("validation", "bird twitter")])
    emb = tmp_path / "clap"
    emb.mkdir()
    np.save(emb / "Whistling.npy", np.zeros((4, 8), np.float32))
    layout = ["--layout", "frames_npy", "--source", str(emb)]
    # a missing embedding file
    code, err = _import_error(tmp_path, capsys, *layout)
    assert code == 1
    assert (f"ERROR: {wav_scp}:2: clip clotho-validation-00002 (id bird twitter): no feature file "
            f"{emb / 'bird twitter.npy'}\n") in err
    assert not (tmp_path / "dump" / "feats.1.scp").exists()
    # a wrong dimension: against --feats_dim (even for the first clip), and against the earlier clips
    np.save(emb / "bird twitter.npy", np.zeros((4, 6), np.float32))
    code, err = _import_error(tmp_path, capsys, *layout, "--feats_dim", "6")
    assert code == 1 and (f"{wav_scp}:1: clip clotho-validation-00001 (id Whistling): {emb / 'Whistling.npy'}: "
                          "features of shape (4, 8), expected dimension feats_dim=6") in err
    code, err = _import_error(tmp_path, capsys, *layout)
    assert code == 1 and f"clip clotho-validation-00002 (id bird twitter): {emb / 'bird twitter.npy'}: " in err
    assert "dimension 6 differs from 8" in err
    # a stack of several layers (L, T, D) is not frames
    np.save(emb / "bird twitter.npy", np.zeros((2, 4, 8), np.float32))
    code, err = _import_error(tmp_path, capsys, *layout)
    assert code == 1
    assert f"{emb / 'bird twitter.npy'}: expected frames (T, D) or one vector (D,), got shape (2, 4, 8)" in err
    # an audio file outside --audio_root
    code, err = _import_error(tmp_path, capsys, *layout, "--audio_root", str(tmp_path / "clotho" / "development"))
    assert code == 1 and f"{wav_scp}:1: clip clotho-validation-00001: " in err and "is not below audio_root" in err


def test_audio_usage_errors_exit_2(tmp_path, capsys):
    wav_scp = _audio_dir(tmp_path, [("validation", "Whistling")])
    write_scp(tmp_path / "clip2id", {"clotho-validation-00001": "Whistling"})
    common = ["--layout", "frames_npy", "--source", str(tmp_path), "--out_prefix", str(tmp_path / "feats.1")]
    clip2id = ["--clip2id", str(tmp_path / "clip2id")]
    for extra, msg in ((clip2id + ["--wav_scp", str(wav_scp)], "one of --clip2id"),
                       ([], "one of --clip2id"),
                       (clip2id + ["--audio_root", str(tmp_path)], "--audio_root is for")):
        with pytest.raises(SystemExit) as e:
            caption_import_feats.main(common + extra)
        assert e.value.code == 2 and msg in capsys.readouterr().err, extra
