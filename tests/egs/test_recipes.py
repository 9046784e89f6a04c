"""Shell-level checks of the recipes (egs/) and an end-to-end run of egs/mini_clotho."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EGS = ROOT / "egs"
RECIPES = ["clotho", "mini_clotho"]
# Generated directories of a recipe run: never part of the checks.
GENERATED = {"data", "dump", "exp", "downloads"}


def _walk_egs():
    """Yield every path under egs/ outside generated dirs, without following symlinks."""
    for dirpath, dirnames, filenames in os.walk(EGS):
        rel = Path(dirpath).relative_to(EGS)
        if len(rel.parts) == 1:
            dirnames[:] = [d for d in dirnames if d not in GENERATED]
        for name in dirnames + filenames:
            yield Path(dirpath) / name


def _env():
    """Environment whose python3 is the interpreter running the tests (the venv)."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _run(cmd, cwd, **kw):
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, **kw)


needs_utils = pytest.mark.skipif(
    not (ROOT / "utils" / "parse_options.sh").is_file(), reason="utils/parse_options.sh not written yet"
)


def test_shell_syntax():
    scripts = [p for p in _walk_egs() if p.suffix == ".sh" and p.is_file() and not p.is_symlink()]
    assert any(p.name == "caption.sh" for p in scripts)
    for p in scripts:
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, f"{p}: {r.stderr}"


@pytest.mark.parametrize("name", ["cmd.sh", "path.sh", "conf/slurm.conf"])
def test_identical_across_recipes(name):
    ref = (EGS / "TEMPLATE" / name).read_text()
    for recipe in RECIPES:
        assert (EGS / recipe / name).read_text() == ref, f"egs/{recipe}/{name} differs from egs/TEMPLATE/{name}"


