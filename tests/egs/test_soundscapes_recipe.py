"""egs/soundscapes end to end on a small corpus mixed from the event library (its own module,
so that pytest-xdist runs it beside the mini_clotho run of test_recipes.py)."""

import json
import shutil

import pytest

from test_recipes import GENERATED, ROOT, _results_rows, _run

pytestmark = pytest.mark.long(1.5)  # minutes on 2 CPU cores: scheduled first (tests/conftest.py)

LIBRARY = ROOT.parent / "shared" / "data" / "event_library"
SMALL_CLASSES = "dog,cow,bee,thunder,telephone,violin,rooster,drum"
# torch's threads per job, as when the margins below were chosen (on 2 CPU cores): the thread
# count changes the order of float sums and so the run's numbers; pinned, they stay closer to the
# run they were chosen on (tests/conftest.py sets 1 thread for the other recipe tests).
# At 1 thread, seed 0's SCST training reward went 0.61, 0.63, 0.54, 0.63, 0.60, 0.59 (no rise).
THREADS = 2


@pytest.mark.skipif(not (LIBRARY / "events.csv").is_file(), reason=f"event library {LIBRARY} not found")
def test_soundscapes_small_configuration(tmp_path):
    """egs/soundscapes end to end on a small corpus (8 classes, 5-s clips; see its README):
    the model hears the clips (XE beats the corpus prior and its own deaf control by a clear
    margin on evaluation CIDEr-D) and SCST's mean training reward rises."""
    ignore = shutil.ignore_patterns(*GENERATED, "RESULTS.md", "__pycache__", "*.png")
    for sub in ["egs/TEMPLATE", "egs/soundscapes", "utils"]:
        shutil.copytree(ROOT / sub, tmp_path / sub, symlinks=True, ignore=ignore)
    d = tmp_path / "egs" / "soundscapes"
    opts = (f"--event_root {LIBRARY} --classes {SMALL_CLASSES} "
            "--num_clips development:300,validation:40,evaluation:60 --duration_s 5")
    r = _run(["./run.sh", "--seeds", "0", "--rl_algo", "scst", "--ensemble_models", "",
              "--xe_config", "conf/tuning/train_xe_crnn_tiny.yaml", "--rl_config", "conf/tuning/train_scst_tiny.yaml",
              "--local_data_opts", opts], cwd=d, timeout=1800, env={"OMP_NUM_THREADS": str(THREADS)})
    assert r.returncode == 0, (r.stdout + r.stderr)[-8000:]
    rows = _results_rows((d / "RESULTS.md").read_text())
    xe = "xe_train_xe_crnn_tiny_logmel_word_seed0"
    cider = {k: float(v["CIDEr-D"]) for k, v in rows.items()}
    prior, listen, deaf = cider[("corpus_prior", "evaluation")], cider[(xe, "evaluation")], cider[(xe, "evaluation_deaf")]
    # clear margins: seen 0.83 vs prior 0.25 and deaf 0.33, SCST reward 0.55 -> 0.66, when the configs were chosen
    assert listen > 1.5 * prior and listen > prior + 0.15, (listen, prior)
    assert listen > deaf + 0.15, (listen, deaf)
    assert (f"{xe}/scst_train_scst_tiny_seed0", "evaluation") in rows
    hist = json.loads(next((d / "exp").glob(f"{xe}/scst_*/history.json")).read_text())
    rewards = [h["train_reward"] for h in hist]
    assert rewards[-1] > rewards[0], rewards
    assert "## Significance" in (d / "RESULTS.md").read_text()
