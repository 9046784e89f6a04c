"""Diversity next to precision: Div-1, Div-2, mBLEU-4 (seed 001) and Vocab in score.json / RESULTS.md."""

import json

import pytest

from captionbin.caption_results import main as results_main
from captionbin.caption_score import main as score_main
from captionlib.metrics.diversity import diversity_metrics
from captionlib.metrics.results import METRIC_KEYS
from captionlib.metrics.scorer import (
    SCORE_KEYS,
    compute_caption_scores,
    format_result,
    read_samples,
    sample_id,
)

REFS = {
    "c1": ["a dog barks in the yard", "a dog is barking loudly"],
    "c2": ["rain falls on a roof", "heavy rain on a metal roof"],
}
HYPS = {"c1": "a dog barks", "c2": "rain falls on a roof"}
SAMPLES = {
    "c1": ["a dog barks", "a dog barks loudly", "the cat meows", "a dog barks", "dogs bark in a yard"],
    "c2": ["rain falls", "rain falls on a roof", "water drips", "heavy rain", "rain falls"],
}
FAST = "bleu,rouge_l,cider_d"  # no METEOR/SPICE: keeps the test Java-free except PTB tokenizing


def test_diversity_keys_with_samples():
    out = compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_samples=SAMPLES, java="no-such-java")
    assert list(out) == list(SCORE_KEYS) + ["skipped"]
    expected = diversity_metrics({c: [s.split() for s in ss] for c, ss in SAMPLES.items()})
    for k in ["Div-1", "Div-2", "mBLEU-4"]:
        assert out[k] == pytest.approx(expected[k]) and k not in out["skipped"]
    # by hand for c1: 18 words, unigrams {a dog barks loudly the cat meows dogs bark in yard} = 11
    c1_div1 = 11 / 18
    c2_div1 = len({"rain", "falls", "on", "a", "roof", "water", "drips", "heavy"}) / 13
    assert out["Div-1"] == pytest.approx((c1_div1 + c2_div1) / 2)
    assert out["Vocab"] == len({"a", "dog", "barks", "rain", "falls", "on", "roof"})
    assert 0.0 <= out["mBLEU-4"] <= 1.0 and out["mBLEU-4"] > 0  # "a dog barks" repeated
    assert "Div-1" in format_result(out) and "Vocab    7" in format_result(out)


def test_diversity_null_with_reason_without_samples():
    out = compute_caption_scores(REFS, HYPS, metrics=FAST, java="no-such-java")
    for k in ["Div-1", "Div-2", "mBLEU-4"]:
        assert out[k] is None and "--num_diversity_samples" in out["skipped"][k]
    assert out["Vocab"] == 7  # always computed from the 1-best captions


def test_samples_must_cover_the_clips():
    with pytest.raises(ValueError, match="sampled captions must cover"):
        compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_samples={"c1": SAMPLES["c1"]}, java="no-such-java")
    one = {c: ss[:1] for c, ss in SAMPLES.items()}
    out = compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_samples=one, java="no-such-java")
    assert out["mBLEU-4"] is None and "at least 2" in out["skipped"]["mBLEU-4"]
    assert out["Div-1"] is not None


def test_read_samples(tmp_path):
    p = tmp_path / "text_samples"
    p.write_text("".join(f"{sample_id(c, k + 1)} {s}\n" for c, ss in SAMPLES.items() for k, s in enumerate(ss)))
    assert read_samples(p) == SAMPLES
    p.write_text("c1#1 a\nc1#1 b\n")
    with pytest.raises(ValueError, match="duplicate"):
        read_samples(p)
    p.write_text("c1 a dog\n")
    with pytest.raises(ValueError, match=r"text_samples:1"):
        read_samples(p)


def _data(tmp_path):
    d = tmp_path / "data" / "eval"
    d.mkdir(parents=True)
    (d / "text").write_text("".join(f"{c}_{i} {r}\n" for c, rs in REFS.items() for i, r in enumerate(rs)))
    (d / "utt2spk").write_text("".join(f"{c}_{i} {c}\n" for c, rs in REFS.items() for i in range(len(rs))))
    return d


def test_score_json_and_results_md(tmp_path):
    d = _data(tmp_path)
    exp = tmp_path / "exp"
    rows = {"xe_a": True, "ensemble_xe_a+xe_a-scst_b": True, "xe_a/scst_b": False}
    for model, with_samples in rows.items():
        dec = exp / model / "decode_greedy" / "eval"
        dec.mkdir(parents=True)
        (dec / "text").write_text("".join(f"{c} {h}\n" for c, h in HYPS.items()))
        args = ["--ref_dir", str(d), "--hyp", str(dec / "text"), "--output", str(dec / "score.json"),
                "--metrics", FAST]
        if with_samples:
            (dec / "text_samples").write_text(
                "".join(f"{c}#{k + 1} {s}\n" for c, ss in SAMPLES.items() for k, s in enumerate(ss)))
            args += ["--hyp_samples", str(dec / "text_samples")]
        score_main(args)
        score = json.loads((dec / "score.json").read_text())
        for k in ["Div-1", "Div-2", "mBLEU-4", "Vocab"]:
            assert k in score
        assert (score["Div-1"] is not None) == with_samples

    # mismatched samples file: error naming it
    bad = exp / "xe_a" / "decode_greedy" / "eval" / "bad_samples"
    bad.write_text("c1#1 a dog\n")
    with pytest.raises(SystemExit):
        score_main(["--ref_dir", str(d), "--hyp", str(exp / "xe_a/decode_greedy/eval/text"),
                    "--output", str(tmp_path / "s.json"), "--metrics", FAST, "--hyp_samples", str(bad)])

    out = tmp_path / "RESULTS.md"
    results_main(["--exp_dir", str(exp), "--output", str(out)])
    lines = out.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    cols = [c.strip() for c in header.split("|")[1:-1]]
    assert cols[-6:-2] == ["Div-1", "Div-2", "mBLEU-4", "Vocab"] and cols[3:-2] == list(METRIC_KEYS)
    table = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[1:-1]] for r in lines if r.startswith("| ")
             and not r.startswith("| model")}
    assert set(table) == set(rows)
    ens = dict(zip(cols, table["ensemble_xe_a+xe_a-scst_b"]))
    assert ens["Div-1"] == f"{json.loads((exp / 'xe_a/decode_greedy/eval/score.json').read_text())['Div-1']:.3f}"
    assert ens["Vocab"] == "7"
    scst = dict(zip(cols, table["xe_a/scst_b"]))
    assert scst["Div-1"] == "skipped" and scst["Vocab"] == "7"
    assert any(line.startswith("- Div-1: no sampled captions") for line in lines)
