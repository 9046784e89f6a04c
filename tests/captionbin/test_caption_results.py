"""Tests of captionbin.caption_results and captionlib.report.results on fabricated score files."""

import json
import shutil

import numpy as np
import pytest
import yaml

from captionbin.caption_results import get_parser, main
from captionlib.report.results import (
    METRIC_KEYS,
    collect_comparisons,
    collect_scores,
    collect_significance,
    format_results,
    group_seeds,
    model_kind,
    model_paper,
    seed_group,
)

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


def _rl_config(model):
    """The config.yaml of an RL dir: its rl_algo (the name prefix caption.sh gives it) and the reward."""
    last = model.rsplit("/", 1)[-1]
    algo = next(a for a in ("reinforce_plus", "multitask", "mc_pg", "scst", "sle", "ac") if last.startswith(a))
    return f"rl_algo: {algo}\nreward: cider_d:1.0\n"


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
    (exp / "xe_train_xe_logmel_word/scst_train_scst/config.yaml").write_text("rl_algo: scst\nreward: cider_d:1.0\n")
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
    assert header.split("|")[4:-1] == [f" {k} " for k in METRIC_KEYS] + [" seeds ", " paper "]
    rows = [line for line in lines if line.startswith("| xe_")]
    assert len(rows) == 3
    assert "| 0.512 | 0.300 |" in rows[0] and "| 0.457 |" in rows[0]
    assert rows[0].split("|")[4:-1][METRIC_KEYS.index("SPIDEr")].strip() == "0.278"
    cells = rows[1].split("|")[4:-1]
    assert cells[METRIC_KEYS.index("SPICE")].strip() == cells[METRIC_KEYS.index("SPIDEr")].strip() == "skipped"
    assert cells[METRIC_KEYS.index("CIDEr-D")].strip() == "0.457"
    assert rows[1].endswith("| 1 | Xu et al. 2020 (seed 000), XE |")
    assert rows[2].endswith("| 1 | Rennie et al. 2017; Xu et al. 2020, reward CIDEr-D |")
    assert "## Significance" not in text  # no per_clip.json: no bootstrap
    assert "- SPICE: Stanford CoreNLP jars not found (xe_train_xe_logmel_word" in text
    assert "- SPIDEr: needs SPICE" in text
    assert "not included" in text  # the header says the date is left out
    # Deterministic: a second run writes the same bytes.
    main(["--exp_dir", str(exp), "--output", str(out)])
    assert out.read_text() == text


def test_null_without_reason(tmp_path):
    exp = tmp_path / "exp"
    _write(exp, "m", "t", "s", {k: None for k in METRIC_KEYS})
    text = format_results(collect_scores(exp))
    assert "- BLEU-1: no value and no reason given in score.json (all rows)" in text
    _write(exp, "m", "t2", "s", {"BLEU-1": 0.5})  # a score.json from before a column existed
    text = format_results(collect_scores(exp))
    assert "- Div-1 (beams): not in score.json (scored before this metric existed; re-run the scoring stage) " \
        "(m t2 s)" in text


def test_rows_scored_without_the_ptb_tokenizer_are_marked(tmp_path):
    """Without Java the scores come from the fallback tokenizer (CIDEr-D 0.759 against 0.903 in
    the hunt's example); score.json said so, RESULTS.md did not."""
    exp = tmp_path / "exp"
    _write(exp, "a", "t", "s", FULL)
    _write(exp, "b", "t", "s", dict(FULL, skipped={"PTB-tokenizer": "java not found: no-java"}))
    text = format_results(collect_scores(exp))
    assert "Scored differently (not comparable with rows scored otherwise):" in text
    assert "- PTB-tokenizer: java not found: no-java (b t s)" in text


def test_bad_score_file_names_file(tmp_path):
    exp = tmp_path / "exp"
    bad = _write(exp, "m", "t", "s", dict(FULL, METEOR="high"))
    with pytest.raises(ValueError, match=str(bad)):
        collect_scores(exp)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="score.json"):
        collect_scores(exp)
    bad.write_text(json.dumps(FULL).replace('"CIDEr-D": ', '"CIDEr-D": Infinity, "x": '))  # a traceback in stdev
    with pytest.raises(ValueError, match=f"{bad}: CIDEr-D must be a number .*not infinity.*, got inf"):
        collect_scores(exp)


