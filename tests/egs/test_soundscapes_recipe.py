"""egs/soundscapes end to end on a small corpus mixed from the event library (its own module,
so that pytest-xdist runs it beside the mini_clotho run of test_recipes.py)."""

import json
import shutil

import pytest
from test_recipes import GENERATED, ROOT, _results_rows, _run

from recipe_logs import failure_report

pytestmark = pytest.mark.long(3.3)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

LIBRARY = ROOT.parent / "shared" / "data" / "event_library"
SMALL_CLASSES = "dog,cow,bee,thunder,telephone,violin,rooster,drum"
# Three training seeds: the assertions are on means over them. One seed's SCST reward is too noisy
# for a check: at 1 thread per job, seed 0 went 0.605 -> 0.589 over the 6 epochs while seeds 1 and
# 2 rose (0.651 -> 0.798, 0.506 -> 0.549); at 2 threads all three rose.
SEEDS = (0, 1, 2)


def _mean(cell):
    """The mean of a RESULTS.md cell: ``0.655 ± 0.031`` (several seeds) or ``0.252`` (one run)."""
    return float(cell.split(" ± ")[0])


@pytest.mark.skipif(not (LIBRARY / "events.csv").is_file(), reason=f"event library {LIBRARY} not found")
def test_soundscapes_small_configuration(tmp_path):
    """egs/soundscapes end to end on a small corpus (8 classes, 5-s clips; see its README) with
    three seeds: the model hears the clips (XE's mean evaluation CIDEr-D beats the corpus prior
    and its own deaf control by a clear margin) and SCST's training reward, averaged over the
    seeds, rises from the first epoch to the last."""
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__", "*.png")
    for sub in ["egs/TEMPLATE", "egs/soundscapes", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "soundscapes"
    opts = (f"--event_root {LIBRARY} --classes {SMALL_CLASSES} "
            "--num_clips development:300,validation:40,evaluation:60 --duration_s 5")
    r = _run(["./run.sh", "--seeds", " ".join(map(str, SEEDS)), "--rl_algo", "scst", "--ensemble_models", "",
              "--xe_config", "conf/tuning/train_xe_crnn_tiny.yaml", "--rl_config", "conf/tuning/train_scst_tiny.yaml",
              "--local_data_opts", opts], cwd=d, timeout=3600)
    assert r.returncode == 0, failure_report(r, d)
    rows = _results_rows((d / "RESULTS.md").read_text())
    xe = "xe_train_xe_crnn_tiny_logmel_word"  # the row of the seeds' mean
    cider = {k: _mean(v["CIDEr-D"]) for k, v in rows.items()}
    prior, listen, deaf = (cider[("corpus_prior", "evaluation")], cider[(xe, "evaluation")],
                           cider[(xe, "evaluation_deaf")])
    # clear margins. Measured at 1 thread per job (at 2 threads): XE 0.655 (0.704) vs prior 0.252 and
    # deaf 0.292 (0.318); SCST reward 0.587 -> 0.645 (0.589 -> 0.704)
    assert listen > 1.5 * prior and listen > prior + 0.15, (listen, prior)
    assert listen > deaf + 0.15, (listen, deaf)
    assert (f"{xe}/scst_train_scst_tiny", "evaluation") in rows
    hists = [json.loads(p.read_text()) for p in sorted((d / "exp").glob(f"{xe}_seed*/scst_*/history.json"))]
    assert len(hists) == len(SEEDS)
    rewards = [[h["train_reward"] for h in hist] for hist in hists]
    first, last = (sum(r[i] for r in rewards) / len(rewards) for i in (0, -1))
    assert last > first + 0.02, rewards
    assert "## Significance" in (d / "RESULTS.md").read_text()
