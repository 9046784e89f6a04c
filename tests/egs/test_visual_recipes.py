"""The image and video recipes (issue 12): every stage and every RL objective of the mini recipes
on their real-media fixtures (the CNN route, a randomly initialised CNN), and the import route
(precomputed features written by the test in the self-critical / HDF5 layouts) through caption.sh."""

import json
import shutil
import sys

import h5py
import numpy as np
import pytest
import yaml
from test_recipes import EGS, GENERATED, RL_ALGOS, ROOT, _results_rows, _run

from recipe_logs import failure_report

pytestmark = pytest.mark.long(3.5)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

# mini recipe -> (full recipe whose local/ it links, recipes whose conf/ it links into, dump dir name)
MINI = {
    "mini_mscoco": ("mscoco", []),
    "mini_msvd": ("msvd", ["mini_mscoco"]),
    "mini_msrvtt": ("msrvtt", ["mini_mscoco", "mini_msvd"]),
    "mini_tgif": ("tgif", ["mini_mscoco"]),
}
ALL_OBJECTIVES = ["mini_mscoco", "mini_msrvtt", "mini_msvd"]  # the mini recipes that run every RL objective
MODELS = {  # the XE config of each mini recipe: (encoder, decoder)
    "mini_mscoco": ("linear", "att_lstm"),
    "mini_msvd": ("rnn", "lstm"),
    "mini_msrvtt": ("rnn", "att_lstm"),
}


def _copy_recipe(tmp_path, mini):
    """A clean copy of a mini recipe and everything its relative symlinks reach."""
    full, linked = MINI[mini]
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__")
    for sub in ["egs/TEMPLATE", f"egs/{full}/local", f"egs/{mini}", "utils"] + [f"egs/{r}/conf" for r in linked]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    return tmp_path / "egs" / mini


@pytest.mark.parametrize("mini", ALL_OBJECTIVES)
def test_mini_visual_recipe_end_to_end(tmp_path, mini):
    d = _copy_recipe(tmp_path, mini)
    r = _run(["./run.sh"], cwd=d, timeout=1800)
    assert r.returncode == 0, failure_report(r, d)

    # stage 1-2: the media list of the data dir and CNN features of every clip
    media = "image.scp" if mini == "mini_mscoco" else "video.scp"
    for split in ["train", "val", "test"]:
        clips = [line.split()[0] for line in (d / "data" / split / media).read_text().splitlines()]
        assert clips and clips == sorted(clips)
        assert (d / "data" / split / "clip2id").read_text().split()[::2] == clips
        dump = d / "dump" / "cnn" / split
        assert [line.split()[0] for line in (dump / "feats.scp").read_text().splitlines()] == clips
        frames = dict(line.split() for line in (dump / "utt2num_frames").read_text().splitlines())
        if mini == "mini_mscoco":
            assert len(set(frames.values())) == 1 and int(next(iter(frames.values()))) > 1  # a grid per image
        else:
            assert set(frames.values()) == {"4"}  # 4 frames per video (conf/feats_cnn.yaml)

    # stage 5: the configured encoder/decoder; stage 6: every objective trained and was validated
    xe_dir = next(p for p in (d / "exp").glob("xe_*") if p.is_dir())
    conf = yaml.safe_load((xe_dir / "config.yaml").read_text())
    assert (conf["encoder"], conf["decoder"]) == MODELS[mini]
    assert "parameters: encoder" in (xe_dir / "train.log").read_text()
    for algo in RL_ALGOS:
        hist = json.loads(next(xe_dir.glob(f"{algo}_*/history.json")).read_text())
        assert len(hist) == 2 and all(h["steps"] == 5 for h in hist)
        assert all(np.isfinite(h["train_reward"]) and np.isfinite(h["valid_cider_d"]) for h in hist), (algo, hist)

    # stages 8-9: a row per model on the test set, scored
    rows = _results_rows((d / "RESULTS.md").read_text())
    models = {m for m, s in rows if s == "test"}
    assert xe_dir.name in models
    for algo in RL_ALGOS:
        assert any(m.startswith(f"{xe_dir.name}/{algo}_") for m in models), (algo, models)
    if mini == "mini_mscoco":  # --ensemble_models all: one ensemble of 7 attention models
        assert any(m.startswith("ensemble_") for m in models), models
    for cells in rows.values():
        assert cells["CIDEr-D"] not in ("", "skipped", "nan"), cells
    for p in (d / "exp").glob("**/decode_*/test"):
        hyp = [line.split()[0] for line in (p / "text").read_text().splitlines()]
        assert hyp == [line.split()[0] for line in (d / "data" / "test" / media).read_text().splitlines()]


