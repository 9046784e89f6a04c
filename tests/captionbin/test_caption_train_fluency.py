"""caption_train_fluency on a small caption set, and caption_score --metrics fluency with its model."""

import itertools
import json

import numpy as np
import pytest
import yaml

from captionbin.caption_score import main as score_main
from captionbin.caption_train_fluency import get_parser, main
from captionlib.metrics.fluency import LABELS, FluencyDetector
from captionlib.metrics.fluency_corrupt import ERROR_CLASSES

# 240 captions written for this test (Kaldi text: <utt-id> <caption>)
SUBJECTS = ["a dog", "a man", "birds", "a car", "the wind", "rain", "a woman", "people", "a door", "water"]
VERBS = ["barks loudly", "speaks quietly", "chirp and sing", "passes by quickly", "blows hard", "falls steadily"]
PLACES = ["in the distance", "while music plays", "near a busy road", "and then stops"]


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("fluency")
    caps = [f"{s} {v} {p}" for s, v, p in itertools.product(SUBJECTS, VERBS, PLACES)]
    _write(d / "text", [f"cap-{i:04d} {c}" for i, c in enumerate(caps[:200])])
    _write(d / "heldout", [f"held-{i:04d} {c}" for i, c in enumerate(caps[200:])])
    out = d / "exp" / "fluency" / "detector.pth"
    main(["--captions", str(d / "text"), "--heldout", str(d / "heldout"), "--epochs", "1", "--output", str(out),
          "--channels", "32", "--log_interval", "1"])
    return d, out


def test_parser_defaults(capsys):
    assert get_parser().parse_args(["--captions", "x"]).output == "exp/fluency/detector.pth"
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(SystemExit) as e:
        main(["--captions", "a.csv", "--print_config"])
    assert e.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["epochs"] == 25


def test_trains_writes_a_model_that_loads_and_flags(trained):
    d, out = trained
    det = FluencyDetector.load(out)
    flags, probs = det.flag(["a dog barks loudly in the distance", "a dog barks loudly in the and a", ""])
    assert flags.shape == (3,) and flags.dtype == bool and probs.shape == (3, len(LABELS))
    assert 0.05 <= det.threshold <= 0.95
    metrics = json.loads((out.parent / "metrics.json").read_text())
    ev = metrics["heldout_measurement"]
    assert ev["clean"] == 40 and set(ev["detector"]["recall"]) == set(ERROR_CLASSES)
    assert ev["classes"]["add_tail"] == 40 and ev["rules"]["recall"]["add_tail"] == 1.0  # every tail ends badly
    assert 0 <= ev["detector"]["clean_fpr"] <= 1 and metrics["train_captions"] + metrics["tune_captions"] == 200
    assert metrics["threshold"] == det.threshold and metrics["train_seconds"] > 0
    n_verb = ev["classes"]["remove_verb"]
    assert 0 < n_verb <= 40  # captions whose tags have a verb that is not an auxiliary
    assert f"| remove_verb (recall) | {n_verb} |" in (out.parent / "metrics.md").read_text()


def test_missing_caption_file_exits(tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["--captions", str(tmp_path / "none.csv"), "--output", str(tmp_path / "m.pth")])
    assert e.value.code == 1


REFS = {
    "clip-1": ["a dog barks loudly in the distance", "a dog is barking far away"],
    "clip-2": ["birds chirp and sing in the trees", "many birds are singing"],
    "clip-3": ["rain falls steadily on a roof", "heavy rain on a tin roof"],
}
HYPS = {"clip-1": "a dog barks in the distance and a", "clip-2": "birds chirp and sing",
        "clip-3": "rain falls on a roof"}


def _score(tmp_path, name, *extra):
    ref = tmp_path / "data"
    if not ref.exists():
        ref.mkdir()
        _write(ref / "text", [f"{c}-{k} {x}" for c, xs in REFS.items() for k, x in enumerate(xs)])
        _write(ref / "utt2spk", [f"{c}-{k} {c}" for c, xs in REFS.items() for k in range(len(xs))])
        _write(tmp_path / "hyp", [f"{c} {h}" for c, h in HYPS.items()])
    out = tmp_path / name / "score.json"
    score_main(["--ref_dir", str(ref), "--hyp", str(tmp_path / "hyp"), "--output", str(out), *extra])
    return (json.loads(out.read_text()), json.loads((out.parent / "per_clip.json").read_text()),
            (out.parent / "result.txt").read_text())


