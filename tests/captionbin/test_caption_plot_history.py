"""caption_plot_history on fabricated history.json files (2 groups x 3 seeds)."""

import json

import pytest
import yaml

from captionbin.caption_plot_history import get_parser, main
from captionlib.report.plot import group_exp_dirs, plot_history

XE = "xe_train_xe_small_logmel_word"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _history(d, key, seed, epochs=8):
    d.mkdir(parents=True)
    hist = []
    for e in range(1, epochs + 1):
        value = 4.0 / e + 0.1 * seed if key == "train_loss" else 0.3 + 0.05 * e - 0.02 * seed
        hist.append({"epoch": e, "steps": 25, key: value, "valid_cider_d": 0.1 + 0.02 * e + 0.01 * seed})
    (d / "history.json").write_text(json.dumps(hist, indent=1))
    if key == "train_reward":  # an RL dir: its config.yaml names its objective
        (d / "config.yaml").write_text("rl_algo: scst\nreward: cider_d:1.0\n")
    return d


@pytest.fixture
def exp(tmp_path):
    exp = tmp_path / "exp"
    dirs = []
    for seed in range(3):
        xe = _history(exp / f"{XE}_seed{seed}", "train_loss", seed)
        dirs += [xe, _history(xe / f"scst_train_scst_small_seed{seed}", "train_reward", seed)]
    return exp, dirs


def test_parser_and_required(capsys):
    assert get_parser().parse_args(["--exp_dir", "a", "--exp_dir", "b"]).exp_dir == ["a", "b"]
    with pytest.raises(SystemExit) as e:
        main(["--output", "o.png"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--exp_dir", "a", "--output", "o.png", "--print_config"])
    assert e.value.code == 0 and yaml.safe_load(capsys.readouterr().out)["exp_dir"] == ["a"]


def test_groups_by_seed(exp):
    _, dirs = exp
    groups = group_exp_dirs(dirs)
    assert list(groups) == ["xe", "scst"]
    assert [d.name for d in groups["scst"]] == [f"scst_train_scst_small_seed{s}" for s in range(3)]
    # two XE groups: labelled by their names, not both "xe"
    other = dirs[0].parent / "xe_big_seed0"
    _history(other, "train_loss", 0)
    assert sorted(group_exp_dirs(dirs[:1] + [other])) == sorted([XE, "xe_big"])


def test_png_written(exp, tmp_path):
    _, dirs = exp
    out = tmp_path / "plots" / "curves.png"
    args = [a for d in dirs for a in ("--exp_dir", str(d))]
    main(args + ["--output", str(out), "--title", "soundscapes: 3 seeds"])
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 20000
    # XE only: a single objective panel
    out2 = tmp_path / "xe.png"
    assert list(plot_history(dirs[::2], out2)) == ["xe"]
    assert out2.read_bytes()[:8] == PNG_SIGNATURE


def test_missing_history_names_dir(exp, tmp_path, capsys):
    _, dirs = exp
    bare = dirs[0].parent / "ensemble_seed0"
    bare.mkdir()
    out = tmp_path / "c.png"
    with pytest.raises(SystemExit) as e:
        main(["--exp_dir", str(dirs[0]), "--exp_dir", str(bare), "--output", str(out)])
    assert e.value.code == 1
    assert str(bare / "history.json") in capsys.readouterr().err
    assert not out.exists()


def test_missing_objective_names_file(exp, tmp_path):
    _, dirs = exp
    rl = dirs[1]
    hist = json.loads((rl / "history.json").read_text())
    (rl / "history.json").write_text(json.dumps([{k: v for k, v in h.items() if k != "train_reward"} for h in hist]))
    with pytest.raises(ValueError, match=f"{rl / 'history.json'}: no epoch has 'train_reward'"):
        plot_history(dirs, tmp_path / "c.png")
