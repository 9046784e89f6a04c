"""captionlib.corpora.coco on the committed mini COCO fixture (Karpathy format) and on malformed JSON."""

import json
import logging
import os
from pathlib import Path

import pytest

from captionlib.corpora.coco import CocoPrepError, clip_id, prepare_coco
from captionlib.io.datadir import read_scp, read_spk2utt, read_text, read_utt2spk

FIXTURE = Path(__file__).resolve().parents[3] / "egs" / "mini_mscoco" / "coco_fixture"
DATASET = FIXTURE / "dataset_coco.json"
FILES = ("text", "utt2spk", "spk2utt", "clip2id", "image.scp")


def _c_sorted(path):
    keys = [line.split(" ", 1)[0].encode() for line in path.read_text(encoding="utf-8").splitlines()]
    return keys == sorted(keys)


def _images():
    return json.loads(DATASET.read_text(encoding="utf-8"))["images"]


@pytest.mark.parametrize("split,karpathy", [("train", {"train", "restval"}), ("val", {"val"}), ("test", {"test"})])
def test_fixture_splits(tmp_path, split, karpathy):
    out = tmp_path / split
    stats = prepare_coco(DATASET, split, out, image_root=FIXTURE / "images")
    expected = [im for im in _images() if im["split"] in karpathy]
    assert stats == {"clips": len(expected), "captions": 5 * len(expected), "skipped": 0}
    assert len(expected) == {"train": 8, "val": 2, "test": 2}[split]
    for f in FILES:
        assert _c_sorted(out / f), f
    text, u2s, s2u = read_text(out / "text"), read_utt2spk(out / "utt2spk"), read_spk2utt(out / "spk2utt")
    clip2id, scp = read_scp(out / "clip2id"), read_scp(out / "image.scp")
    assert set(clip2id) == set(scp) == set(s2u) == set(u2s.values())
    for im in expected:
        cid = clip_id(im["cocoid"])
        assert cid == f"coco-{im['cocoid']:012d}" and clip2id[cid] == str(im["cocoid"])
        assert s2u[cid] == [f"{cid}-{k:02d}" for k in range(1, 6)]
        assert [text[u] for u in s2u[cid]] == [s["raw"] for s in im["sentences"]]
        assert os.path.isabs(scp[cid]) and os.path.isfile(scp[cid])
        assert scp[cid] == str(FIXTURE / "images" / im["filepath"] / im["filename"])
    if split == "train":  # restval (from val2014/) is part of the 113k training set
        assert "coco-000000000085" in clip2id and "/val2014/" in scp["coco-000000000085"]


def test_without_image_root_no_scp_and_stale_scp_removed(tmp_path):
    out = tmp_path / "test"
    prepare_coco(DATASET, "test", out, image_root=FIXTURE / "images")
    assert (out / "image.scp").is_file()
    prepare_coco(DATASET, "test", out)
    assert sorted(os.listdir(out)) == ["clip2id", "spk2utt", "text", "utt2spk"]


def _write(tmp_path, images):
    p = tmp_path / "dataset_coco.json"
    p.write_text(json.dumps({"images": images, "dataset": "coco"}), encoding="utf-8")
    return p


def _image(cocoid, split="test", raws=("A cat sits.",) * 5, folder="val2014"):
    return {"filepath": folder, "filename": f"COCO_{folder}_{cocoid:012d}.jpg", "imgid": cocoid, "split": split,
            "cocoid": cocoid, "sentids": [], "sentences": [{"raw": r, "tokens": [], "sentid": 0} for r in raws]}