def test_caption_score_fluency_rules_alone(tmp_path):
    score, per_clip, text = _score(tmp_path, "rules", "--metrics", "fluency")
    assert list(score)[-5:] == ["FER (detector)", "FER (rules)", "CIDEr-D-FL", "SPIDEr-FL", "skipped"]
    assert score["FER (rules)"] == pytest.approx(1 / 3)  # clip-1 ends in "and a"
    assert score["FER (detector)"] is None and "--fluency_model" in score["skipped"]["FER (detector)"]
    cider = per_clip["CIDEr-D"]
    want = (0.1 * cider["clip-1"] + cider["clip-2"] + cider["clip-3"]) / 3
    assert score["CIDEr-D-FL"] == pytest.approx(want) and score["CIDEr-D-FL"] < score["CIDEr-D"]
    assert per_clip["CIDEr-D-FL"]["clip-1"] == pytest.approx(0.1 * cider["clip-1"])
    assert per_clip["FER (rules)"] == {"clip-1": 1.0, "clip-2": 0.0, "clip-3": 0.0}  # for a bootstrap of the rate
    assert "FER (detector)" not in per_clip
    assert score["SPIDEr-FL"] is None and "SPIDEr" in score["skipped"]["SPIDEr-FL"]
    assert "rules alone" in text and "CIDEr-D-FL" in text
    plain, _, _ = _score(tmp_path, "plain", "--metrics", "cider_d")
    assert "CIDEr-D-FL" not in plain and plain["CIDEr-D"] == score["CIDEr-D"]


def test_caption_score_fluency_with_the_detector(tmp_path, trained):
    _, model = trained
    det = FluencyDetector.load(model)
    for threshold, fer in ((0.0, 1.0), (1.01, 0.0)):  # flags every caption, none
        det.threshold = threshold
        det.save(tmp_path / f"det{threshold}.pth")
        score, per_clip, text = _score(tmp_path, f"t{threshold}", "--metrics", "cider_d,fluency",
                                       "--fluency_model", str(tmp_path / f"det{threshold}.pth"))
        assert score["FER (detector)"] == fer and score["FER (rules)"] == pytest.approx(1 / 3)
        assert score["CIDEr-D-FL"] == pytest.approx(score["CIDEr-D"] * (0.1 if fer else 1.0))
        assert set(per_clip["FER (detector)"].values()) == {fer}
        assert "flagged by the detector" in text
    with pytest.raises(SystemExit):  # a missing model file is an error before scoring
        _score(tmp_path, "missing", "--metrics", "fluency", "--fluency_model", str(tmp_path / "none.pth"))


CLOTHO = ["file_name,caption_1,caption_2,caption_3,caption_4,caption_5",
          "a.wav,A dog barks and a man speaks.,A dog barks loudly.,Rain falls on a roof.,Birds sing.,A car passes by.",
          "b.wav,People are talking in a room.,Wind blows hard.,A door creaks.,A bell rings.,Water drips slowly."]
JUDGED = ["file_name\tcaption\tform\tjudgement", "a.wav\t1\tremove_conj\tdisfluent",  # a dog barks a man speaks
          "a.wav\t2\tadd_tail\tdisfluent", "b.wav\t1\tremove_verb\tfluent",  # people are in a room
          "a.wav\t3\tclean\tfluent", "b.wav\t2\tclean\tdisfluent"]


def test_judged_rates_by_hand(tmp_path):
    from captionlib.metrics.fluency_train import evaluate_judged, format_judged, read_judgements
    _write(tmp_path / "c.csv", CLOTHO)
    _write(tmp_path / "j.tsv", JUDGED)
    ev = evaluate_judged(None, read_judgements(str(tmp_path / "j.tsv")), [str(tmp_path / "c.csv")])
    assert list(ev) == ["clean", "add_tail", "remove_conj", "remove_verb"]
    assert ev["clean"] == {"judged": 2, "fluent": 1, "rules": 0.0}  # the fluent one, not flagged
    assert ev["add_tail"]["rules"] == 1.0 and ev["remove_conj"]["rules"] == 0.0  # no rule sees a missing "and"
    assert ev["remove_verb"]["judged"] == 1 and np.isnan(ev["remove_verb"]["rules"])  # none judged disfluent
    assert "| remove_conj | 1 | 0 | the disfluent ones (recall) | - | 0.0% |" in format_judged(ev)
    _write(tmp_path / "bad.tsv", JUDGED[:2] + ["a.wav\t7\tclean\tfluent"])
    with pytest.raises(ValueError, match=r"bad.tsv:3: need"):
        read_judgements(str(tmp_path / "bad.tsv"))
    _write(tmp_path / "gone.tsv", JUDGED[:1] + ["c.wav\t1\tclean\tfluent"])
    with pytest.raises(ValueError, match="judged clip c.wav is in none of"):
        evaluate_judged(None, read_judgements(str(tmp_path / "gone.tsv")), [str(tmp_path / "c.csv")])


def test_judgements_in_training_metrics(tmp_path, trained):
    d, _ = trained
    _write(tmp_path / "c.csv", CLOTHO)
    _write(tmp_path / "j.tsv", JUDGED)
    out = tmp_path / "m.pth"
    main(["--captions", str(d / "text"), "--heldout", str(tmp_path / "c.csv"), "--judgements", str(tmp_path / "j.tsv"),
          "--epochs", "1", "--channels", "16", "--output", str(out)])
    judged = json.loads((tmp_path / "metrics.json").read_text())["judged_measurement"]
    assert judged["clean"]["judged"] == 2 and 0 <= judged["add_tail"]["detector"] <= 1
    assert "Judged (" in (tmp_path / "metrics.md").read_text()
    with pytest.raises(SystemExit) as e:  # the judged clips' CSV is needed
        main(["--captions", str(d / "text"), "--judgements", str(tmp_path / "j.tsv"), "--output", str(out)])
    assert e.value.code == 1