def test_empty_exp(tmp_path):
    (tmp_path / "exp").mkdir()
    out = tmp_path / "R.md"
    main(["--exp_dir", str(tmp_path / "exp"), "--output", str(out)])
    assert "No `score.json` found" in out.read_text()


# ----------------------------------------------------------------------------- seeds
XE = "xe_train_xe_small_logmel_word"
TAG = "decode_model_valid.cider_d.best"
CLIPS = [f"clip{i:02d}" for i in range(40)]


def test_seed_group():
    assert seed_group(f"{XE}_seed0/scst_train_scst_small_seed0") == (f"{XE}/scst_train_scst_small", 0)
    assert seed_group("ensemble_seed2") == ("ensemble", 2)
    assert seed_group("xe_a_seed12_lr0.1/sle_b") == ("xe_a_lr0.1/sle_b", 12)
    assert seed_group("corpus_prior") == ("corpus_prior", None)
    assert seed_group("xe_a_seedling_seed") == ("xe_a_seedling_seed", None)  # not a seed token
    with pytest.raises(ValueError, match="xe_a_seed0/scst_b_seed1: .*different seeds"):
        seed_group("xe_a_seed0/scst_b_seed1")


def test_model_kind_and_paper():
    # an RL model's kind and paper come from its config.yaml (rl_algo), never from its dir name
    assert model_kind(f"{XE}_seed0") == "xe"
    assert model_kind(f"{XE}_seed0/anything_seed0", {"rl_algo": "reinforce_plus"}) == "reinforce_plus"
    assert model_kind(f"{XE}/scst_x") is None  # an RL-looking name without its config.yaml
    assert model_kind("ensemble_seed2") == "ensemble" and model_kind("corpus_prior") == "corpus_prior"
    assert model_kind("baseline_x") is None and model_paper("baseline_x") == ""
    # XE: the paper of the configured model (seed 000's CRNN + GRU without the keys)
    assert model_paper(XE) == model_paper(XE, {"encoder": "crnn", "decoder": "gru"}) == "Xu et al. 2020 (seed 000), XE"
    assert model_paper(XE, {"encoder": "linear", "decoder": "att_lstm"}).startswith("Anderson et al. 2018")
    assert model_paper(XE, {"encoder": "rnn", "decoder": "att_lstm"}).startswith("Anderson et al. 2018")
    assert model_paper(XE, {"encoder": "linear", "decoder": "lstm"}).startswith("Vinyals et al. 2015")
    assert model_paper(XE, {"encoder": "rnn", "decoder": "lstm"}).startswith("Venugopalan et al. 2015")
    assert model_paper(XE, {"encoder": "crnn", "decoder": "lstm"}) == "XE (crnn + lstm)"

    def rl(algo, **config):
        return dict({"rl_algo": algo, "reward": "cider_d:1.0"}, **config)

    assert model_paper(f"{XE}/x", rl("sle")) == "Chen & Jin 2020 (SLE), reward CIDEr-D"
    assert model_paper(f"{XE}/x", rl("multitask")) == "Li & Gong 2019 (multitask), reward CIDEr-D"
    assert model_paper(f"{XE}/x", rl("mc_pg", reward="spider")) == "Liu et al. 2017 (MC-PG), reward SPIDEr"
    assert model_paper(f"{XE}/x", rl("scst", reward="cider_d_batch:1,bleu_4:0.5")) == (
        "Rennie et al. 2017; Xu et al. 2020, reward CIDEr-D with per-batch IDF + 0.5 BLEU-4")
    # never implicit: a reward missing from the config is said so
    assert model_paper(f"{XE}/x", {"rl_algo": "sle"}) == (
        "Chen & Jin 2020 (SLE), reward not recorded (no reward: in config.yaml)")
    assert model_paper(f"{XE}/x", rl("scst", reward="x:1")) == "Rennie et al. 2017; Xu et al. 2020, reward x:1"
    assert model_paper(f"{XE}/x", rl("toy_unregistered")) == "rl_algo toy_unregistered"
    # actor-critic: the metric reward (A2C with Shi et al.'s value network) or seed 002's embedding reward
    a2c = "A2C, CIDEr-D reward (Shi et al. value network)"
    assert model_paper(f"{XE}/x", rl("ac")) == a2c
    assert model_paper(f"{XE}/x", rl("ac", rl_conf={"reward_type": "metric"})) == a2c
    emb = "Shi et al. (actor-critic, embedding reward)"
    assert model_paper(f"{XE}/x", rl("ac", rl_conf={"reward_type": "embedding"})) == emb
    assert model_paper(f"{XE}/x", rl("ac", ac_reward="embedding")) == emb  # a config.yaml of before rl_conf
    assert model_paper(f"{XE}_seed0", {"reward": "cider_d:1.0"}) == "Xu et al. 2020 (seed 000), XE"
    # SLL-ME (seed 001): SCST with the maximum-entropy term; a zero weight is plain SCST
    me = "Rennie et al. 2017; Xu et al. 2020 + max-entropy 0.01 (SLL-ME, Chen & Jin 2020), reward CIDEr-D"
    assert model_paper(f"{XE}/x", rl("scst", rl_conf={"entropy_weight": 0.01})) == me
    assert model_paper(f"{XE}/x", rl("scst", entropy_weight=0.01)) == me  # before rl_conf
    assert model_paper(f"{XE}/x", rl("scst", rl_conf={"entropy_weight": 0.0})) == model_paper(f"{XE}/x", rl("scst"))


