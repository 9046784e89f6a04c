"""Event libraries, the soundscape mixer and the corpus writer (captionlib.soundscapes)."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from captionlib.soundscapes.corpus import make_soundscape_corpus, parse_num_clips, read_annotations
from captionlib.soundscapes.library import (
    ESC50_PHRASES,
    load_event_library,
    phrases_from_label,
    split_recordings,
)
from captionlib.soundscapes.mixer import SoundscapeConfig, SoundscapeSpec, coloured_noise, render, sample_soundscape

LIBRARY = Path(__file__).resolve().parents[3].parent / "shared/data/event_library"
needs_library = pytest.mark.skipif(not (LIBRARY / "events.csv").is_file(), reason=f"{LIBRARY} not found")
SR = 16000


def _tone_library(root: Path, rows, header=("file", "label", "noun", "verb_3sg", "verb_ing")):
    """A small events.csv library of tones: rows are (file, label, noun, v3, ving, seconds, Hz)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "events.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for name, label, noun, v3, ving, dur, hz in rows:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            t = np.arange(int(dur * SR)) / SR
            sf.write(root / name, 0.5 * np.sin(2 * np.pi * hz * t), SR)
            w.writerow([name, label, noun, v3, ving][: len(header)])
    return root


TONES = [
    ("a/a1.wav", "alpha", "an alpha", "beeps", "beeping", 0.5, 440),
    ("a/a2.wav", "alpha", "an alpha", "beeps", "beeping", 0.6, 450),
    ("b/b.wav", "beta", "a beta", "hums", "humming", 1.0, 220),
    ("c/c.wav", "gamma", "a gamma", "whistles", "whistling", 2.0, 1760),
]


def test_library_events_csv_and_phrases_from_label(tmp_path):
    lib = load_event_library(_tone_library(tmp_path / "lib", TONES))
    assert [e.label for e in lib] == ["alpha", "alpha", "beta", "gamma"]
    assert lib[2].noun == "a beta" and lib[2].verb_ing == "humming" and Path(lib[2].path).is_absolute()
    bare = load_event_library(_tone_library(tmp_path / "bare", [("x.wav", "sea_waves", "", "", "", 0.5, 300)],
                                            header=("file", "label")))
    assert (bare[0].noun, bare[0].verb_3sg, bare[0].verb_ing) == phrases_from_label("sea_waves") == (
        "sea waves", "sounds", "sounding")


def test_library_errors_name_the_line(tmp_path):
    root = _tone_library(tmp_path / "lib", TONES)
    with open(root / "events.csv", "a") as f:
        f.write("missing.wav,delta,a delta,,\n")
    with pytest.raises(ValueError, match=r"events.csv:6: noun, verb_3sg and verb_ing"):
        load_event_library(root)
    (root / "events.csv").write_text("file,label\nnothere.wav,delta\n")
    with pytest.raises(FileNotFoundError, match=r"events.csv:2: audio file .*nothere.wav not found"):
        load_event_library(root)
    with pytest.raises(FileNotFoundError, match="not an event library"):
        load_event_library(tmp_path)


