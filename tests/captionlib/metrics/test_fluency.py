"""Fluency: FENSE's synthetic errors, the rules, the -FL penalty, the detector's file and features."""

import numpy as np
import pytest
import torch

from captionlib.metrics.fluency import LABELS, SPECIALS, BigramCounts, FluencyDetector, FluencyNet, repetition_features
from captionlib.metrics.fluency_corrupt import (
    ERROR_CLASSES,
    EVENT_CONJUNCTIONS,
    USELESS_TAILS,
    add_tail,
    corrupt,
    random_corruption,
    remove_conj,
    remove_verb,
    repeat_adv,
    repeat_event,
    split_events,
    tag_caption,
)
from captionlib.metrics.fluency_rules import RULES, fluency_penalised, fluency_rules, rule_flags
from captionlib.utils.fileio import atomic_save

# hand-tagged (word, Penn tag) captions, so that these tests do not depend on the tagger
DOG_MAN = [("a", "DT"), ("dog", "NN"), ("barks", "VBZ"), ("loudly", "RB"), ("while", "IN"), ("a", "DT"), ("man", "NN"),
           ("is", "VBZ"), ("speaking", "VBG")]
RAIN = [("heavy", "JJ"), ("rain", "NN"), ("on", "IN"), ("a", "DT"), ("roof", "NN")]


def _words(toks):
    return [w for w, _ in toks]


def test_error_classes_are_fenses():
    assert ERROR_CLASSES == ("add_tail", "repeat_event", "repeat_adv", "remove_conj", "remove_verb")
    assert LABELS == ERROR_CLASSES + ("error",)


def test_add_tail_appends_one_useless_tail_deterministically():
    tails = set()
    for seed in range(20):
        out = _words(add_tail(RAIN, np.random.default_rng(seed)))
        assert out[:5] == _words(RAIN)
        tail = " ".join(out[5:])
        assert tail in USELESS_TAILS
        tails.add(tail)
        assert _words(add_tail(RAIN, np.random.default_rng(seed))) == out  # same seed, same tail
    assert len(tails) > 3
    assert add_tail([], np.random.default_rng(0)) is None


def test_split_events_cuts_at_conjunctions():
    toks = [(w, "X") for w in "a dog barks followed by a man speaking and birds".split()]
    assert [_words(e) for e in split_events(toks)] == [["a", "dog", "barks"], ["a", "man", "speaking"], ["birds"]]


def test_repeat_event_appends_a_conjunction_and_an_altered_event():
    events = [_words(e) for e in split_events(DOG_MAN)]
    assert events == [["a", "dog", "barks", "loudly"], ["a", "man", "is", "speaking"]]
    seen = set()
    for seed in range(30):
        out = _words(repeat_event(DOG_MAN, np.random.default_rng(seed)))
        assert out[:len(DOG_MAN)] == _words(DOG_MAN)
        rest = out[len(DOG_MAN):]
        conj = next(c for c in EVENT_CONJUNCTIONS[:-1] if rest[:len(c.split())] == c.split())
        event = rest[len(conj.split()):]
        # the event is one of the caption's: kept, without its articles, without 'is', or with an 'a' added
        allowed = [v for e in events for v in (e, [w for w in e if w != "a"], [w for w in e if w != "is"],
                                               ["a"] + e, e[:-1] + ["a"] + e[-1:])]
        assert event in allowed, out
        seen.add(" ".join(event))
    assert "a dog barks loudly" in seen and "dog barks loudly" in seen and len(seen) >= 4


def test_repeat_adv_repeats_the_last_adverb_at_the_end():
    assert corrupt("A dog barks loudly in the distance.", "repeat_adv") == "a dog barks loudly in the distance loudly"
    toks = [("birds", "NNS"), ("sing", "VBP"), ("softly", "RB"), ("then", "RB"), ("stop", "VBP")]
    assert _words(repeat_adv(toks)) == ["birds", "sing", "softly", "then", "stop", "then"]
    assert repeat_adv(RAIN) is None
    assert repeat_adv([("do", "VBP"), ("not", "RB"), ("stop", "VB")]) is None  # 'not' is no adverb here


def test_remove_conj_removes_the_last_conjunction():
    assert corrupt("A dog barks and a man speaks.", "remove_conj") == "a dog barks a man speaks"
    toks = [("birds", "NNS"), ("chirp", "VBP"), ("and", "CC"), ("sing", "VBP")] + DOG_MAN[4:]
    assert _words(remove_conj(toks)) == ["birds", "chirp", "and", "sing", "a", "man", "is", "speaking"]
    assert remove_conj(RAIN) is None


def test_remove_verb_removes_the_last_verb_not_an_auxiliary():
    assert _words(remove_verb(DOG_MAN)) == ["a", "dog", "barks", "loudly", "while", "a", "man", "is"]
    assert _words(remove_verb(DOG_MAN[:3])) == ["a", "dog"]
    assert remove_verb(RAIN) is None
    assert remove_verb([("is", "VBZ"), ("it", "PRP")]) is None  # only an auxiliary
    assert corrupt("A man is speaking loudly.", "remove_verb") == "a man is loudly"