def test_paper_reads_config_yaml(tmp_path):
    exp = tmp_path / "exp"
    _write(exp, "xe_a/ac_b", "t", "s", FULL)
    (exp / "xe_a/ac_b/config.yaml").write_text("rl_algo: ac\nreward: cider_d:1.0\nrl_conf: {reward_type: embedding}\n")
    assert _table(format_results(collect_scores(exp)))[("xe_a/ac_b", "s")]["paper"] == (
        "Shi et al. (actor-critic, embedding reward)")
    (exp / "xe_a/ac_b/config.yaml").write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="config.yaml: expected a YAML mapping"):
        collect_scores(exp)


def _run_tree(exp, seeds=(0, 1, 2), per_clip=True):
    """XE + SCST + SLE per seed, an ensemble per seed, a corpus prior; 2 test sets.

    Per-clip CIDEr-D: SCST clearly better than XE in every seed; SLE equal to XE in seed 0
    and slightly worse in the others.
    """
    rng = np.random.default_rng(0)
    for seed in seeds:
        xe = rng.gamma(2.0, 0.2, size=len(CLIPS))
        models = {
            f"{XE}_seed{seed}": xe,
            f"{XE}_seed{seed}/scst_train_scst_small_seed{seed}": xe + 0.15 + rng.normal(0, 0.05, size=len(CLIPS)),
            f"{XE}_seed{seed}/sle_train_sle_small_seed{seed}": xe - 0.01 * seed,
            f"ensemble_seed{seed}": xe + 0.05,
        }
        for model, cider in models.items():
            for dset in ("evaluation", "evaluation_deaf"):
                score = dict(FULL, **{"CIDEr-D": float(np.mean(cider)), "BLEU-1": 0.5 + 0.01 * seed})
                path = _write(exp, model, TAG, dset, score)
                if "/" in model:
                    (exp / model / "config.yaml").write_text(_rl_config(model))
                if per_clip:
                    obj = {"CIDEr-D": dict(zip(CLIPS, cider.tolist())), "ROUGE-L": {c: 0.3 for c in CLIPS}}
                    path.with_name("per_clip.json").write_text(json.dumps(obj))
    _write(exp, "corpus_prior", "most_frequent_train_caption", "evaluation", dict(FULL, SPICE=None))


def _table(text):
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    cols = [c.strip() for c in header.split("|")[1:-1]]
    rows = [dict(zip(cols, [c.strip() for c in line.split("|")[1:-1]]))
            for line in lines if line.startswith("| ") and not line.startswith("| model")]
    return {(r["model"], r["set"]): r for r in rows}


