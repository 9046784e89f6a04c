"""The scoring pipeline: metric selection, Java fallbacks, SPICE availability."""

import os
import shutil

import pytest

from captionlib.metrics.scorer import SCORE_KEYS, SpiceOptions, compute_caption_scores, format_result, parse_metrics
from captionlib.metrics.spice import CORENLP_JARS, ENV_SPICE_LIB, spice_command, spice_unavailable_reason
from _metrics_data import clotho_split


def _small_set(num=8):
    ids, caps = clotho_split("evaluation")
    refs = {c: r[1:] for c, r in zip(ids[:num], caps[:num])}
    hyps = {c: r[0] for c, r in zip(ids[:num], caps[:num])}
    return refs, hyps


def test_parse_metrics():
    assert parse_metrics("bleu,cider_d") == ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "CIDEr-D"]
    assert parse_metrics("cider_d, bleu_4 ,rouge_l") == ["CIDEr-D", "BLEU-4", "ROUGE-L"]
    with pytest.raises(ValueError, match="unknown metric 'cider'"):
        parse_metrics("cider")
    with pytest.raises(ValueError):
        parse_metrics("")


def test_without_java_nothing_is_made_up(tmp_path):
    refs, hyps = _small_set()
    out = compute_caption_scores(refs, hyps, java=str(tmp_path / "no-java"))
    assert set(out) == set(SCORE_KEYS) | {"skipped"}
    for k in ("METEOR", "SPICE", "SPIDEr"):
        assert out[k] is None and k in out["skipped"]
    assert "Java" in out["skipped"]["METEOR"]
    assert "PTB-tokenizer" in out["skipped"]
    assert 0 < out["CIDEr-D"] < 10 and 0 < out["BLEU-4"] < 1
    text = format_result(out)
    assert "SPICE    skipped" in text


def test_subset_and_mismatch():
    refs, hyps = _small_set(4)
    out = compute_caption_scores(refs, hyps, metrics="cider_d,bleu_4")
    assert out["BLEU-1"] is None and out["skipped"]["BLEU-1"].startswith("not requested")
    assert out["CIDEr-D"] is not None and out["BLEU-4"] is not None
    del hyps[next(iter(hyps))]
    with pytest.raises(ValueError, match="same clips"):
        compute_caption_scores(refs, hyps, metrics="cider_d")


def test_spice_reason_names_the_jars(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_SPICE_LIB, raising=False)
    reason = spice_unavailable_reason(spice_lib_dir=str(tmp_path))
    if reason is None:
        pytest.skip("CoreNLP jars are installed in pycocoevalcap's own spice/lib")
    assert CORENLP_JARS[0] in reason and str(tmp_path) in reason


def test_spice_command_on_java17(tmp_path, monkeypatch):
    if shutil.which("java") is None:
        pytest.skip("no Java")
    for j in CORENLP_JARS:
        (tmp_path / j).write_bytes(b"")
    rhino = tmp_path / "rhino.jar"
    rhino.write_bytes(b"")
    cmd = spice_command("in.json", "out.json", str(tmp_path / "cache"), str(tmp_path), str(rhino), heap="2G")
    assert "-Xmx2G" in cmd and f"--module-path={rhino}" in cmd and "--add-modules=ALL-MODULE-PATH" in cmd
    for m in ("java.lang", "java.util", "java.math", "java.util.concurrent", "java.net", "java.text"):
        assert f"--add-opens=java.base/{m}=ALL-UNNAMED" in cmd
    assert cmd[cmd.index("-cache") + 1] == str(tmp_path / "cache")
    assert str(tmp_path / CORENLP_JARS[1]) in cmd[cmd.index("-cp") + 1]


def test_spice_and_spider_with_jars(tmp_path):
    """Runs SPICE for real when the CoreNLP 3.6.0 jars (and Rhino) are installed."""
    reason = spice_unavailable_reason(os.environ.get(ENV_SPICE_LIB))
    if reason is not None:
        pytest.skip(f"SPICE cannot run here: {reason}")
    refs, hyps = _small_set(3)
    out = compute_caption_scores(refs, hyps, metrics="cider_d,spice,spider",
                                 spice=SpiceOptions(cache_dir=str(tmp_path / "cache"), heap="2G"))
    assert 0 <= out["SPICE"] <= 1
    assert out["SPIDEr"] == pytest.approx((out["CIDEr-D"] + out["SPICE"]) / 2)


def test_meteor_batch_equals_pycocoevalcap():
    """meteor_score's one batch == pycocoevalcap's Meteor.compute_score (a round trip per clip)."""
    if shutil.which("java") is None:
        pytest.skip("no Java")
    from captionlib.metrics.pycoco import get_meteor, meteor_score

    refs, hyps = _small_set(250)
    # text the protocol is sensitive to: '|||' is removed from a hypothesis (then "  " -> " ")
    # and splits a reference; '|' next to the separators; empty hypothesis; non-ASCII, tab
    odd = {
        "odd-1": (["a dog barks loudly", "the dog is barking"], "a dog ||| barks"),
        "odd-2": (["a dog ||| barks", "birds sing"], "birds|||sing  ||| loudly"),
        "odd-3": (["|||", "x"], "x"),
        "odd-4": (["rain falls", "rain"], ""),
        "odd-5": (["café crème 🐦 sings", "bird\tsings"], "|||a||||b|||"),
        "odd-6": (["| a |", "||b||"], "|x|"),
    }
    for c, (rs, h) in odd.items():
        refs[c], hyps[c] = rs, h
    score, per_clip = meteor_score(refs, hyps)
    # after the batch, on the same shared process: a batch that left it out of step shows here
    ref_score, ref_scores = get_meteor().compute_score({c: list(rs) for c, rs in refs.items()},
                                                       {c: [hyps[c]] for c in refs})
    assert list(per_clip) == list(refs)
    assert list(per_clip.values()) == pytest.approx(ref_scores, abs=1e-6)
    assert score == pytest.approx(ref_score, abs=1e-6)
    assert score != pytest.approx(sum(ref_scores) / len(ref_scores), abs=1e-6)  # not a mean
    # a line break would be read as two lines (pycocoevalcap then reads answers out of step)
    for r, h in ((["a dog"], "a\ndog"), (["a\rdog"], "a dog")):
        with pytest.raises(ValueError, match="line break"):
            meteor_score({"x": r}, {"x": h})


def test_ptb_tokenizer_takes_unicode_line_separators_as_spaces():
    """U+2028 in a caption came back from the jar as two lines: a RuntimeError traceback
    naming neither the file nor the line."""
    if shutil.which("java") is None:
        pytest.skip("no java")
    from captionlib.metrics.pycoco import ptb_tokenize

    captions = ["rain \u2028 on a roof", "a\u2029dog", "x\x0by\x0cz\x85w", "a dog. Barks!"]
    assert ptb_tokenize(captions) == ["rain on a roof", "a dog", "x y z w", "a dog barks"]
