"""captionlib.corpora.msrvtt on the committed mini MSR-VTT fixture and on malformed JSON records."""

import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from captionlib.corpora.msrvtt import MsrvttPrepError, clip_id, prepare_msrvtt
from captionlib.io.datadir import read_scp, read_spk2utt, read_text, read_utt2spk

FIXTURE = Path(__file__).resolve().parents[3] / "egs" / "mini_msrvtt" / "msrvtt_fixture"
TRAIN_VAL = FIXTURE / "train_val_videodatainfo.json"
TEST = FIXTURE / "test_videodatainfo.json"


def _c_sorted(path):
    keys = [line.split(" ", 1)[0].encode() for line in path.read_text(encoding="utf-8").splitlines()]
    return keys == sorted(keys)


@pytest.mark.parametrize("split,official,numbers", [("train", "train", [0, 1, 2, 3]), ("val", "validate", [4, 5]),
                                                     ("test", "test", [6, 7])])
def test_fixture_splits(tmp_path, split, official, numbers):
    out = tmp_path / split
    stats = prepare_msrvtt(split, out, train_val_json=TRAIN_VAL, test_json=TEST, video_root=FIXTURE)
    data = json.loads((TEST if split == "test" else TRAIN_VAL).read_text(encoding="utf-8"))
    assert sorted(int(v["video_id"][5:]) for v in data["videos"] if v["split"] == official) == numbers
    text, s2u, u2s = read_text(out / "text"), read_spk2utt(out / "spk2utt"), read_utt2spk(out / "utt2spk")
    clip2id, scp = read_scp(out / "clip2id"), read_scp(out / "video.scp")
    assert list(clip2id) == [clip_id(n) for n in numbers] == [f"msrvtt-video{n:05d}" for n in numbers]
    assert set(scp) == set(s2u) == set(u2s.values()) == set(clip2id)
    for f in ("text", "utt2spk", "spk2utt", "clip2id", "video.scp"):
        assert _c_sorted(out / f), f
    for n in numbers:
        cid = clip_id(n)
        assert clip2id[cid] == f"video{n}"
        refs = [" ".join(s["caption"].split()) for s in sorted(data["sentences"], key=lambda s: s["sen_id"])
                if s["video_id"] == f"video{n}"]
        assert len(refs) >= 8
        assert [text[u] for u in s2u[cid]] == refs
        assert s2u[cid] == [f"{cid}-{k:02d}" for k in range(1, len(refs) + 1)]
        sub = "TestVideo" if split == "test" else "TrainValVideo"
        assert os.path.isabs(scp[cid]) and scp[cid] == str(FIXTURE / sub / f"video{n}.mp4")
        assert os.path.isfile(scp[cid])
    assert stats["clips"] == len(numbers) and stats["captions"] == len(text) and stats["skipped"] == 0


def test_flat_video_root_and_no_root(tmp_path):
    flat = tmp_path / "all"
    flat.mkdir()
    for p in FIXTURE.glob("*/*.mp4"):
        shutil.copy(p, flat / p.name)
    prepare_msrvtt("test", tmp_path / "o", test_json=TEST, video_root=flat)
    assert read_scp(tmp_path / "o" / "video.scp") == {clip_id(n): str(flat / f"video{n}.mp4") for n in (6, 7)}
    prepare_msrvtt("val", tmp_path / "o", train_val_json=TRAIN_VAL)
    assert not (tmp_path / "o" / "video.scp").exists()
    assert read_scp(tmp_path / "o" / "clip2id") == {clip_id(4): "video4", clip_id(5): "video5"}


def _json(tmp_path, videos, sentences):
    p = tmp_path / "train_val_videodatainfo.json"
    p.write_text(json.dumps({"info": {}, "videos": videos, "sentences": sentences}), encoding="utf-8")
    return p


def _video(n, split="train"):
    return {"category": 1, "url": "u", "video_id": f"video{n}", "start time": 0.0, "end time": 2.0, "split": split,
            "id": n}


def _sents(n, first, count=3):
    return [{"caption": f"a thing happens {k}", "video_id": f"video{n}", "sen_id": first + k} for k in range(count)]


