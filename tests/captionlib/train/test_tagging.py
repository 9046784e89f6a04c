"""Audio tagging pretraining (issue 26 item 6): labels from a CSV or from caption keywords,
multi-label BCE with validation mAP, and the best epoch written in the authors' layout, which
XE's strict loader (``encoder_conf.pretrained``) then loads."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from captionlib.data.datasets import AudioRefsDataset
from captionlib.models.panns import FRONT_END_KEYS, Cnn10Encoder, load_pretrained
from captionlib.models.pretrained_load import CheckpointMismatchError
from captionlib.train.options import TaggingOptions
from captionlib.train.tagging import (
    caption_keywords,
    clip_labels,
    read_labels_csv,
    tagging_validation,
    train_tagging,
)
from dump_dirs import tiny_dump_dir

REPO = Path(__file__).resolve().parents[3]
FEATS_PANNS = yaml.safe_load((REPO / "egs" / "clotho" / "conf" / "feats_panns.yaml").read_text())
LABELS = 'file_name,sound_id,keywords\nc0.wav,1,dog;bark\nc1.wav,2,rain\nc2.wav,3, bird ; \nc3.wav,4,"rain;dog"\n'


def test_read_labels_csv_and_its_errors(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text(LABELS)
    assert read_labels_csv(str(path)) == {"c0.wav": ["dog", "bark"], "c1.wav": ["rain"], "c2.wav": ["bird"],
                                          "c3.wav": ["rain", "dog"]}
    with pytest.raises(ValueError, match=r"meta\.csv:1: no 'labels' column"):
        read_labels_csv(str(path), label_column="labels")
    path.write_text(LABELS + "c1.wav,5,cat\n")
    with pytest.raises(ValueError, match=r"meta\.csv:6: file_name 'c1.wav' given twice"):
        read_labels_csv(str(path))
    with pytest.raises(ValueError, match=r"nothing\.csv: labels CSV not found"):
        read_labels_csv(str(tmp_path / "nothing.csv"))


def test_clip_labels_by_file_name_names_the_clips_without_a_row(tmp_path):
    data = tiny_dump_dir(tmp_path / "d")
    rows = {"c0.wav": ["dog"], "c1.wav": [], "c2.wav": ["bird"]}
    assert clip_labels(str(data), ["c0", "c2"], rows, "meta.csv") == {"c0": ["dog"], "c2": ["bird"]}
    with pytest.raises(ValueError, match=r"meta\.csv: no labels for 1 of the 4 clips .*'c3\.wav'"):
        clip_labels(str(data), ["c0", "c1", "c2", "c3"], rows, "meta.csv")


def test_caption_keywords_need_two_captions_and_skip_stop_words():
    refs = {"a": [["a", "dog", "barks"], ["the", "dog", "barks", "loudly"]], "b": [["rain", "falls"], ["rain"]],
            "c": [["a", "dog", "and", "rain"], ["dog", "in", "rain"]]}
    classes, labels = caption_keywords(refs, 2)
    assert classes == ["dog", "rain"]  # 2 clips each; barks: 1 clip; a, the, in, and: stop words
    assert labels == {"a": ["dog"], "b": ["rain"], "c": ["dog", "rain"]}
    assert caption_keywords(refs, None)[0] == ["dog", "rain", "barks"]


def test_validation_map_is_one_for_a_perfect_ranking_and_lower_otherwise(tmp_path):
    data = AudioRefsDataset(tiny_dump_dir(tmp_path / "d"))
    targets = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 0]], dtype=np.float32)

    class Fixed(torch.nn.Module):
        def __init__(self, scores):
            super().__init__()
            self.scores = {c: torch.tensor(s) for c, s in zip(data.clips, scores)}

        def forward(self, feats, lens):  # clips are told apart by their lengths (40 + 4 i frames)
            return torch.stack([self.scores[f"c{(int(n) - 40) // 4}"] for n in lens])

    validate = tagging_validation(data, targets, torch.device("cpu"), batch_size=3)
    perfect = validate(Fixed(targets * 4 - 2))
    assert perfect["map"] == 1.0 and perfect["classes_scored"] == 2.0
    # class 0 (positives c0, c2) ranked c1, c2, c3, c0: AP (1/2 + 2/4) / 2; class 1 perfect; class 2 unscored
    scores = np.array([[0.1, 0.1, 0.5], [0.9, 0.9, 0.5], [0.8, 0.8, 0.5], [0.2, 0.2, 0.5]], dtype=np.float32)
    assert validate(Fixed(scores))["map"] == pytest.approx((0.5 + 1.0) / 2)


def _opts(tmp_path, data, **kw):
    labels = tmp_path / "meta.csv"
    labels.write_text(LABELS)
    base = dict(train_data_dir=str(data), valid_data_dir=str(data), output_dir=str(tmp_path / "exp"),
                train_labels=str(labels), valid_labels=str(labels), encoder="cnn10", batch_size=2, max_epoch=2,
                lr=1e-3, keep_nbest=1)
    base.update(kw)
    return TaggingOptions(**base)


def test_the_checkpoint_is_in_the_authors_layout_and_loads_strictly(tmp_path, caplog):
    data = tiny_dump_dir(tmp_path / "d", FEATS_PANNS)
    opts = _opts(tmp_path, data)
    with caplog.at_level(logging.INFO):
        path = train_tagging(opts)
    out = Path(opts.output_dir)
    assert path == str(out / "pretrained.pth")
    assert (out / "classes.txt").read_text().split() == ["bark", "bird", "dog", "rain"]
    history = [h["valid_map"] for h in json.loads((out / "history.json").read_text())]
    assert len(history) == 2 and all(0 < m <= 1 for m in history)
    obj = torch.load(path, weights_only=True)
    assert sorted(obj) == ["iteration", "model"] and obj["iteration"] in (2, 4)
    encoder = Cnn10Encoder(classes_num=4)
    assert set(obj["model"]) == set(encoder.state_dict()) | set(FRONT_END_KEYS)
    best = torch.load(out / "valid.map.best.pth", weights_only=True)["model"]
    load_pretrained(encoder, path, FEATS_PANNS)
    assert all(torch.equal(v, best[f"encoder.{k}"]) for k, v in encoder.state_dict().items())
    with pytest.raises(CheckpointMismatchError, match=r"fc_audioset\.weight: checkpoint \(4, 512\), expected "
                                                      r"\(527, 512\).*set encoder_conf\.classes_num: 4"):
        load_pretrained(Cnn10Encoder(), path, FEATS_PANNS)
    before = out.joinpath("pretrained.pth").stat().st_mtime_ns
    assert train_tagging(opts) == path  # done: resumes at the end, rewrites the same weights
    assert torch.equal(torch.load(path, weights_only=True)["model"]["fc1.weight"], obj["model"]["fc1.weight"])
    assert out.joinpath("pretrained.pth").stat().st_mtime_ns >= before


def test_keywords_from_captions_and_bad_options(tmp_path):
    data = tiny_dump_dir(tmp_path / "d", FEATS_PANNS)
    opts = _opts(tmp_path, data, train_labels=None, valid_labels=None, keywords_from_captions=10,
                 keywords_min_captions=1, dry_run=True)
    train_tagging(opts)
    assert (Path(opts.output_dir) / "classes.txt").read_text().split() == ["dog", "rain", "barks", "bird", "falls",
                                                                            "sings"]
    with pytest.raises(ValueError, match="give train_labels and valid_labels"):
        train_tagging(_opts(tmp_path, data, valid_labels=None))
    with pytest.raises(FileNotFoundError, match="feats_config.yaml not found"):
        train_tagging(_opts(tmp_path, tiny_dump_dir(tmp_path / "no_config")))


def test_convnext_is_pretrained_and_loaded_as_its_authors_lay_it_out(tmp_path):
    from captionlib.models.convnext import ConvNeXtEncoder
    from captionlib.models.convnext import load_pretrained as load_convnext

    data = tiny_dump_dir(tmp_path / "d", FEATS_PANNS)
    path = train_tagging(_opts(tmp_path, data, encoder="convnext", max_epoch=1))
    encoder = ConvNeXtEncoder(64, classes_num=4)
    load_convnext(encoder, path, FEATS_PANNS)
    best = torch.load(Path(path).parent / "valid.map.best.pth", weights_only=True)["model"]
    assert all(torch.equal(v, best[f"encoder.{k}"]) for k, v in encoder.state_dict().items())


def test_resuming_from_a_code_running_latest_pth_is_refused_in_one_line(tmp_path, capsys):
    """As the other loaders: the refusal (naming the file, what it holds and the converter), exit 1,
    no traceback, and the crafted file's code never runs."""
    from captionbin.caption_pretrain_tagging import main
    from bad_inputs import write_code_running_torch_file

    data = tiny_dump_dir(tmp_path / "d", FEATS_PANNS)
    opts = _opts(tmp_path, data, max_epoch=1)
    marker = tmp_path / "ran"
    (tmp_path / "exp").mkdir()
    latest = write_code_running_torch_file(tmp_path / "exp" / "latest.pth", marker, key="rng")
    with pytest.raises(SystemExit) as e:
        main(["--train_data_dir", str(data), "--valid_data_dir", str(data), "--output_dir", opts.output_dir,
              "--train_labels", opts.train_labels, "--valid_labels", opts.valid_labels, "--encoder", "cnn10",
              "--batch_size", "2", "--max_epoch", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "Traceback" not in err
    line = next(t for t in err.splitlines() if "ERROR" in t)
    assert f"{latest}: refused to load" in line and "pathlib.Path" in line and "caption_convert_model" in line, line
    assert not marker.exists() and not (tmp_path / "exp" / "1epoch.pth").exists()