@pytest.mark.parametrize("case,fragment", [
    ("missing_key", "images[1]: missing key(s) 'cocoid'"),
    ("bad_split", "images[1]: unknown split 'dev'"),
    ("dup_cocoid", "images[1]: cocoid 7 repeated (first in images[0])"),
    ("no_words", "images[1].sentences[2]: caption has no words"),
    ("no_raw", "images[1].sentences[0]: missing or non-string 'raw'"),
    ("missing_image", "images[1]: media file not found"),
    ("empty_image", "images[1]: empty media file (0 bytes)"),
    ("path_in_filename", "images[1]: filename must be a file or folder name (no path), got '../../../etc/passwd'"),
    ("dotdot_filepath", "images[1]: filepath must be a file or folder name (no path), got '..'"),
    ("newline_in_filename", "images[1]: filename 'a\\nb.jpg': control character U+000A at column 2"),
])
def test_bad_records_name_file_and_record(tmp_path, caplog, case, fragment):
    good, other = _image(7), _image(8)
    if case == "missing_key":
        del other["cocoid"]
    elif case == "bad_split":
        other["split"] = "dev"
    elif case == "dup_cocoid":
        other["cocoid"] = 7
    elif case == "no_words":
        other["sentences"][2]["raw"] = " ... !"
    elif case == "no_raw":
        del other["sentences"][0]["raw"]
    root = tmp_path / "images" / "val2014"
    root.mkdir(parents=True)
    for im in (good, other):
        if "cocoid" in im:
            (root / im["filename"]).write_bytes(b"\xff\xd8jpeg")
    if case == "missing_image":
        (root / other["filename"]).unlink()
    elif case == "empty_image":
        (root / other["filename"]).write_bytes(b"")
    elif case == "path_in_filename":  # it left the image root
        other["filename"] = "../../../etc/passwd"
    elif case == "dotdot_filepath":
        other["filepath"] = ".."
    elif case == "newline_in_filename":  # failed after text and utt2spk were written
        other["filename"] = "a\nb.jpg"
    path = _write(tmp_path, [good, other])
    with pytest.raises(CocoPrepError) as e:
        prepare_coco(path, "test", tmp_path / "out", image_root=tmp_path / "images")
    assert str(e.value).startswith(str(path)) and fragment in str(e.value)
    # --skip_bad: logged and left out, the good image stays
    with caplog.at_level(logging.WARNING):
        stats = prepare_coco(path, "test", tmp_path / "out", image_root=tmp_path / "images", skip_bad=True)
    assert fragment in caplog.text
    assert stats["skipped"] == 1
    clips = read_scp(tmp_path / "out" / "clip2id")
    assert "coco-000000000007" in clips
    assert stats["clips"] == (2 if case in ("no_words", "no_raw") else 1)  # a bad caption drops only itself


def test_fewer_than_five_warns_and_more_are_kept(tmp_path, caplog):
    path = _write(tmp_path, [_image(1, raws=["A dog.", "A  dog\n runs."]), _image(2, raws=["A cat."] * 7)])
    with caplog.at_level(logging.WARNING):
        stats = prepare_coco(path, "test", tmp_path / "out")
    assert "images[0]: image 1 has 2 reference(s), fewer than 5" in caplog.text
    assert stats == {"clips": 2, "captions": 9, "skipped": 0}
    assert read_text(tmp_path / "out" / "text")["coco-000000000001-02"] == "A dog runs."


def test_fatal_errors(tmp_path):
    with pytest.raises(CocoPrepError, match="unknown split 'restval'"):
        prepare_coco(DATASET, "restval", tmp_path / "o")
    with pytest.raises(CocoPrepError, match="annotation file not found"):
        prepare_coco(tmp_path / "none.json", "val", tmp_path / "o")
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [\n{"a": 1},\n]}', encoding="utf-8")
    with pytest.raises(CocoPrepError, match=f"{bad}:3: invalid JSON"):
        prepare_coco(bad, "val", tmp_path / "o")
    with pytest.raises(CocoPrepError, match="missing top-level key 'images'"):
        prepare_coco(_top(tmp_path), "val", tmp_path / "o")
    with pytest.raises(CocoPrepError, match="no usable clip"):
        prepare_coco(_write(tmp_path, [_image(1, split="train")]), "val", tmp_path / "o")


def _top(tmp_path):
    p = tmp_path / "top.json"
    p.write_text('{"dataset": "coco"}', encoding="utf-8")
    return p
