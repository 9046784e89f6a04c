"""Tests of captionbin.caption_results and captionlib.metrics.results on fabricated score files."""

import json

import pytest
import yaml

from captionbin.caption_results import get_parser, main
from captionlib.metrics.results import METRIC_KEYS, collect_scores, format_results

FULL = {
    "BLEU-1": 0.51234,
    "BLEU-2": 0.3,
    "BLEU-3": 0.2,
    "BLEU-4": 0.1,
    "METEOR": 0.15,
    "ROUGE-L": 0.35,
    "CIDEr-D": 0.4567,
    "SPICE": 0.1,
    "SPIDEr": 0.27835,
    "skipped": {},
}


def _write(exp, model, tag, dset, obj):
    d = exp / model / f"decode_{tag}" / dset
    d.mkdir(parents=True)
    (d / "score.json").write_text(json.dumps(obj))
    return d / "score.json"


@pytest.fixture
def exp(tmp_path):
    exp = tmp_path / "exp"
    no_spice = dict(FULL, SPICE=None, SPIDEr=None)
    no_spice["skipped"] = {"SPICE": "Stanford CoreNLP jars not found", "SPIDEr": "needs SPICE"}
    _write(exp, "xe_train_xe_logmel_word/scst_train_scst", "decode_model_valid.cider_d.best", "evaluation", FULL)
    _write(exp, "xe_train_xe_logmel_word", "decode_model_valid.cider_d.best", "validation", no_spice)
    _write(exp, "xe_train_xe_logmel_word", "decode_model_valid.cider_d.best", "evaluation", FULL)
    # Things that must be ignored: stats dir, a score.json not in a decode dir.
    (exp / "stats_logmel").mkdir()
    (exp / "stats_logmel" / "score.json").write_text("{}")
    return exp


def test_get_parser():
    assert get_parser().parse_args(["--exp_dir", "e", "--output", "o"]).exp_dir == "e"


def test_main_without_args_exits():
    with pytest.raises(SystemExit):
        main([])


def test_print_config(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--exp_dir", "exp", "--output", "R.md", "--print_config"])
    assert e.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["exp_dir"] == "exp"


def test_collect_sorted(exp):
    rows = collect_scores(exp)
    assert [(r.model, r.test_set) for r in rows] == [
        ("xe_train_xe_logmel_word", "evaluation"),
        ("xe_train_xe_logmel_word", "validation"),
        ("xe_train_xe_logmel_word/scst_train_scst", "evaluation"),
    ]
    assert rows[0].decode_tag == "decode_model_valid.cider_d.best"
    assert rows[1].scores["SPICE"] is None


def test_results_md(exp, tmp_path):
    out = tmp_path / "RESULTS.md"
    main(["--exp_dir", str(exp), "--output", str(out)])
    text = out.read_text()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    assert header.split("|")[4:-1] == [f" {k} " for k in METRIC_KEYS]
    rows = [line for line in lines if line.startswith("| xe_")]
    assert len(rows) == 3
    assert "| 0.512 | 0.300 |" in rows[0] and "| 0.457 |" in rows[0]
    assert rows[0].split("|")[4:-1][METRIC_KEYS.index("SPIDEr")].strip() == "0.278"
    assert rows[1].endswith("| skipped | skipped |")
    assert "- SPICE: Stanford CoreNLP jars not found (xe_train_xe_logmel_word" in text
    assert "- SPIDEr: needs SPICE" in text
    assert "not included" in text  # the header says the environment/date is left out
    # Deterministic: a second run writes the same bytes.
    main(["--exp_dir", str(exp), "--output", str(out)])
    assert out.read_text() == text


def test_null_without_reason(tmp_path):
    exp = tmp_path / "exp"
    _write(exp, "m", "t", "s", {k: None for k in METRIC_KEYS})
    text = format_results(collect_scores(exp))
    assert "- BLEU-1: no value and no reason given in score.json (all rows)" in text


def test_bad_score_file_names_file(tmp_path):
    exp = tmp_path / "exp"
    bad = _write(exp, "m", "t", "s", dict(FULL, METEOR="high"))
    with pytest.raises(ValueError, match=str(bad)):
        collect_scores(exp)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="score.json"):
        collect_scores(exp)


def test_empty_exp(tmp_path):
    (tmp_path / "exp").mkdir()
    out = tmp_path / "R.md"
    main(["--exp_dir", str(tmp_path / "exp"), "--output", str(out)])
    assert "No `score.json` found" in out.read_text()
