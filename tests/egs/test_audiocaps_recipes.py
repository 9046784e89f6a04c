"""egs/audiocaps and egs/mini_audiocaps: recipe shape, stage 0/1 scripts, and stages 1-9 end to end.

The mini recipe runs on audiocaps_fixture (official CSV columns, audio made from the event
library, one train clip deliberately missing; see its README.md).
"""

import os
import shutil

import pytest
from test_recipes import EGS, GENERATED, ROOT, _results_rows, _run

pytestmark = pytest.mark.long(0.45)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

FIXTURE = EGS / "mini_audiocaps" / "audiocaps_fixture"
MISSING_CLIP = "audiocaps-mZ9-pQ2rLs7-40"
MISSING_LINE = "AudioCaps train: 1 of 7 clips missing (14.3%): mZ9-pQ2rLs7_40; all listed in data/train/missing"


def _copy(tmp_path, subs):
    """Copy ``subs`` (paths relative to the repository) into ``tmp_path``; relative symlinks still resolve."""
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__")
    for sub in subs:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)


def test_recipe_specifics():
    # shape, cmd.sh/path.sh/slurm.conf copies, --help and the preset configs: tests/egs/test_recipes.py
    assert os.readlink(EGS / "mini_audiocaps" / "local") == "../audiocaps/local"
    assert "fs: 32000" in (EGS / "audiocaps" / "conf" / "feats_logmel.yaml").read_text()


def test_mini_fixture_documented():
    for name in ["train.csv", "val.csv", "test.csv", "README.md", "audio/tuxpaint-stamps-default.copyright"]:
        assert (FIXTURE / name).is_file(), name
    for split in ["train", "val", "test"]:
        assert (FIXTURE / f"{split}.csv").read_text().splitlines()[0] == "audiocap_id,youtube_id,start_time,caption"
    readme = (FIXTURE / "README.md").read_text()
    assert "mZ9-pQ2rLs7" in readme and "not AudioCaps" in readme
    audio = [p.name for p in (FIXTURE / "audio").rglob("*") if p.suffix in (".wav", ".flac", ".ogg")]
    assert len(audio) == 10 and all(name in readme for name in audio)


def test_local_scripts_usage(tmp_path):
    d = EGS / "audiocaps"
    for script in ["local/data.sh", "local/download.sh"]:
        r = _run([script, "--help"], cwd=d)
        assert r.returncode == 0 and "--audiocaps_root" in r.stdout + r.stderr, script
        r = _run([script], cwd=d)
        assert r.returncode == 2 and "--audiocaps_root is required" in r.stdout + r.stderr, script
    # no CSVs: stage 0 says where to get them and fails
    r = _run(["local/download.sh", "--audiocaps_root", str(tmp_path)], cwd=d)
    assert r.returncode == 1
    assert "github.com/cdjkim/audiocaps" in r.stdout and "train.csv not found" in r.stdout
    r = _run(["local/data.sh", "--audiocaps_root", str(tmp_path)], cwd=d)
    assert r.returncode == 1 and "train.csv not found" in r.stdout
    # CSVs and most audio present: counts them, says how to fetch the rest (yt-dlp, ffmpeg), goes on
    r = _run(["local/download.sh", "--audiocaps_root", str(FIXTURE), "--max_missing_fraction", "0.2"], cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "audio of 10 of 11 clips" in r.stdout and "yt-dlp" in r.stdout and "ffmpeg -ss" in r.stdout
    # CSVs but no audio at all: fails with the instructions
    for s in ["train", "val", "test"]:
        shutil.copy(FIXTURE / f"{s}.csv", tmp_path / f"{s}.csv")
    (tmp_path / "audio").mkdir()
    r = _run(["local/download.sh", "--audiocaps_root", str(tmp_path)], cwd=d)
    assert r.returncode == 1 and "no audio at all" in r.stdout


def test_audiocaps_stage1_missing_fraction(tmp_path):
    """egs/audiocaps stage 1 on the fixture: --audiocaps_root and --max_missing_fraction reach data.sh."""
    _copy(tmp_path, ["egs/TEMPLATE", "egs/audiocaps", "egs/clotho/conf", "utils"])
    d = tmp_path / "egs" / "audiocaps"
    r = _run(["./run.sh", "--stage", "1", "--stop_stage", "1", "--audiocaps_root", str(FIXTURE)], cwd=d)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert MISSING_LINE in out and "more than --max_missing_fraction 0.1" in out
    assert (d / "data" / "train" / "missing").read_text().split()[0] == MISSING_CLIP
    r = _run(["./run.sh", "--stage", "1", "--stop_stage", "1", "--audiocaps_root", str(FIXTURE),
              "--max_missing_fraction", "0.2"], cwd=d)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert MISSING_LINE in r.stdout + r.stderr
    assert len((d / "data" / "train" / "wav.scp").read_text().splitlines()) == 6


def test_mini_audiocaps_end_to_end(tmp_path):
    """egs/mini_audiocaps stages 1-9 from a clean copy: XE and SCST rows, the missing clip reported."""
    _copy(tmp_path, ["egs/TEMPLATE", "egs/audiocaps/local", "egs/mini_audiocaps", "utils"])
    d = tmp_path / "egs" / "mini_audiocaps"
    r = _run(["./run.sh", "--stop_stage", "9"], cwd=d, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-8000:]

    # the deliberately missing clip: listed, and the summary line is in the log
    missing = (d / "data" / "train" / "missing").read_text().splitlines()
    assert len(missing) == 1 and missing[0].split()[:3] == [MISSING_CLIP, "mZ9-pQ2rLs7", "40"]
    assert MISSING_LINE in out
    assert MISSING_CLIP not in (d / "data" / "train" / "wav.scp").read_text()
    for s in ["val", "test"]:
        assert (d / "data" / s / "missing").read_text() == ""

    # train: 1 caption per clip; val and test: 5 references per clip, in the data dirs and the dumps
    def refs_per_clip(s):
        return [len(line.split()) - 1 for line in (d / "data" / s / "spk2utt").read_text().splitlines()]

    assert refs_per_clip("train") == [1] * 6
    assert refs_per_clip("val") == [5, 5] and refs_per_clip("test") == [5, 5]
    assert len((d / "dump" / "logmel" / "test" / "feats.scp").read_text().splitlines()) == 2

    rows = _results_rows((d / "RESULTS.md").read_text())
    xe = [m for m, _ in rows if m.startswith("xe_") and "/" not in m]
    scst = [m for m, _ in rows if m.startswith("xe_") and "/scst_" in m]
    assert len(xe) == 1 and len(scst) == 1, sorted(rows)
    assert {(m, "test") for m in xe + scst} <= set(rows)
    for model in xe + scst:
        assert rows[(model, "test")]["CIDEr-D"] not in ("skipped", "nan")
    assert not list((d / "exp").glob("**/*.zip"))  # --stop_stage 9: no packing