def _write_hdf5_layout(fixture, path):
    """Frame features in the common MSR-VTT layout: one dataset (frames, 12) per video id."""
    ids = []
    for name in ["train_val_videodatainfo.json", "test_videodatainfo.json"]:
        ids += [v["video_id"] for v in json.loads((fixture / name).read_text())["videos"]]
    rng = np.random.default_rng(0)
    arrays = {vid: rng.standard_normal((int(rng.integers(3, 9)), 12)).astype(np.float32) for vid in ids}
    with h5py.File(path, "w") as f:
        for vid, a in arrays.items():
            f.create_dataset(vid, data=a)
    return arrays


def test_import_route_hdf5_through_caption_sh(tmp_path):
    """feats_type=import: data dirs without video.scp (stage 1 validates with --no-media), stage 2
    imports the test's HDF5 file per clip2id, and XE trains on it."""
    d = _copy_recipe(tmp_path, "mini_msrvtt")
    arrays = _write_hdf5_layout(d / "msrvtt_fixture", tmp_path / "frame_feats.h5")
    (tmp_path / "feats_import.yaml").write_text(f"layout: hdf5\nsource: {tmp_path / 'frame_feats.h5'}\n")
    r = _run(["./run.sh", "--stage", "1", "--stop_stage", "5", "--feats_type", "import",
              "--feats_config", str(tmp_path / "feats_import.yaml"),
              "--local_data_opts", "--msrvtt_root msrvtt_fixture", "--xe_args", "--max_epoch 2"], cwd=d, timeout=1200)
    assert r.returncode == 0, failure_report(r, d)
    assert not (d / "data" / "train" / "video.scp").exists()
    from captionlib.io.feats import FeatReader

    for split in ["train", "val", "test"]:
        clip2id = dict(line.split() for line in (d / "data" / split / "clip2id").read_text().splitlines())
        # conf name feats_import.yaml: tag "import"
        reader = FeatReader(str(d / "dump" / "import" / split / "feats.scp"))
        assert sorted(reader.keys()) == sorted(clip2id)
        for clip, vid in clip2id.items():
            np.testing.assert_array_equal(reader[clip], arrays[vid])
        assert (d / "dump" / "import" / split / "feats_dim").read_text().strip() == "12"
    assert list((d / "exp").glob("xe_*_import_*/valid.cider_d.best.pth"))


def test_import_route_self_critical_fc_through_caption_sh(tmp_path):
    """feats_type=import with the self-critical.pytorch fc layout (<cocoid>.npy): one vector per image."""
    d = _copy_recipe(tmp_path, "mini_mscoco")
    images = json.loads((d / "coco_fixture" / "dataset_coco.json").read_text())["images"]
    fc = tmp_path / "cocotalk_fc"
    fc.mkdir()
    rng = np.random.default_rng(1)
    vectors = {str(im["cocoid"]): rng.standard_normal(10).astype(np.float32) for im in images}
    for cocoid, v in vectors.items():
        np.save(fc / f"{cocoid}.npy", v)
    (tmp_path / "feats_fc.yaml").write_text(f"layout: sc_fc\nsource: {fc}\n")
    r = _run(["./run.sh", "--stage", "1", "--stop_stage", "2", "--feats_type", "import",
              "--feats_config", str(tmp_path / "feats_fc.yaml"), "--local_data_opts", "--coco_root coco_fixture"],
             cwd=d, timeout=600)
    assert r.returncode == 0, failure_report(r, d)
    from captionlib.io.feats import FeatReader

    clip2id = dict(line.split() for line in (d / "data" / "train" / "clip2id").read_text().splitlines())
    reader = FeatReader(str(d / "dump" / "import_fc" / "train" / "feats.scp"))  # the feature tag: import + config name
    assert len(clip2id) == 8  # Karpathy train + restval
    for clip, cocoid in clip2id.items():
        np.testing.assert_array_equal(reader[clip], vectors[cocoid][None, :])


