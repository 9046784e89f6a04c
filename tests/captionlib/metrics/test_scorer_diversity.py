"""Diversity next to precision: Div-1, Div-2, mBLEU-4 (seed 001) and Vocab in score.json / RESULTS.md."""

import json

import pytest

from captionbin.caption_results import main as results_main
from captionbin.caption_score import main as score_main
from captionlib.metrics.diversity import diversity_metrics
from captionlib.metrics.scorer import (
    NBEST_DIVERSITY_KEYS,
    SAMPLE_CIDER_KEY,
    SCORE_KEYS,
    compute_caption_scores,
    format_result,
    read_samples,
    sample_id,
)
from captionlib.report.results import METRIC_KEYS

REFS = {
    "c1": ["a dog barks in the yard", "a dog is barking loudly"],
    "c2": ["rain falls on a roof", "heavy rain on a metal roof"],
}
HYPS = {"c1": "a dog barks", "c2": "rain falls on a roof"}
SAMPLES = {
    "c1": ["a dog barks", "a dog barks loudly", "the cat meows", "a dog barks", "dogs bark in a yard"],
    "c2": ["rain falls", "rain falls on a roof", "water drips", "heavy rain", "rain falls"],
}
NBEST = {
    "c1": ["a dog barks", "a dog is barking", "a dog barks loudly"],
    "c2": ["rain falls on a roof", "rain falls on the roof", "rain falls"],
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
    for k in ["Div-1", "Div-2", "mBLEU-4", SAMPLE_CIDER_KEY]:
        assert out[k] is None and "--num_diversity_samples" in out["skipped"][k]
    for k in NBEST_DIVERSITY_KEYS:
        assert out[k] is None and "--nbest" in out["skipped"][k]
    assert out["Vocab"] == 7  # always computed from the 1-best captions


def test_samples_must_cover_the_clips():
    with pytest.raises(ValueError, match="sampled captions must cover"):
        compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_samples={"c1": SAMPLES["c1"]}, java="no-such-java")
    with pytest.raises(ValueError, match="N-best beam hypotheses must cover"):
        compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_nbest={"c2": NBEST["c2"]}, java="no-such-java")
    one = {c: ss[:1] for c, ss in SAMPLES.items()}
    out = compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_samples=one, java="no-such-java")
    assert out["mBLEU-4"] is None and "at least 2" in out["skipped"]["mBLEU-4"]
    assert out["Div-1"] is not None


def test_cider_of_samples_and_diversity_of_beams():
    """Seed 001 table 4: CIDEr-D averaged over the samples; Div-1/2, mBLEU-4 over the N-best beams."""
    from pycocoevalcap.cider.cider import Cider

    out = compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_samples=SAMPLES, hyp_nbest=NBEST,
                                 java="no-such-java")
    # 5 samples for every clip: the mean of 5 ordinary CIDEr-D scorings, one per sample index
    runs = [Cider().compute_score(REFS, {c: [SAMPLES[c][k]] for c in REFS})[0] for k in range(5)]
    assert out[SAMPLE_CIDER_KEY] == pytest.approx(sum(runs) / 5, abs=1e-9)
    assert out[SAMPLE_CIDER_KEY] != pytest.approx(out["CIDEr-D"])
    expected = diversity_metrics({c: [s.split() for s in ss] for c, ss in NBEST.items()})
    for key, name in zip(NBEST_DIVERSITY_KEYS, ["Div-1", "Div-2", "mBLEU-4"]):
        assert out[key] == pytest.approx(expected[name]) and key not in out["skipped"]
    assert out["Div-1"] != out["Div-1 (beams)"]  # the sample columns stay the samples'
    text = format_result(out)
    assert "Div-1 (beams) " in text and "CIDEr-D (samples) " in text
    one = compute_caption_scores(REFS, HYPS, metrics=FAST, hyp_nbest={c: ns[:1] for c, ns in NBEST.items()},
                                 java="no-such-java")
    assert one["mBLEU-4 (beams)"] is None and "at least 2 beam hypotheses" in one["skipped"]["mBLEU-4 (beams)"]


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
    # as in text: a tab after the id is a separator, a BOM and a control character are errors
    p.write_text("c1#1\ta dog\n")
    assert read_samples(p) == {"c1": ["a dog"]}
    p.write_bytes(b"\xef\xbb\xbfc1#1 a dog\n")
    with pytest.raises(ValueError, match=r"text_samples:1: starts with a UTF-8 byte-order mark"):
        read_samples(p)
    p.write_text("c1#1 a\x01dog\n")
    with pytest.raises(ValueError, match=r"text_samples:1: control character U\+0001"):
        read_samples(p)
    # every clip has #1 .. #N with one N: one caption of a clip scored Div-1 near 1
    for text, ids in [("c1#1 a\nc1#2 b\nc2#1 a\n", "#1"), ("c1#1 a\nc1#7 b\nc2#1 a\nc2#7 b\n", "#1, #7")]:
        p.write_text(text)
        with pytest.raises(ValueError, match=f"clip c[12] has the ids {ids}, expected #1 .. #"):
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
        if model == "xe_a":
            (dec / "text_nbest").write_text(
                "".join(f"{sample_id(c, k + 1)} {s}\n" for c, ns in NBEST.items() for k, s in enumerate(ns)))
            args += ["--hyp_nbest", str(dec / "text_nbest")]
        score_main(args)
        score = json.loads((dec / "score.json").read_text())
        assert list(score) == list(SCORE_KEYS) + ["skipped"]
        assert (score["Div-1"] is not None) == (score[SAMPLE_CIDER_KEY] is not None) == with_samples
        assert (score["Div-1 (beams)"] is not None) == (model == "xe_a")

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
    assert cols[3:-2] == list(METRIC_KEYS)
    assert cols[-10:-2] == ["CIDEr-D (samples)", "Div-1", "Div-2", "mBLEU-4", "Div-1 (beams)", "Div-2 (beams)",
                            "mBLEU-4 (beams)", "Vocab"]
    table = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[1:-1]] for r in lines if r.startswith("| ")
             and not r.startswith("| model")}
    assert set(table) == set(rows)
    ens = dict(zip(cols, table["ensemble_xe_a+xe_a-scst_b"]))
    assert ens["Div-1"] == f"{json.loads((exp / 'xe_a/decode_greedy/eval/score.json').read_text())['Div-1']:.3f}"
    assert ens["Vocab"] == "7"
    assert ens["Div-1 (beams)"] == "skipped" and ens["CIDEr-D (samples)"] != "skipped"
    xe = dict(zip(cols, table["xe_a"]))
    xe_score = json.loads((exp / "xe_a/decode_greedy/eval/score.json").read_text())
    assert xe["mBLEU-4 (beams)"] == f"{xe_score['mBLEU-4 (beams)']:.3f}"
    scst = dict(zip(cols, table["xe_a/scst_b"]))
    assert scst["Div-1"] == "skipped" and scst["Vocab"] == "7"
    assert any(line.startswith("- Div-1: no sampled captions") for line in lines)
    assert any(line.startswith("- Div-1 (beams): no N-best beam hypotheses") for line in lines)
    # a mismatched N-best file: an error naming it
    with pytest.raises(SystemExit):
        score_main(["--ref_dir", str(d), "--hyp", str(exp / "xe_a/decode_greedy/eval/text"),
                    "--output", str(tmp_path / "s.json"), "--metrics", FAST, "--hyp_nbest", str(bad)])