def test_seed_rows_are_merged(tmp_path):
    exp = tmp_path / "exp"
    _run_tree(exp)
    rows = collect_scores(exp)
    assert len(rows) == 4 * 3 * 2 + 1
    table = _table(format_results(rows))
    assert len(table) == 4 * 2 + 1
    xe = table[(XE, "evaluation")]
    assert xe["seeds"] == "3" and xe["paper"] == "Xu et al. 2020 (seed 000), XE"
    assert xe["BLEU-1"] == "0.510 ± 0.010"  # 0.50, 0.51, 0.52: sample std 0.01
    assert xe["ROUGE-L"] == "0.350 ± 0.000"
    score_files = [exp / f"{XE}_seed{s}" / f"decode_{TAG}" / "evaluation" / "score.json" for s in range(3)]
    ciders = [json.loads(f.read_text())["CIDEr-D"] for f in score_files]
    assert xe["CIDEr-D"] == f"{np.mean(ciders):.3f} ± {np.std(ciders, ddof=1):.3f}"
    assert xe["Vocab"] == "skipped"  # Vocab absent from these score files
    scst = table[(f"{XE}/scst_train_scst_small", "evaluation_deaf")]
    assert scst["seeds"] == "3" and scst["paper"] == "Rennie et al. 2017; Xu et al. 2020, reward CIDEr-D"
    assert table[("ensemble", "evaluation")]["paper"] == "Xu et al. 2020 (word-level ensemble)"
    prior = table[("corpus_prior", "evaluation")]
    assert prior["seeds"] == "1" and prior["SPICE"] == "skipped" and prior["paper"] == "most frequent training caption"
    assert prior["CIDEr-D"] == "0.457"


def test_two_runs_of_one_seed_are_refused(tmp_path):
    """xe_a_seed1 and xe_a_seed01 both parse as seed 1: merged, the row said 'seeds 2'."""
    exp = tmp_path / "exp"
    _run_tree(exp, seeds=(1,))
    shutil.copytree(exp / f"{XE}_seed1", exp / f"{XE}_seed01")
    with pytest.raises(ValueError, match=f"{XE}_seed01 and {XE}_seed1 are two runs of seed 1"):
        format_results(collect_scores(exp))


def test_single_seed_rows_keep_their_names(tmp_path):
    exp = tmp_path / "exp"
    _run_tree(exp, seeds=(0,))
    table = _table(format_results(collect_scores(exp)))
    assert (f"{XE}_seed0", "evaluation") in table and ("ensemble_seed0", "evaluation") in table
    row = table[(f"{XE}_seed0/scst_train_scst_small_seed0", "evaluation")]
    assert row["BLEU-1"] == "0.500" and row["seeds"] == "1" and "±" not in row["CIDEr-D"]


def test_a_run_without_seed_beside_its_seed_group_is_named_apart(tmp_path):
    """xe_a (a run without --seeds) and xe_a_seed0 + xe_a_seed1: both rows were named xe_a."""
    exp = tmp_path / "exp"
    _write(exp, "xe_a", "t", "s", FULL)
    for seed in (0, 1):
        _write(exp, f"xe_a_seed{seed}", "t", "s", dict(FULL, **{"BLEU-1": 0.1}))
    _write(exp, "xe_b", "t", "s", FULL)
    _write(exp, "xe_b_seed0", "t", "s", FULL)  # a single seeded run keeps its dir name
    text = format_results(collect_scores(exp))
    names = [line.split(" | ")[0][2:] for line in text.splitlines() if line.startswith("| xe_")]
    assert names == ["xe_a", "xe_a (no seed)", "xe_b", "xe_b_seed0"]
    table = _table(text)
    assert table[("xe_a", "s")]["seeds"] == "2" and table[("xe_a", "s")]["BLEU-1"] == "0.100 ± 0.000"
    assert table[("xe_a (no seed)", "s")]["BLEU-1"] == "0.512"


def test_significance_names_a_run_without_seed_apart_too(tmp_path):
    exp = tmp_path / "exp"
    _run_tree(exp, seeds=(0, 1))
    shutil.copytree(exp / f"{XE}_seed0", exp / XE)  # the same models, trained once without --seeds
    for d in (exp / XE).glob("*_seed0"):
        d.rename(d.with_name(d.name[:-len("_seed0")]))
    text = format_results(collect_scores(exp), significance=collect_significance(collect_scores(exp)))
    lines = [line for line in text.splitlines() if line.startswith(f"- `{XE}/scst_train_scst_small")]
    assert len(lines) == 4  # 2 test sets x (seeded, unseeded)
    assert sum(line.startswith(f"- `{XE}/scst_train_scst_small (no seed)` vs `{XE} (no seed)`, {TAG}")
               for line in lines) == 2, lines
    assert sum(line.startswith(f"- `{XE}/scst_train_scst_small` vs `{XE}`, {TAG}") for line in lines) == 2, lines
    # --compare takes the names the table shows: "(no seed)" picks the run without a seed token
    rows = collect_scores(exp)
    chosen = collect_comparisons(rows, [(f"{XE}/scst_train_scst_small (no seed)",
                                         f"{XE}/sle_train_sle_small (no seed)"),
                                        (f"{XE}/scst_train_scst_small", f"{XE}/sle_train_sle_small")])
    assert [(c.model.split("/")[1], c.baseline.split("/")[1], c.seeds)
            for c in chosen if c.test_set == "evaluation"] == [
        ("sle_train_sle_small (no seed)", "scst_train_scst_small (no seed)", [None]),
        ("sle_train_sle_small", "scst_train_scst_small", [0, 1])]