def test_corrupt_checks_the_class_and_is_seeded():
    with pytest.raises(ValueError, match="unknown fluency error class"):
        corrupt("a dog barks", "swap_words")
    assert corrupt("a dog barks", "add_tail", seed=3) == corrupt("a dog barks", "add_tail", seed=3)
    assert corrupt("", "add_tail") is None
    assert tag_caption("A dog, barking!")[1][0] == "dog"


def test_random_corruption_labels_what_it_applied():
    counts = np.zeros(len(ERROR_CLASSES))
    for seed in range(200):
        out, labels = random_corruption(DOG_MAN, np.random.default_rng(seed), second=0.5)
        assert 1 <= sum(labels) <= 2 and out is not None and _words(out) != _words(DOG_MAN)
        counts += labels
        again = random_corruption(DOG_MAN, np.random.default_rng(seed), second=0.5)
        assert again[1] == labels and _words(again[0]) == _words(out)
    assert (counts > 20).all()  # every class applies to DOG_MAN and is drawn
    assert random_corruption([], np.random.default_rng(0)) == (None, [0] * 5)


@pytest.mark.parametrize("caption, fired", [
    ("Birds chirp in the background and a", ["function_word_end"]),
    ("a car passes by and then", ["function_word_end"]),
    ("a dog barks followed by", ["function_word_end"]),
    ("a man talks to the", ["function_word_end"]),
    ("a bird is whistling whistling", ["repeated_word"]),
    ("a dog barks and a dog barks", ["repeated_trigram"]),
    ("the the dog barks and the the", ["function_word_end", "repeated_word"]),
    ("a car passes by", []),
    ("the wind picks up", []),
    ("a bird chirps every now and then", []),
    ("people are milling about", []),
    ("a dog barks and another dog barks", []),
    ("", []),
])
def test_rules(caption, fired):
    assert fluency_rules(caption) == fired


def test_rule_flags_columns():
    flags = rule_flags(["a dog barks loudly loudly", "rain falls", ["birds", "sing", "with"]])
    assert flags.shape == (3, len(RULES)) and flags.dtype == bool
    assert flags.tolist() == [[False, True, False], [False, False, False], [True, False, False]]


def test_fl_penalty_by_hand():
    scores = {"a": 1.2, "b": 0.6, "c": 0.3}
    mean, per = fluency_penalised(scores, {"a": True, "b": False, "c": True})
    assert per == pytest.approx({"a": 0.12, "b": 0.6, "c": 0.03})
    assert mean == pytest.approx((0.12 + 0.6 + 0.03) / 3)
    assert fluency_penalised(scores, {c: False for c in scores})[0] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="same clips"):
        fluency_penalised(scores, {"a": True})
    with pytest.raises(ValueError):
        fluency_penalised({}, {})


def test_repetition_and_count_features():
    assert repetition_features(["a", "dog", "a", "dog", "runs"]).tolist() == [
        [0, 0], [0, 0], [1, 0], [1, 1], [0, 0]]
    counts = BigramCounts.from_rows(6, [[2, 4, 5, 3], [2, 4, 3]])
    f = counts.features(np.array([[2, 4, 5, 3], [2, 5, 4, 3]]))
    assert f.shape == (2, 4, 2)
    assert f[0, 1, 0] == pytest.approx(np.log1p(2) / 5)  # (<s>, 4) twice
    assert f[1, 1, 0] == 0 and f[1, 2, 0] == 0  # (<s>, 5), (5, 4) never seen
    assert f[0, 2, 1] == pytest.approx(np.log1p(1) / 10)  # word 5 once
    rest = counts.minus(BigramCounts.from_rows(6, [[2, 4, 3]]))
    assert rest.features(np.array([[2, 4, 3]]))[0, 1:, 0].tolist() == pytest.approx([np.log1p(1) / 5, 0.0])


def _detector(threshold=0.5):
    torch.manual_seed(0)
    vocab = list(SPECIALS) + "a dog barks man speaks".split()
    counts = BigramCounts.from_rows(len(vocab), [[2, 4, 5, 6, 3]])
    return FluencyDetector(vocab, FluencyNet(len(vocab), embed_dim=8, channels=16, layers=2), threshold,
                           counts=counts)


def test_detector_flags_and_round_trips(tmp_path):
    det = _detector()
    caps = ["A dog barks.", "a man speaks loudly and", "", "dog " * 100]
    flags, probs = det.flag(caps)
    assert flags.shape == (4,) and flags.dtype == bool
    assert probs.shape == (4, len(LABELS)) and probs.dtype == np.float32 and ((probs > 0) & (probs < 1)).all()
    assert (flags == (probs[:, -1] >= 0.5)).all()
    path = tmp_path / "exp" / "detector.pth"
    path.parent.mkdir()
    det.save(path)
    back = FluencyDetector.load(path)
    assert np.array_equal(back.probabilities(caps), probs)
    assert back.threshold == 0.5 and back.vocab == det.vocab
    assert _detector(threshold=0.0).flag(caps)[0].all() and not _detector(threshold=1.01).flag(caps)[0].any()
    raw = torch.load(path, weights_only=True)  # plain values and tensors only
    assert raw["format"] == "captionlib-fluency-detector"


def test_detector_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        FluencyDetector.load(tmp_path / "none.pth")
    atomic_save({"x": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="not a fluency detector"):
        FluencyDetector.load(tmp_path / "other.pth")
    with pytest.raises(ValueError, match="vocabulary must start"):
        FluencyDetector(["a"], FluencyNet(1))