@pytest.mark.parametrize("case,fragment", [
    ("video_missing_key", "videos[1]: missing key(s) 'split'"),
    ("video_bad_id", "videos[1]: video_id must be 'video<N>', got 'clip9'"),
    ("video_repeated", "videos[1]: video_id video1 repeated (first in videos[0])"),
    ("sentence_missing_key", "sentences[4]: missing key(s) 'caption'"),
    ("sentence_unknown_video", "sentences[4]: sentence for unknown video 'video42'"),
    ("sentence_repeated_id", "sentences[4]: sen_id 0 repeated (first in sentences[0])"),
    ("sentence_no_words", "sentences[4]: caption has no words"),
    ("missing_video_file", "videos[1]: media file not found"),
    ("video_of_the_other_file", "videos[1]: split 'test' in the file of the train/validate videos"),
])
def test_bad_records_name_file_and_index(tmp_path, caplog, case, fragment):
    videos = [_video(1), _video(2)]
    sentences = _sents(1, 0) + _sents(2, 3)
    if case == "video_missing_key":
        del videos[1]["split"]
    elif case == "video_bad_id":
        videos[1]["video_id"] = "clip9"
    elif case == "video_repeated":
        videos[1]["video_id"] = "video1"
    elif case == "sentence_missing_key":
        del sentences[4]["caption"]
    elif case == "sentence_unknown_video":
        sentences[4]["video_id"] = "video42"
    elif case == "sentence_repeated_id":
        sentences[4]["sen_id"] = 0
    elif case == "video_of_the_other_file":  # was in no split, no line logged
        videos[1]["split"] = "test"
    elif case == "sentence_no_words":
        sentences[4]["caption"] = " - "
    root = tmp_path / "videos"
    (root / "TrainValVideo").mkdir(parents=True)
    (root / "TrainValVideo" / "video1.mp4").write_bytes(b"mp4")
    if case != "missing_video_file":
        (root / "TrainValVideo" / "video2.mp4").write_bytes(b"mp4")
    path = _json(tmp_path, videos, sentences)
    with pytest.raises(MsrvttPrepError) as e:
        prepare_msrvtt("train", tmp_path / "o", train_val_json=path, video_root=root)
    assert str(e.value).startswith(f"{path}:") and fragment in str(e.value)
    with caplog.at_level(logging.WARNING):
        stats = prepare_msrvtt("train", tmp_path / "o", train_val_json=path, video_root=root, skip_bad=True)
    assert fragment in caplog.text and stats["skipped"] >= 1
    assert "msrvtt-video00001" in read_scp(tmp_path / "o" / "clip2id")


def test_video_without_captions_and_empty_file(tmp_path):
    root = tmp_path / "v"
    root.mkdir()
    (root / "video1.mp4").write_bytes(b"")
    (root / "video2.mp4").write_bytes(b"mp4")
    path = _json(tmp_path, [_video(1), _video(2), _video(3)], _sents(1, 0) + _sents(2, 3))
    with pytest.raises(MsrvttPrepError, match=r"videos\[0\]: empty media file \(0 bytes\)"):
        prepare_msrvtt("train", tmp_path / "o", train_val_json=path, video_root=root)
    with pytest.raises(MsrvttPrepError, match=r"videos\[2\]: video video3 has no caption"):
        prepare_msrvtt("train", tmp_path / "o", train_val_json=path)


def test_fatal_errors(tmp_path):
    with pytest.raises(MsrvttPrepError, match="needs test_json"):
        prepare_msrvtt("test", tmp_path / "o", train_val_json=TRAIN_VAL)
    with pytest.raises(MsrvttPrepError, match="unknown split 'validate'"):
        prepare_msrvtt("validate", tmp_path / "o", train_val_json=TRAIN_VAL)
    p = tmp_path / "t.json"
    p.write_text('{"videos": []}', encoding="utf-8")
    with pytest.raises(MsrvttPrepError, match=f"{p}: missing top-level key 'sentences'"):
        prepare_msrvtt("test", tmp_path / "o", test_json=p)
    with pytest.raises(MsrvttPrepError, match="videos.0.: split 'train' in the file of the test videos"):  # swapped
        prepare_msrvtt("test", tmp_path / "o", test_json=TRAIN_VAL)
