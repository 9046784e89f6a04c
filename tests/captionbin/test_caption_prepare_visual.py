"""caption_prepare_coco / _msvd / _msrvtt: parser, --print_config, runs on the committed
fixtures, and exit 1 with the file and record named on bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from captionbin import caption_prepare_coco, caption_prepare_msrvtt, caption_prepare_msvd
from captionlib.io.datadir import read_scp, read_text

EGS = Path(__file__).resolve().parents[2] / "egs"
COCO = EGS / "mini_mscoco" / "coco_fixture"
MSVD = EGS / "mini_msvd" / "msvd_fixture"
MSRVTT = EGS / "mini_msrvtt" / "msrvtt_fixture"
BINS = [caption_prepare_coco, caption_prepare_msvd, caption_prepare_msrvtt]


@pytest.mark.parametrize("module", BINS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_get_parser_main_without_args_and_print_config(tmp_path, module):
    assert module.get_parser() is not None
    with pytest.raises(SystemExit) as e:
        module.main([])
    assert e.value.code == 2
    out = subprocess.run([sys.executable, "-m", module.__name__, "--print_config"], capture_output=True, text=True,
                         check=True).stdout
    config = yaml.safe_load(out)
    assert config["skip_bad"] is False and config["split"] is None
    if module is caption_prepare_msvd:  # the printed config loads back
        assert config["split_sizes"] == "1200,100,670"
        (tmp_path / "c.yaml").write_text(out, encoding="utf-8")
        args = module.get_parser().parse_args(["--config", str(tmp_path / "c.yaml")])
        assert args.split_sizes == "1200,100,670"


def test_coco_train_has_restval(tmp_path):
    caption_prepare_coco.main(["--dataset_json", str(COCO / "dataset_coco.json"), "--split", "train",
                               "--image_root", str(COCO / "images"), "--output_dir", str(tmp_path / "train")])
    scp = read_scp(tmp_path / "train" / "image.scp")
    assert len(scp) == 8 and len(read_text(tmp_path / "train" / "text")) == 40
    assert sum("/val2014/" in p for p in scp.values()) == 1  # the restval image
    assert all(Path(p).is_file() for p in scp.values())


def test_msvd_split_sizes_and_non_english_filtered(tmp_path):
    common = ["--corpus_csv", str(MSVD / "MSR Video Description Corpus.csv"), "--mapping",
              str(MSVD / "youtube_mapping.txt"), "--split_sizes", "5,1,2", "--video_root", str(MSVD)]
    n = {}
    for split in ("train", "val", "test"):
        caption_prepare_msvd.main(common + ["--split", split, "--output_dir", str(tmp_path / split)])
        n[split] = read_scp(tmp_path / split / "video.scp")
        assert len(read_text(tmp_path / split / "text")) == 5 * len(n[split])
    assert [len(v) for v in n.values()] == [5, 1, 2]
    assert list(n["test"]) == ["msvd-vid0007", "msvd-vid0008"]
    # the standard sizes leave only train non-empty for 8 clips (vid1-1200)
    caption_prepare_msvd.main(common[:-4] + ["--split", "train", "--output_dir", str(tmp_path / "std")])
    assert len(read_scp(tmp_path / "std" / "clip2id")) == 8
    with pytest.raises(SystemExit) as e:
        caption_prepare_msvd.main(common[:-4] + ["--split", "val", "--output_dir", str(tmp_path / "std_val")])
    assert e.value.code == 1
    with pytest.raises(SystemExit) as e:
        caption_prepare_msvd.main(common[:4] + ["--split_sizes", "5,1", "--split", "val", "--output_dir", "x"])
    assert e.value.code == 2


def test_msrvtt_all_splits(tmp_path):
    common = ["--train_val_json", str(MSRVTT / "train_val_videodatainfo.json"), "--test_json",
              str(MSRVTT / "test_videodatainfo.json"), "--video_root", str(MSRVTT)]
    sizes = {}
    for split in ("train", "val", "test"):
        caption_prepare_msrvtt.main(common + ["--split", split, "--output_dir", str(tmp_path / split)])
        sizes[split] = len(read_scp(tmp_path / split / "video.scp"))
    assert sizes == {"train": 4, "val": 2, "test": 2}
    with pytest.raises(SystemExit) as e:
        caption_prepare_msrvtt.main(common[:2] + ["--split", "test", "--output_dir", str(tmp_path / "t")])
    assert e.value.code == 2


def test_bad_input_exits_1_naming_file_and_record(tmp_path, capsys):
    data = json.loads((MSRVTT / "test_videodatainfo.json").read_text(encoding="utf-8"))
    data["sentences"][3]["video_id"] = "video999"
    bad = tmp_path / "test_videodatainfo.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    cmd = ["--test_json", str(bad), "--split", "test", "--output_dir", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as e:
        caption_prepare_msrvtt.main(cmd)
    assert e.value.code == 1
    assert f"{bad}:sentences[3]: sentence for unknown video 'video999'" in capsys.readouterr().err
    caption_prepare_msrvtt.main(cmd + ["--skip_bad", "true"])
    assert len(read_text(tmp_path / "o" / "text")) == len(data["sentences"]) - 1

    with pytest.raises(SystemExit) as e:
        caption_prepare_coco.main(["--dataset_json", str(COCO / "dataset_coco.json"), "--split", "val",
                                   "--image_root", str(tmp_path), "--output_dir", str(tmp_path / "c")])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert f"{COCO / 'dataset_coco.json'}:images[8]: media file not found: {tmp_path}/val2014/" in err


@pytest.mark.parametrize("corpus", ["coco", "msvd", "msrvtt"])
@pytest.mark.parametrize("media", [True, False], ids=["media", "import_route"])
def test_outputs_pass_validate_data_dir(tmp_path, corpus, media):
    out = tmp_path / "d"
    if corpus == "coco":
        cmd = ["--dataset_json", str(COCO / "dataset_coco.json"), "--split", "train"]
        cmd += ["--image_root", str(COCO / "images")] if media else []
        caption_prepare_coco.main(cmd + ["--output_dir", str(out)])
    elif corpus == "msvd":
        cmd = ["--corpus_csv", str(MSVD / "MSR Video Description Corpus.csv"), "--mapping",
               str(MSVD / "youtube_mapping.txt"), "--split", "test", "--split_sizes", "5,1,2"]
        cmd += ["--video_root", str(MSVD)] if media else []
        caption_prepare_msvd.main(cmd + ["--output_dir", str(out)])
    else:
        cmd = ["--train_val_json", str(MSRVTT / "train_val_videodatainfo.json"), "--split", "train"]
        cmd += ["--video_root", str(MSRVTT)] if media else []
        caption_prepare_msrvtt.main(cmd + ["--output_dir", str(out)])
    script = EGS.parent / "utils" / "validate_data_dir.sh"
    flags = ["--no-feats"] + ([] if media else ["--no-media"])
    res = subprocess.run(["bash", str(script)] + flags + [str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("name, args", [
    ("coco", ["--dataset_json", "{d}", "--split", "train"]),
    ("msrvtt", ["--train_val_json", "{d}", "--split", "train"]),
    ("msvd", ["--corpus_csv", "{d}", "--mapping", "{d}", "--split", "train"]),
    ("tgif", ["--tsv", "{d}", "--split_list", "{d}", "--split", "train"]),
    ("audiocaps", ["--csv_dir", "{d}", "--audio_dir", "{d}", "--split", "train"]),
])
def test_a_directory_given_as_an_input_file_is_one_error_line(tmp_path, capsys, name, args):
    """Every preparer but Clotho's caught only its own error class: IsADirectoryError tracebacks."""
    import importlib

    main = importlib.import_module(f"captionbin.caption_prepare_{name}").main
    d = tmp_path / "adir"
    d.mkdir()
    (d / "train.csv").mkdir()  # AudioCaps reads <csv_dir>/train.csv
    with pytest.raises(SystemExit) as e:
        main([a.format(d=d) for a in args] + ["--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "Traceback" not in err and "ERROR: " in err and str(d) in err, err