def test_skipped_in_one_seed_is_skipped(tmp_path):
    exp = tmp_path / "exp"
    _write(exp, "xe_a_seed0", "t", "s", FULL)
    _write(exp, "xe_a_seed1", "t", "s", dict(FULL, METEOR=None, skipped={"METEOR": "no Java"}))
    _write(exp, "xe_a_seed2", "t", "s", dict(FULL, METEOR=float("nan")))
    rows = collect_scores(exp)
    (t,) = group_seeds(rows)
    assert t.model == "xe_a" and [r.model for r in t.runs] == ["xe_a_seed0", "xe_a_seed1", "xe_a_seed2"]
    text = format_results(rows)
    assert _table(text)[("xe_a", "s")]["METEOR"] == "skipped"
    assert "- METEOR: no Java (xe_a_seed1 t s)" in text
    (exp / "xe_a_seed1" / "decode_t" / "s" / "score.json").write_text(json.dumps(FULL))
    assert _table(format_results(collect_scores(exp)))[("xe_a", "s")]["METEOR"] == "nan"


def test_significance_section(tmp_path):
    exp = tmp_path / "exp"
    _run_tree(exp)
    out = tmp_path / "RESULTS.md"
    main(["--exp_dir", str(exp), "--output", str(out)])
    text = out.read_text()
    sig = text[text.index("## Significance"):].splitlines()
    lines = [line for line in sig if line.startswith("- ")]
    assert len(lines) == 2 * 2  # (scst, sle) x 2 test sets; no line for ensembles or the prior
    start = f"- `{XE}/scst_train_scst_small` vs `{XE}`, {TAG}, evaluation:"
    scst = next(line for line in lines if line.startswith(start))
    for s in range(3):
        assert f"seed {s}: ΔCIDEr-D +0.1" in scst
    assert "p=0.0001" in scst and scst.endswith("better in 3/3 seeds at p < 0.05")
    sle = next(line for line in lines if "/sle_train_sle_small` vs" in line and "evaluation_deaf" in line)
    assert "seed 0: ΔCIDEr-D +0.000, p=1.0000" in sle and "seed 2: ΔCIDEr-D -0.020, p=1.0000" in sle
    assert sle.endswith("better in 0/3 seeds at p < 0.05")
    main(["--exp_dir", str(exp), "--output", str(out)])
    assert out.read_text() == text  # deterministic bytes
    # one seed without per-clip scores: the line says which, instead of 2/2 seeds as if there were two
    missing = exp / f"{XE}_seed1" / "scst_train_scst_small_seed1" / f"decode_{TAG}" / "evaluation" / "per_clip.json"
    missing.unlink()
    main(["--exp_dir", str(exp), "--output", str(out)])
    scst = next(line for line in out.read_text().splitlines() if line.startswith(start))
    assert "seed 1: ΔCIDEr-D" not in scst and scst.endswith(
        f"better in 2/2 seeds at p < 0.05; left out: seed 1: {missing} has no CIDEr-D (no such file)"), scst


