"""Tests of caption_dump_feats (one job) and egs/TEMPLATE/scripts/dump_feats.sh (JOB array + merge)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from captionbin import caption_dump_feats
from captionlib.audio.features import logmel
from captionlib.audio.io import load_audio
from captionlib.io.datadir import read_scp, write_scp
from captionlib.io.feats import FeatReader
from captionlib.io.stats import compute_feats_stats

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path("/work/shared/data/clotho_fixture")
SUBSET = Path("/work/shared/data/clotho_subset")
CONF = REPO / "egs" / "mini_clotho" / "conf" / "feats_logmel.yaml"
CLIPS = {
    "clotho-development-00001": FIXTURE / "development" / "Distorted AM Radio noise.wav",
    "clotho-evaluation-00001": FIXTURE / "evaluation" / "bird-twitter-car.wav",
    "clotho-validation-00001": FIXTURE / "validation" / "Whistling.wav",
    "clotho-validation-00002": FIXTURE / "validation" / "living room clock.wav",
}

# two clips keep the shell tests fast (each job imports torch)
SH_CLIPS = {k: v for k, v in CLIPS.items() if k.startswith("clotho-validation")}


@pytest.fixture
def wav_scp(tmp_path):
    p = tmp_path / "wav.scp"
    write_scp(p, {k: str(v) for k, v in CLIPS.items()})
    return p


def test_get_parser_main_without_args_and_print_config():
    assert caption_dump_feats.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        caption_dump_feats.main([])
    assert e.value.code != 0
    out = subprocess.run(
        [sys.executable, "-m", "captionbin.caption_dump_feats", "--config", str(CONF), "--print_config"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    conf = yaml.safe_load(out)
    assert conf["n_mels"] == 64 and conf["fs"] is None and conf["win_length_s"] == 0.04
    # the options of feats_type pretrained stay out of a logmel config's resolved options (the dump's
    # .done key and feats_config.yaml): an existing dump is not redone for them
    assert not {"encoder", "pretrained", "classes_num"} & set(conf)


@pytest.mark.parametrize("args, message", [
    (["--encoder", "cnn10"], "--encoder: only for --feats_type pretrained, not logmel"),
    (["--feats_type", "pretrained", "--encoder", "cnn10", "--fs", "32000"],
     "--feats_type pretrained needs --encoder, --pretrained and --fs"),
    (["--feats_type", "pretrained", "--encoder", "crnn", "--pretrained", "x.pth", "--fs", "32000"],
     "invalid choice: 'crnn'"),
])
def test_pretrained_options_are_checked_before_any_work(tmp_path, wav_scp, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        caption_dump_feats.main(["--wav_scp", str(wav_scp), "--out_prefix", str(tmp_path / "feats.1"), *args])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.glob("feats.1*"))


def test_pretrained_checkpoint_of_another_front_end_fails_naming_it(tmp_path, wav_scp, capsys):
    """A ConvNeXt checkpoint (224 mel bins) with the 64-band log-mel of PANNs: exit 1, the error
    names the checkpoint, nothing is written."""
    from captionlib.models.convnext import ConvNeXtEncoder
    from captionlib.models.panns import front_end_tensors

    conf = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_convnext.yaml").read_text())
    ckpt = tmp_path / "convnext.pth"
    torch.save({"model": dict(ConvNeXtEncoder().state_dict(), **front_end_tensors(conf))}, ckpt)
    panns = REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml"
    with pytest.raises(SystemExit) as e:
        caption_dump_feats.main(["--config", str(panns), "--feats_type", "pretrained", "--encoder", "convnext",
                                 "--pretrained", str(ckpt), "--wav_scp", str(wav_scp),
                                 "--out_prefix", str(tmp_path / "feats.1")])
    err = capsys.readouterr().err
    assert e.value.code == 1 and (f"{ckpt}: the features config and the checkpoint disagree (the checkpoint itself is "
                                  "fine; nothing was loaded): the features config has n_mels 64 (checkpoint: 224); "
                                  "the checkpoint's front end is the one of egs/clotho/conf/feats_convnext.yaml") in err
    assert not list(tmp_path.glob("feats.1*"))


def test_a_good_checkpoint_with_a_features_config_not_its_own_blames_the_config(tmp_path, wav_scp, capsys):
    """A PANNs checkpoint is fine; the seed system's log-mel config at 32 kHz is not its front end:
    exit 1, one line saying the config and the checkpoint disagree, which options differ, and the
    config the checkpoint expects; nothing is written."""
    from captionlib.models.panns import Cnn10Encoder, front_end_tensors

    panns = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml").read_text())
    ckpt = tmp_path / "Cnn10_mAP=0.380.pth"
    torch.save({"model": dict(Cnn10Encoder().state_dict(), **front_end_tensors(panns)), "iteration": 1}, ckpt)
    with pytest.raises(SystemExit) as e:
        caption_dump_feats.main(["--config", str(CONF), "--fs", "32000", "--feats_type", "pretrained", "--encoder",
                                 "cnn10", "--pretrained", str(ckpt), "--wav_scp", str(wav_scp),
                                 "--out_prefix", str(tmp_path / "feats.1")])
    err = capsys.readouterr().err
    line = next(t for t in err.splitlines() if "ERROR" in t)
    assert e.value.code == 1 and "Traceback" not in err
    assert f"{ckpt}: the features config and the checkpoint disagree (the checkpoint itself is fine" in line, line
    assert "n_fft 2048 (checkpoint: 1024)" in line and "fmin 0.0 (checkpoint: 50)" in line, line
    assert line.endswith("the checkpoint's front end is the one of egs/clotho/conf/feats_panns.yaml for the "
                         "published PANNs checkpoints: dump the features with that config"), line
    assert "mis-shaped" not in line
    assert not list(tmp_path.glob("feats.1*"))


def test_recipe_feats_configs_identical():
    assert CONF.read_text() == (REPO / "egs" / "clotho" / "conf" / "feats_logmel.yaml").read_text()


@pytest.mark.parametrize("filetype, ext", [("ark", "ark"), ("hdf5", "h5")])
def test_one_job(tmp_path, wav_scp, filetype, ext, capsys):
    out = tmp_path / "dump" / "feats.3"
    caption_dump_feats.main(
        ["--config", str(CONF), "--wav_scp", str(wav_scp), "--filetype", filetype, "--out_prefix", str(out)]
        + ["--log_interval", "2"]
    )
    d = tmp_path / "dump"
    assert sorted(os.listdir(d)) == sorted(
        [f"feats.3.{ext}", "feats.3.scp", "utt2num_frames.3", "feats_dim.3", "feats_type.3"]
    )
    assert (d / "feats_dim.3").read_text() == "64\n" and (d / "feats_type.3").read_text() == "logmel\n"
    assert read_scp(d / "utt2num_frames.3") == {k: "101" for k in CLIPS}
    progress = [line.split(": ", 1)[1] for line in capsys.readouterr().err.splitlines() if "clips/s" in line]
    assert len(progress) == 2
    assert progress[0].startswith("processed 2/4 clips (") and progress[1].startswith("processed 4/4 clips (")
    reader = FeatReader(d / "feats.3.scp")
    assert list(reader.keys()) == list(CLIPS)
    for k, path in CLIPS.items():
        assert reader.get_path(k).startswith(str(d / f"feats.3.{ext}:"))
        wave, sr = load_audio(path)
        np.testing.assert_array_equal(reader[k], logmel(wave, sr))


def test_resampling_option_changes_features(tmp_path, wav_scp):
    caption_dump_feats.main(["--wav_scp", str(wav_scp), "--out_prefix", str(tmp_path / "a" / "feats.1")])
    caption_dump_feats.main(
        ["--wav_scp", str(wav_scp), "--out_prefix", str(tmp_path / "b" / "feats.1"), "--fs", "16000"]
        + ["--n_mels", "40", "--write_num_frames", str(tmp_path / "b" / "nf")]
    )
    a = FeatReader(tmp_path / "a" / "feats.1.scp")
    b = FeatReader(tmp_path / "b" / "feats.1.scp")
    k = "clotho-validation-00001"
    assert a[k].shape == (101, 64) and b[k].shape == (101, 40)
    wave, sr = load_audio(CLIPS[k], fs=16000)
    np.testing.assert_array_equal(b[k], logmel(wave, sr, n_mels=40))
    assert (tmp_path / "b" / "nf").is_file() and (tmp_path / "b" / "feats_dim.1").read_text() == "40\n"


def test_float32_and_float64_dumps_agree_in_features_and_stats(tmp_path):
    clips = {f"c{i:02d}": p for i, p in enumerate(sorted(SUBSET.glob("*/*.wav")) + list(CLIPS.values()))}
    assert len(clips) >= 4
    write_scp(tmp_path / "wav.scp", {k: str(v) for k, v in clips.items()})
    stats, feats = {}, {}
    for dtype in ("float32", "float64"):
        caption_dump_feats.main(
            ["--config", str(CONF), "--wav_scp", str(tmp_path / "wav.scp"), "--out_prefix"]
            + [str(tmp_path / dtype / "feats.1"), "--dtype", dtype]
        )
        feats[dtype] = FeatReader(tmp_path / dtype / "feats.1.scp")
        stats[dtype] = compute_feats_stats(tmp_path / dtype / "feats.1.scp", tmp_path / dtype / "stats.npz")
    k = "c00"
    wave, sr = load_audio(clips[k])
    np.testing.assert_array_equal(feats["float64"][k], logmel(wave, sr, dtype="float64"))
    for k in clips:
        a, b = feats["float32"][k], feats["float64"][k]
        assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-5, k
    assert stats["float32"]["count"] == stats["float64"]["count"]
    for name in ("mean", "std"):
        np.testing.assert_allclose(stats["float32"][name], stats["float64"][name], rtol=1e-5, atol=0)


def test_bad_clip_names_scp_line_and_path(tmp_path, wav_scp):
    bad = tmp_path / "bad.scp"
    bad.write_text(wav_scp.read_text() + f"zz-clip {tmp_path}/no such.wav\n")
    with pytest.raises(SystemExit) as e:
        caption_dump_feats.main(["--wav_scp", str(bad), "--out_prefix", str(tmp_path / "o" / "feats.1")])
    assert e.value.code == 1
    p = subprocess.run(
        [sys.executable, "-m", "captionbin.caption_dump_feats", "--wav_scp", str(bad)]
        + ["--out_prefix", str(tmp_path / "o" / "feats.1")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1
    assert f"{bad}:5: clip zz-clip: {tmp_path}/no such.wav: audio file not found" in p.stderr
    assert not (tmp_path / "o" / "feats.1.scp").exists()


@pytest.fixture
def recipe(tmp_path):
    for tool in ("run.pl", "split_scp.pl", "parse_options.sh"):
        if not (REPO / "utils" / tool).is_file():
            pytest.skip(f"utils/{tool} not available")
    rec = tmp_path / "rec"
    (rec / "conf").mkdir(parents=True)
    (rec / "utils").symlink_to(REPO / "utils")
    (rec / "scripts").symlink_to(REPO / "egs" / "TEMPLATE" / "scripts")
    shutil.copy(CONF, rec / "conf" / "feats_logmel.yaml")
    data = rec / "data" / "set"
    data.mkdir(parents=True)
    write_scp(data / "wav.scp", {k: str(v) for k, v in SH_CLIPS.items()})
    write_scp(data / "text", {f"{k}-1": "a caption" for k in SH_CLIPS})
    write_scp(data / "utt2spk", {f"{k}-1": k for k in SH_CLIPS})
    write_scp(data / "spk2utt", {k: [f"{k}-1"] for k in SH_CLIPS})
    write_scp(data / "aud2name", {k: v.name for k, v in SH_CLIPS.items()})
    return rec


def _run_sh(rec, *args):
    env = dict(os.environ, LC_ALL="C")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    cmd = ["scripts/dump_feats.sh", "--python", sys.executable, *args]
    return subprocess.run(cmd, cwd=rec, env=env, capture_output=True, text=True, timeout=300)


def test_dump_feats_sh_job_array_merge_and_done(recipe):
    p = _run_sh(recipe, "--nj", "10", "--filetype", "hdf5", "data/set", "dump/logmel/set")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Reducing nj from 10 to the number of clips (2)" in out
    d = recipe / "dump" / "logmel" / "set"
    scp = (d / "feats.scp").read_text().splitlines()
    keys = [line.split(" ", 1)[0] for line in scp]
    assert keys == sorted(SH_CLIPS) and len({line.split(" ", 1)[1].split(":")[0] for line in scp}) == 2
    assert all(line.split(" ", 1)[1].startswith(str(d) + "/feats.") for line in scp)
    assert read_scp(d / "utt2num_frames") == {k: "101" for k in SH_CLIPS}
    assert (d / "feats_dim").read_text() == "64\n" and (d / "feats_type").read_text() == "logmel\n"
    assert not list(d.glob("feats_dim.*"))
    for f in ("wav.scp", "text", "utt2spk", "spk2utt", "aud2name"):
        assert (d / f).read_text() == (recipe / "data" / "set" / f).read_text()
    assert (d / ".done").is_file() and (d / "log" / "dump_feats.2.log").is_file()
    reader = FeatReader(d / "feats.scp")
    wave, sr = load_audio(CLIPS["clotho-validation-00002"])
    np.testing.assert_array_equal(reader["clotho-validation-00002"], logmel(wave, sr))

    # re-running with the same options does nothing
    mtime = (d / "feats.scp").stat().st_mtime_ns
    p = _run_sh(recipe, "--nj", "10", "--filetype", "hdf5", "data/set", "dump/logmel/set")
    assert p.returncode == 0 and "already dumped" in p.stdout + p.stderr
    assert (d / "feats.scp").stat().st_mtime_ns == mtime

    # another filetype redoes the dump (1 job, ark)
    p = _run_sh(recipe, "--nj", "1", "--filetype", "ark", "data/set", "dump/logmel/set")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not list(d.glob("feats.*.h5")) and not (d / "feats.2.scp").exists()
    assert sorted(f.name for f in d.glob("feats.*.ark")) == ["feats.1.ark"]
    np.testing.assert_array_equal(FeatReader(d / "feats.scp")["clotho-validation-00002"], logmel(wave, sr))


def test_dump_feats_sh_failing_job(recipe):
    wav = recipe / "data" / "set" / "wav.scp"
    wav.write_text(wav.read_text().replace(str(CLIPS["clotho-validation-00002"]), "/no/such/file.wav"))
    p = _run_sh(recipe, "--nj", "2", "data/set", "dump/logmel/set")
    assert p.returncode != 0
    d = recipe / "dump" / "logmel" / "set"
    assert not (d / ".done").exists() and not (d / "feats.scp").exists()
    assert "audio file not found" in (d / "log" / "dump_feats.2.log").read_text()


def test_dump_feats_sh_redoes_the_dump_when_an_audio_file_is_fixed_in_place(recipe):
    # own copies of the clips, so that one can be rewritten
    data = recipe / "data" / "set"
    copies = {}
    for k, v in SH_CLIPS.items():
        copies[k] = recipe / f"{k}.wav"
        shutil.copy(v, copies[k])
    write_scp(data / "wav.scp", {k: str(v) for k, v in copies.items()})
    p = _run_sh(recipe, "--nj", "1", "data/set", "dump/logmel/set")
    assert p.returncode == 0, p.stdout + p.stderr
    d = recipe / "dump" / "logmel" / "set"
    key = "clotho-validation-00002"
    before = FeatReader(d / "feats.scp")[key]
    wave, sr = load_audio(copies[key])
    sf.write(str(copies[key]), 0.5 * wave, sr)  # the same file name, other content
    p = _run_sh(recipe, "--nj", "1", "data/set", "dump/logmel/set")
    assert p.returncode == 0 and "already dumped" not in p.stdout + p.stderr, p.stdout + p.stderr
    after = FeatReader(d / "feats.scp")[key]
    assert after.shape == before.shape and not np.allclose(after, before)
    np.testing.assert_allclose(after, logmel(*load_audio(copies[key])), atol=1e-5)
    p = _run_sh(recipe, "--nj", "1", "data/set", "dump/logmel/set")
    assert "already dumped" in p.stdout + p.stderr