def test_cmd_sh_is_local():
    r = subprocess.run(
        ["bash", "-c", ". ./cmd.sh && echo ${cmd_backend} ${train_cmd} ${cuda_cmd} ${decode_cmd}"],
        cwd=EGS / "TEMPLATE",
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["local", "run.pl", "run.pl", "run.pl"]


def test_symlinks_stay_inside_repo():
    links = [p for p in _walk_egs() if p.is_symlink()]
    assert links, "the recipes are expected to symlink caption.sh, scripts and utils"
    for p in links:
        target = os.readlink(p)
        assert not os.path.isabs(target), f"{p} -> {target} is absolute"
        resolved = (p.parent / target).resolve()
        assert resolved == ROOT or ROOT in resolved.parents, f"{p} -> {target} leaves the repository"
        assert resolved.exists(), f"{p} -> {target} is dangling"


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_shape(recipe):
    d = EGS / recipe
    for name, target in [
        ("caption.sh", "../TEMPLATE/caption.sh"),
        ("scripts", "../TEMPLATE/scripts"),
        ("utils", "../../utils"),
    ]:
        assert os.readlink(d / name) == target
    for name in ["run.sh", "path.sh", "cmd.sh"]:
        assert (d / name).is_file() and not (d / name).is_symlink()
    assert os.access(d / "run.sh", os.X_OK)


def test_mini_clotho_ships_fixture():
    fx = EGS / "mini_clotho" / "clotho_fixture"
    assert (fx / "LICENSE_clotho_captions.txt").is_file() and (fx / "README.md").is_file()
    for split in ["development", "validation", "evaluation"]:
        assert (fx / f"clotho_captions_{split}.csv").is_file()
        assert list((fx / split).glob("*.wav"))
    assert os.readlink(EGS / "mini_clotho" / "local") == "../clotho/local"


def test_no_personal_paths():
    for p in _walk_egs():
        if p.is_file() and not p.is_symlink() and p.suffix in {".sh", ".conf", ".md"}:
            text = p.read_text(errors="replace")
            for bad in ["/home/", "/export/", "/work/"]:
                assert bad not in text, f"{p} contains {bad}"


@needs_utils
@pytest.mark.parametrize("recipe", RECIPES)
def test_run_sh_help(recipe):
    r = _run(["./run.sh", "--help"], cwd=EGS / recipe)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    for opt in ["--stage", "--train_sets", "--rl_algo", "--feats_filetype", "--nbest_average", "--metrics"]:
        assert opt in out


@needs_utils
def test_caption_sh_rejects_bad_usage():
    d = EGS / "mini_clotho"
    r = _run(["./caption.sh", "positional"], cwd=d)
    assert r.returncode != 0 and "No positional arguments" in r.stdout + r.stderr
    r = _run(["./caption.sh", "--stage", "100"], cwd=d)
    assert r.returncode != 0 and "--train_sets is required" in r.stdout + r.stderr
    r = _run(["./caption.sh", "--no_such_option", "1"], cwd=d)
    assert r.returncode != 0
    # Nothing is run past the last stage: only option parsing and derived names.
    r = _run(["./run.sh", "--stage", "100"], cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully finished" in r.stdout


@needs_utils
def test_setup_sh_creates_recipe(tmp_path):
    egs = tmp_path / "egs"
    egs.mkdir()
    (egs / "TEMPLATE").symlink_to(EGS / "TEMPLATE")
    (tmp_path / "utils").symlink_to(ROOT / "utils")
    r = _run([str(EGS / "TEMPLATE" / "setup.sh"), "egs/newcorpus"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    new = egs / "newcorpus"
    assert os.readlink(new / "caption.sh") == "../TEMPLATE/caption.sh"
    assert (new / "utils" / "parse_options.sh").is_file()
    assert (new / "cmd.sh").read_text() == (EGS / "TEMPLATE" / "cmd.sh").read_text()
    assert (new / "conf" / "slurm.conf").is_file()
    r = _run(["bash", "-n", "run.sh"], cwd=new)
    assert r.returncode == 0
    r = _run(["./run.sh", "--help"], cwd=new)
    assert r.returncode == 0, r.stderr
    # An existing directory is refused.
    r = _run([str(EGS / "TEMPLATE" / "setup.sh"), "egs/newcorpus"], cwd=tmp_path)
    assert r.returncode != 0


# ------------------------------------------------------------------ end to end
# Everything mini_clotho's ./run.sh needs; the test runs as soon as all of it exists.
E2E_NEEDS = [
    "captionbin/caption_prepare_clotho.py",
    "captionbin/caption_dump_feats.py",
    "captionbin/caption_tokenize.py",
    "captionbin/caption_compute_stats.py",
    "captionbin/caption_compute_cider_df.py",
    "captionbin/caption_train.py",
    "captionbin/caption_rl_train.py",
    "captionbin/caption_decode.py",
    "captionbin/caption_score.py",
    "captionbin/caption_results.py",
    "egs/clotho/local/data.sh",
    "egs/TEMPLATE/scripts/dump_feats.sh",
    "egs/mini_clotho/conf/feats_logmel.yaml",
    "egs/mini_clotho/conf/train_xe.yaml",
    "egs/mini_clotho/conf/train_scst.yaml",
    "egs/mini_clotho/conf/decode.yaml",
    "utils/combine_data.sh",
    "utils/validate_data_dir.sh",
    "utils/split_scp.pl",
]
_missing = [p for p in E2E_NEEDS if not (ROOT / p).exists()]


@pytest.mark.skipif(bool(_missing), reason="mini_clotho needs files not written yet: " + ", ".join(_missing))
def test_mini_clotho_end_to_end(tmp_path):
    """Run egs/mini_clotho/run.sh from a clean copy; check RESULTS.md and every score.json."""
    # A copy keeps the user's own egs/mini_clotho outputs intact; relative symlinks still resolve.
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__")
    for sub in ["egs/TEMPLATE", "egs/clotho/local", "egs/mini_clotho", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "mini_clotho"
    r = _run(["./run.sh"], cwd=d, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-8000:]

    results = (d / "RESULTS.md").read_text()
    rows = [line for line in results.splitlines() if line.startswith("| xe_")]
    xe_rows = [row for row in rows if "/scst_" not in row.split("|")[1]]
    scst_rows = [row for row in rows if "/scst_" in row.split("|")[1]]
    assert len(xe_rows) == 2 and len(scst_rows) == 2, results  # 2 test sets each

    decode_dirs = sorted(p for p in (d / "exp").glob("**/decode_*/*") if p.is_dir())
    assert len(decode_dirs) == 4
    for p in decode_dirs:
        score = json.loads((p / "score.json").read_text())
        assert "CIDEr-D" in score and "skipped" in score
        hyp_keys = [line.split()[0] for line in (p / "text").read_text().splitlines()]
        feats_scp = d / "dump" / "logmel" / p.name / "feats.scp"
        assert hyp_keys == sorted(line.split()[0] for line in feats_scp.read_text().splitlines())

    # Re-running a finished recipe redoes nothing expensive and gives the same table.
    r = _run(["./run.sh", "--stage", "8"], cwd=d, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-8000:]
    assert "already decoded" in r.stdout and "already scored" in r.stdout
    assert (d / "RESULTS.md").read_text() == results