def test_significance_needs_per_clip_of_both(tmp_path, capsys):
    exp = tmp_path / "exp"
    _run_tree(exp, per_clip=False)
    assert "## Significance" not in format_results(collect_scores(exp))
    # only the RL model has per-clip scores: nothing to compare with
    rl_dir = exp / f"{XE}_seed0" / "scst_train_scst_small_seed0" / f"decode_{TAG}" / "evaluation"
    (rl_dir / "per_clip.json").write_text(json.dumps({"CIDEr-D": {c: 1.0 for c in CLIPS}}))
    out = tmp_path / "R.md"
    main(["--exp_dir", str(exp), "--output", str(out)])
    assert "## Significance" not in out.read_text()
    # XE per-clip file of other clips: an error naming both files
    xe_file = exp / f"{XE}_seed0" / f"decode_{TAG}" / "evaluation" / "per_clip.json"
    xe_file.write_text(json.dumps({"CIDEr-D": {"other": 1.0}}))
    with pytest.raises(SystemExit) as e:
        main(["--exp_dir", str(exp), "--output", str(out)])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert str(xe_file) in err and str(rl_dir / "per_clip.json") in err
    # a NaN score ("scores must be finite", no file named) and a file that is no JSON object
    # (its seed was left out of the significance line silently) are errors naming the file
    for content, expected in ((json.dumps({"CIDEr-D": {c: float("nan") for c in CLIPS}}), "must be a finite number"),
                              ("[1, 2]", "expected a JSON object of per-clip scores, got list")):
        xe_file.write_text(content)
        with pytest.raises(SystemExit) as e:
            main(["--exp_dir", str(exp), "--output", str(out)])
        err = capsys.readouterr().err
        assert e.value.code == 1 and f"{xe_file}: " in err and expected in err, err


def test_significance_pairs_staged_rl_and_xe_decoded_with_another_model_file(tmp_path):
    """Seed 000's XE models are decoded with valid.bleu_4.best.pth and their RL models with
    valid.cider_d.best.pth (same decode config); seed 004's multitask nests under REINFORCE+.
    Both are compared with the XE model at the root of their dirs."""
    from captionlib.report.results import collect_significance, decode_config_of

    assert decode_config_of("decode_greedy_model_valid.bleu_4.best") == "decode_greedy"
    exp = tmp_path / "exp"
    rng = np.random.default_rng(1)
    xe = rng.gamma(2.0, 0.2, size=len(CLIPS))
    models = {
        ("xe_w", "decode_greedy_model_valid.bleu_4.best"): xe,
        ("xe_w/scst_p", "decode_greedy_model_valid.cider_d.best"): xe + 0.2,
        ("xe_w/reinforce_plus_f", "decode_greedy_model_valid.cider_d.best"): xe + 0.1,
        ("xe_w/reinforce_plus_f/multitask_m", "decode_greedy_model_valid.cider_d.best"): xe + 0.3,
        ("xe_w/sle_s", "decode_beam3_model_valid.cider_d.best"): xe + 0.3,  # no XE decode of that config
    }
    for (model, tag), cider in models.items():
        path = _write(exp, model, tag, "evaluation", dict(FULL, **{"CIDEr-D": float(np.mean(cider))}))
        path.with_name("per_clip.json").write_text(json.dumps({"CIDEr-D": dict(zip(CLIPS, cider.tolist()))}))
        if "/" in model:
            (exp / model / "config.yaml").write_text(_rl_config(model))
    sigs = {s.model: s for s in collect_significance(collect_scores(exp), num_resamples=200)}
    assert set(sigs) == {"xe_w/scst_p", "xe_w/reinforce_plus_f", "xe_w/reinforce_plus_f/multitask_m"}
    assert all(s.baseline == "xe_w" for s in sigs.values())
    assert abs(sigs["xe_w/reinforce_plus_f/multitask_m"].results[0].delta - 0.3) < 1e-9


def test_chosen_comparisons_pair_the_seeds(tmp_path, capsys):
    exp = tmp_path / "exp"
    _run_tree(exp)
    out = tmp_path / "RESULTS.md"
    main(["--exp_dir", str(exp), "--output", str(out), "--compare", f"{XE}=ensemble",
          "--compare", f"{XE}/scst_train_scst_small={XE}/sle_train_sle_small", "--compare", "nothing=ensemble"])
    text = out.read_text()
    chosen = text[text.index("Chosen comparisons"):].splitlines()
    lines = [line for line in chosen if line.startswith("- ")]
    assert len(lines) == 2 * 2  # 2 matched pairs x 2 test sets; the unmatched pair is left out
    ens = next(line for line in lines if line.startswith(f"- `ensemble` vs `{XE}`, {TAG}, evaluation:"))
    assert all(f"seed {s}: ΔCIDEr-D +0.050, p=0.0001" in ens for s in range(3)), ens
    sle = next(line for line in lines
               if line.startswith(f"- `{XE}/sle_train_sle_small` vs `{XE}/scst_train_scst_small`"))
    assert sle.endswith("better in 0/3 seeds at p < 0.05")
    assert "nothing=ensemble: no run of the two" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--exp_dir", str(exp), "--output", str(out), "--compare", "a-b"])