def test_visual_recipes_say_what_to_bring():
    for recipe, words in [("mscoco", ["dataset_coco.json", "cocobu_att"]),
                          ("msvd", ["MSR Video Description Corpus.csv", "youtube_mapping.txt"]),
                          ("msrvtt", ["train_val_videodatainfo.json", "test_videodatainfo.json"]),
                          ("tgif", ["tgif-v1.0.tsv", "splits/train.txt", "gifs/"])]:
        readme = (EGS / recipe / "README.md").read_text()
        assert "./run.sh" in readme and all(w in readme for w in words), recipe
        r = _run(["local/download.sh"], cwd=EGS / recipe)  # no corpus root: says what to bring, exit 1
        assert r.returncode == 1 and words[0] in r.stdout + r.stderr, r.stdout + r.stderr


def test_mini_tgif_preset_end_to_end(tmp_path):
    """egs/mini_tgif: ./run_preset.sh seed001_sle_tgif, stages 0-10 on the fixture's animated GIFs
    (one listed GIF without a file, one single-frame GIF): XE then SLE, decoded and scored."""
    d = _copy_recipe(tmp_path, "mini_tgif")
    r = _run(["./run_preset.sh", "seed001_sle_tgif"], cwd=d, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0, failure_report(r, d)
    # stage 1: the missing GIF is counted, named and listed; stage 2: frames of every GIF through the CNN
    assert "TGIF train: 1 of 8 GIFs missing (12.5%): tumblr_nb8sq0yel8_250.gif" in out
    assert (d / "data" / "train" / "missing").read_text().split()[0] == "tgif-tumblr_nb8sq0yel8_250"
    for split, clips in (("train", 7), ("val", 2), ("test", 3)):
        video = [line.split()[0] for line in (d / "data" / split / "video.scp").read_text().splitlines()]
        assert len(video) == clips and video == sorted(video)
        frames = dict(line.split() for line in (d / "dump" / "cnn" / split / "utt2num_frames").read_text().splitlines())
        assert list(frames) == video
        assert set(frames.values()) == {"1"}  # temporal_pool: mean, one row per GIF (the one-frame GIF too)
    # stages 5-6: the preset's configs (seed 001's model, SLE); stages 8-9: both models scored on test
    xe_dir = d / "exp" / "xe_train_xe_tgif_cnn_word"
    conf = yaml.safe_load((xe_dir / "config.yaml").read_text())
    assert (conf["encoder"], conf["decoder"], conf["decoder_conf"]["init_state"]) == ("linear", "lstm", "audio")
    hist = json.loads((xe_dir / "sle_train_sle_tgif" / "history.json").read_text())
    assert len(hist) == 2 and all(np.isfinite(h["train_reward"]) for h in hist), hist
    rows = _results_rows((d / "RESULTS.md").read_text())
    assert {(m, s) for m, s in rows} == {(xe_dir.name, "test"), (f"{xe_dir.name}/sle_train_sle_tgif", "test")}
    assert all(cells["CIDEr-D"] not in ("", "skipped", "nan") for cells in rows.values())
    assert all(key[0].startswith(xe_dir.name) and "decode_tgif" in cells["decode"] for key, cells in rows.items())


def test_mini_tgif_fixture_is_what_its_script_makes(tmp_path):
    """tgif_fixture/make_fixture.py writes the committed fixture: the same texts and, frame by frame,
    the same pictures and delays (compared decoded, so that another Pillow's GIF encoder still passes)."""
    from PIL import Image, ImageSequence

    fixture = EGS / "mini_tgif" / "tgif_fixture"
    r = _run([sys.executable, str(fixture / "make_fixture.py"), "--output_dir", str(tmp_path)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for name in ["release/tgif-v1.0.tsv", "release/splits/train.txt", "release/splits/val.txt",
                 "release/splits/test.txt"]:
        assert (tmp_path / name).read_text() == (fixture / name).read_text(), name
    made = sorted(p.name for p in (tmp_path / "gifs").iterdir())
    assert made == sorted(p.name for p in (fixture / "gifs").iterdir()) and len(made) == 12

    def decoded(path):
        with Image.open(path) as img:
            return [(np.asarray(f.convert("RGB")).tobytes(), f.info.get("duration"))
                    for f in ImageSequence.Iterator(img)]

    for name in made:
        assert decoded(tmp_path / "gifs" / name) == decoded(fixture / "gifs" / name), name

