"""captionbin.caption_make_soundscapes on the real event library (a few short clips)."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from captionbin.caption_make_soundscapes import main

LIBRARY = Path(__file__).resolve().parents[2].parent / "shared/data/event_library"
pytestmark = pytest.mark.skipif(not (LIBRARY / "events.csv").is_file(), reason=f"{LIBRARY} not found")


def test_print_config(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--print_config"])
    assert e.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["duration_s"] == 10.0


def test_classes_subset_layout_and_notices(tmp_path):
    out = tmp_path / "corpus"
    main(["--event_root", str(LIBRARY), "--output_dir", str(out), "--num_clips", "development:3,evaluation:2",
          "--duration_s", "3", "--classes", "dog,cow,duck", "--mixer_conf", "{overlap_prob: 0.9}"])
    info = json.loads((out / "corpus.json").read_text())
    assert info["classes"] == ["cow", "dog", "duck"] and info["options"]["config"]["overlap_prob"] == 0.9
    assert (out / "LICENSES" / "tuxpaint-stamps-default.copyright").is_file()
    assert (out / "EVENT_LIBRARY_README.md").is_file()
    rows = list(csv.DictReader(open(out / "clotho_captions_evaluation.csv")))
    assert len(rows) == 2 and all((out / "evaluation" / r["file_name"]).is_file() for r in rows)
    nouns = {"a dog", "a cow", "a duck"}
    for r in rows:
        assert any(n in r["caption_1"].lower() for n in nouns)
    # evaluation uses the held-out duck recording (the last of the class), never the first
    ann = [json.loads(line) for line in open(out / "annotations_evaluation.jsonl")]
    assert all(e["file"] != "duck/drake.flac" for a in ann for e in a["events"])


def test_bad_options_exit_1(tmp_path):
    base = ["--event_root", str(LIBRARY), "--output_dir", str(tmp_path / "c")]
    for extra in (["--mixer_conf", "{no_such_field: 1}"], ["--num_clips", "dev:2"], ["--classes", "unicorn"]):
        with pytest.raises(SystemExit) as e:
            main(base + ["--num_clips", "development:1"] + extra)
        assert e.value.code == 1