def test_environments_that_trained_the_models_are_listed(tmp_path):
    exp = tmp_path / "exp"
    env = {"captionlib": "0.1.0", "git_revision": "c1c2108" + "0" * 33, "git_modified": False,
           "python": "3.12.3", "torch": "2.13.0+cpu", "cuda": None, "device": "cpu", "threads": 2}
    for model in ("xe_a_seed0", "xe_a_seed1", "ensemble_a"):
        _write(exp, model, "decode_x", "evaluation", FULL)
    for model in ("xe_a_seed0", "xe_a_seed1"):
        (exp / model / "config.yaml").write_text("encoder: crnn\n")
        (exp / model / "env.yaml").write_text(yaml.safe_dump(env))
    one = "- captionlib 0.1.0 (git c1c2108), torch 2.13.0+cpu, Python 3.12.3, cpu, 2 threads: all 2 trained models"
    assert one in format_results(collect_scores(exp)).splitlines()  # the ensemble was not trained

    (exp / "xe_a_seed1" / "env.yaml.1").write_text(yaml.safe_dump(dict(env, git_modified=True)))
    (exp / "xe_a_seed1" / "env.yaml").write_text(yaml.safe_dump(dict(env, cuda="12.4", device="NVIDIA H100")))
    _write(exp, "xe_b", "decode_x", "evaluation", FULL)
    (exp / "xe_b" / "config.yaml").write_text("encoder: crnn\n")
    lines = format_results(collect_scores(exp)).splitlines()
    listed = lines[lines.index(next(x for x in lines if x.startswith("Trained with"))) + 2:]
    assert listed[:3] == [
        "- captionlib 0.1.0 (git c1c2108), torch 2.13.0+cpu, Python 3.12.3, cpu, 2 threads: `xe_a_seed0`",
        "- captionlib 0.1.0 (git c1c2108, modified), torch 2.13.0+cpu, Python 3.12.3, cpu, 2 threads, then "
        "captionlib 0.1.0 (git c1c2108), torch 2.13.0+cpu (CUDA 12.4), Python 3.12.3, NVIDIA H100, "
        "2 threads: `xe_a_seed1`",
        "- not recorded (no env.yaml): `xe_b`",
    ]

    (exp / "xe_b" / "env.yaml").write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"xe_b/env\.yaml: expected a YAML mapping"):
        collect_scores(exp)


def test_a_bootstrap_on_fewer_than_30_clips_is_printed_with_a_warning():
    from captionlib.metrics.significance import BootstrapResult
    from captionlib.report.results import MIN_BOOTSTRAP_CLIPS, SignificanceRow, format_significance

    def row(n):
        res = BootstrapResult(delta=0.1, p_value=0.5, num_resamples=100, num_items=n, ci_low=0.0, ci_high=0.2)
        return SignificanceRow("xe/scst", "xe", "decode", "evaluation", [0], [res])

    few, enough = (format_significance([row(n)])[-1] for n in (2, MIN_BOOTSTRAP_CLIPS))
    assert few.endswith("warning: only 2 clips (fewer than 30), too few for the p-values to mean much"), few
    assert "warning" not in enough


def test_fluency_columns_appear_where_some_row_has_them(tmp_path):
    exp = tmp_path / "exp"
    _write(exp, "xe_a", "t", "s", FULL)
    assert "FER (rules)" not in format_results(collect_scores(exp))
    _write(exp, "xe_a/scst_b", "t", "s", dict(FULL, **{"FER (rules)": 0.25, "FER (detector)": None,
                                                       "CIDEr-D-FL": 0.4, "SPIDEr-FL": None},
                                              skipped={"FER (detector)": "no fluency detector"}))
    text = format_results(collect_scores(exp))
    table = _table(text)
    rl = table[("xe_a/scst_b", "s")]
    assert rl["FER (rules)"] == "0.250" and rl["CIDEr-D-FL"] == "0.400"
    assert table[("xe_a", "s")]["FER (rules)"] == "skipped"
    assert "FER (detector)" not in rl and "SPIDEr-FL" not in rl  # no row has them
    assert "`FER (rules)` / `FER (detector)`" in text
    assert "- FER (rules): not scored with --metrics ...,fluency (xe_a t s)" in text