def test_library_esc50_layout(tmp_path):
    root = tmp_path / "ESC-50"
    (root / "meta").mkdir(parents=True)
    (root / "audio").mkdir()
    for name in ["1-100-A-0.wav", "1-200-A-41.wav"]:
        sf.write(root / "audio" / name, np.zeros(SR // 2), SR)
    (root / "meta" / "esc50.csv").write_text(
        "filename,fold,target,category,esc10,src_file,take\n"
        "1-100-A-0.wav,1,0,dog,True,100,A\n1-200-A-41.wav,1,41,chainsaw,False,200,A\n"
    )
    lib = load_event_library(root)
    assert [(e.label, e.noun, e.verb_3sg) for e in lib] == [("dog", "a dog", "barks"),
                                                            ("chainsaw", "a chainsaw", "runs")]
    assert len(ESC50_PHRASES) == 50


def test_split_keeps_recordings_of_multi_file_classes_for_evaluation(tmp_path):
    lib = load_event_library(_tone_library(tmp_path / "lib", TONES))
    dev, ev = split_recordings(lib, heldout_fraction=0.2)
    assert [e.path for e in dev if e.label == "alpha"] == [lib[0].path]
    assert [e.path for e in ev if e.label == "alpha"] == [lib[1].path]
    assert {e.label for e in dev} == {e.label for e in ev} == {"alpha", "beta", "gamma"}  # one-file classes in both
    with pytest.raises(ValueError):
        split_recordings(lib, 1.0)


@needs_library
def test_split_of_the_default_library_is_disjoint_where_possible():
    lib = load_event_library(LIBRARY)
    dev, ev = split_recordings(lib)
    multi = {e.label for e in lib if sum(x.label == e.label for x in lib) > 1}
    assert len(multi) >= 5
    for label in multi:
        assert not {e.path for e in dev if e.label == label} & {e.path for e in ev if e.label == label}


def _durations(lib):
    return {e.path: len(sf.read(e.path)[0]) / SR for e in lib}


def test_sample_soundscape_is_deterministic_and_consistent(tmp_path):
    lib = load_event_library(_tone_library(tmp_path / "lib", TONES))
    durs = _durations(lib)
    cfg = SoundscapeConfig(duration_s=6.0)
    a = sample_soundscape(np.random.default_rng(7), lib, durs, cfg)
    b = sample_soundscape(np.random.default_rng(7), lib, durs, cfg)
    assert a == b
    seen_counts, seen_relations = set(), set()
    for seed in range(300):
        spec = sample_soundscape(np.random.default_rng(seed), lib, durs, cfg)
        assert 1 <= len(spec.events) <= 3
        labels = [e.label for e in spec.events]
        assert len(set(labels)) == len(labels)  # distinct classes
        assert [e.onset_s for e in spec.events] == sorted(e.onset_s for e in spec.events)
        for e in spec.events:
            assert 0.0 <= e.onset_s and e.offset_s <= cfg.duration_s + 1e-6
            assert (e.lowpass_hz is not None) == (e.loudness == "distant")
            lo, hi = dict(cfg.snr_db)[e.loudness]
            assert lo <= e.snr_db <= hi
            seen_counts.add(len(e.onsets_s))
            gaps = np.diff(e.onsets_s)
            assert np.all(gaps >= e.duration_s)  # repetitions do not overlap themselves
        for p, q in zip(spec.events, spec.events[1:]):
            overlap = q.onset_s < p.offset_s
            if overlap:  # an overlap is long enough for the captions to call it one
                assert q.onset_s <= p.offset_s - cfg.min_overlap_s + 1e-6
            seen_relations.add(overlap)
        assert SoundscapeSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert seen_counts >= {1, 2} and seen_relations == {True, False}


def test_render_levels_follow_the_annotation(tmp_path):
    lib = load_event_library(_tone_library(tmp_path / "lib", TONES))
    durs = _durations(lib)
    spec = sample_soundscape(np.random.default_rng(3), lib, durs, SoundscapeConfig(duration_s=6.0))
    spec.events = spec.events[:1]
    e = spec.events[0]
    e.onsets_s, e.loudness, e.snr_db, e.lowpass_hz = [1.0], "normal", 20.0, None
    audio = {f.path: sf.read(f.path)[0] for f in lib}
    x = render(spec, audio.__getitem__)
    assert x.dtype == np.float32 and x.shape == (6 * SR,)
    bg = np.sqrt(np.mean(x[: SR // 2].astype(np.float64) ** 2))
    assert 20 * np.log10(bg) == pytest.approx(spec.background_dbfs, abs=1.0)
    seg = x[SR: SR + int(e.duration_s * SR)].astype(np.float64)
    assert 20 * np.log10(np.sqrt(np.mean(seg**2)) / bg) == pytest.approx(20.0, abs=1.0)
    assert np.max(np.abs(render(spec, lambda p: 100 * audio[p]))) <= 0.99 + 1e-6  # scaled, never clipped


def test_coloured_noise_slope():
    x = coloured_noise(2**16, 2.0, SR, np.random.default_rng(0))
    spec = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / SR)
    low, high = spec[(f > 100) & (f < 200)].mean(), spec[(f > 1000) & (f < 2000)].mean()
    assert 10 * np.log10(low / high) == pytest.approx(20.0, abs=3.0)  # brown: -20 dB per decade


def test_make_corpus_clotho_layout_deterministic_and_resumable(tmp_path):
    root = _tone_library(tmp_path / "lib", TONES)
    out = tmp_path / "corpus"
    cfg = SoundscapeConfig(duration_s=4.0)
    sizes = {"development": 6, "validation": 2, "evaluation": 3}
    make_soundscape_corpus(root, out, sizes, seed=1, config=cfg)
    rows = list(csv.reader(open(out / "clotho_captions_development.csv")))
    assert rows[0] == ["file_name"] + [f"caption_{k}" for k in range(1, 6)] and len(rows) == 7
    ann = read_annotations(out / "annotations_development.jsonl")
    for name, *captions in rows[1:]:
        wav, sr = sf.read(out / "development" / name)
        assert sr == SR and len(wav) == 4 * SR
        assert len(set(captions)) == 5
        for e in ann[name]["events"]:
            assert all(e["noun"].lower() in c.lower() for c in captions)  # every caption names every event
    for e in read_annotations(out / "annotations_evaluation.jsonl").values():
        assert all(ev["file"] != "a/a1.wav" for ev in e["events"])  # held out from evaluation
    # each clip's event labels, in Clotho's metadata layout (caption_pretrain_tagging's labels)
    labels = list(csv.reader(open(out / "soundscapes_metadata_development.csv")))
    assert labels[0] == ["file_name", "keywords"]
    assert {r[0]: r[1].split(";") for r in labels[1:]} == {n: sorted({e["label"] for e in a["events"]})
                                                           for n, a in ann.items()}
    first = (out / "clotho_captions_development.csv").read_bytes()
    mtime = (out / "development" / "development_00001.flac").stat().st_mtime_ns
    make_soundscape_corpus(root, out, sizes, seed=1, config=cfg)  # same options: nothing redone
    assert (out / "development" / "development_00001.flac").stat().st_mtime_ns == mtime
    # a larger corpus extends the smaller one; another seed gives other clips
    make_soundscape_corpus(root, tmp_path / "big", dict(sizes, development=8), seed=1, config=cfg)
    big = (tmp_path / "big" / "clotho_captions_development.csv").read_bytes()
    assert big.startswith(first)
    make_soundscape_corpus(root, tmp_path / "other", sizes, seed=2, config=cfg)
    assert (tmp_path / "other" / "clotho_captions_development.csv").read_bytes() != first
    with pytest.raises(ValueError, match="no recording of class"):
        make_soundscape_corpus(root, tmp_path / "x", sizes, classes=["omega"])


def test_parse_num_clips():
    assert parse_num_clips("development:5, evaluation:2") == {"development": 5, "evaluation": 2}
    for bad in ["dev:5", "development=5", "development:x"]:
        with pytest.raises(ValueError):
            parse_num_clips(bad)


def test_mixer_config_from_yaml_overrides():
    from captionlib.soundscapes.mixer import mixer_config

    cfg = mixer_config({"overlap_prob": 0.5, "snr_db": [["loud", [20, 30]], ["normal", [10, 20]], ["distant", [0, 5]]]},
                       duration_s=5.0)
    assert cfg.overlap_prob == 0.5 and cfg.duration_s == 5.0 and cfg.snr_db[0] == ("loud", (20, 30))
    for bad in ({"no_such": 1}, {"overlap_prob": "high"}, {"gap_s": 0.5}):
        with pytest.raises(ValueError, match="mixer_conf"):
            mixer_config(bad)