def test_the_fluency_error_rate_gets_its_own_bootstrap(tmp_path):
    """RL flagged on 20 of 40 clips, XE on 2: the FER section says the RL rate is higher; the
    penalised model (a chosen comparison) flags 2 clips, so it is not higher than XE's."""
    exp = tmp_path / "exp"
    flags = {"xe_a": [1.0] * 2 + [0.0] * 38, "xe_a/scst_b": [1.0] * 20 + [0.0] * 20,
             "xe_a/scst_b_fl": [0.0] * 38 + [1.0] * 2}
    for model, f in flags.items():
        score = _write(exp, model, "t", "evaluation", dict(FULL, **{"FER (rules)": float(np.mean(f))}))
        per_clip = {"CIDEr-D": {c: 0.5 for c in CLIPS}, "FER (rules)": dict(zip(CLIPS, f))}
        score.with_name("per_clip.json").write_text(json.dumps(per_clip))
        if "/" in model:
            (exp / model / "config.yaml").write_text(_rl_config(model))
    out = tmp_path / "RESULTS.md"
    main(["--exp_dir", str(exp), "--output", str(out), "--compare", "xe_a/scst_b=xe_a/scst_b_fl"])
    text = out.read_text()
    section = text[text.index("## Significance of FER (rules)"):]
    rl = next(x for x in section.splitlines() if x.startswith("- `xe_a/scst_b` vs `xe_a`"))
    assert "ΔFER (rules) +0.450" in rl and rl.endswith("higher in 1/1 seeds at p < 0.05"), rl
    fl = next(x for x in section.splitlines() if x.startswith("- `xe_a/scst_b_fl` vs `xe_a`"))
    assert "ΔFER (rules) +0.000" in fl and fl.endswith("higher in 0/1 seeds at p < 0.05"), fl
    chosen = next(x for x in section.splitlines() if x.startswith("- `xe_a/scst_b_fl` vs `xe_a/scst_b`"))
    assert "ΔFER (rules) -0.450" in chosen and "p=1.0000" in chosen, chosen
    assert "## Significance of FER (detector)" not in text  # no row has the detector's rate


def test_compare_two_decodings_with_a_decode_dir_on_either_side(tmp_path):
    """<model>@<decode dir>: re-ranked XE against greedy XE (one model, two decodings), and
    re-ranked XE against SCST's greedy decoding (two models, two decodings)."""
    exp = tmp_path / "exp"
    _run_tree(exp, seeds=(0, 1))
    rng = np.random.default_rng(1)
    for seed in (0, 1):  # the XE models decoded again, better by 0.2 per clip
        base = json.loads((exp / f"{XE}_seed{seed}" / f"decode_{TAG}" / "evaluation" / "per_clip.json").read_text())
        cider = np.array([base["CIDEr-D"][c] for c in CLIPS]) + 0.2 + rng.normal(0, 0.01, size=len(CLIPS))
        path = _write(exp, f"{XE}_seed{seed}", "rerank", "evaluation", dict(FULL, **{"CIDEr-D": float(cider.mean())}))
        path.with_name("per_clip.json").write_text(json.dumps({"CIDEr-D": dict(zip(CLIPS, cider.tolist()))}))
    rows = collect_scores(exp)
    chosen = collect_comparisons(rows, [(f"{XE}@{TAG}", f"{XE}@rerank"),
                                        (f"{XE}/scst_train_scst_small@{TAG}", f"{XE}@rerank")])
    assert [(c.baseline, c.model, c.decode_tag, c.test_set, c.seeds) for c in chosen] == [
        (f"{XE}@{TAG}", f"{XE}@rerank", "rerank", "evaluation", [0, 1]),
        (f"{XE}/scst_train_scst_small@{TAG}", f"{XE}@rerank", "rerank", "evaluation", [0, 1])]
    (vs_greedy, vs_scst) = chosen
    assert all(r.delta == pytest.approx(0.2, abs=0.02) and r.p_value < 0.05 for r in vs_greedy.results)
    assert all(r.delta == pytest.approx(0.05, abs=0.05) for r in vs_scst.results)  # SCST: +0.15
