"""Tests of caption_check_overlap / captionlib.io.overlap on real Clotho clips: evaluation
clips that are training clips by id, by media file and by bytes."""

import os
import shutil
from pathlib import Path

import pytest

from captionbin.caption_check_overlap import main
from captionlib.io.datadir import utt2spk_to_spk2utt, write_scp
from captionlib.io.overlap import find_overlap, same_content

SUBSET = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "clotho_subset"


def _data_dir(path: Path, clips: dict) -> Path:
    """A data dir of ``{clip id: media path}``: wav.scp and spk2utt (one caption per clip)."""
    path.mkdir(parents=True)
    write_scp(path / "wav.scp", clips)
    write_scp(path / "spk2utt", {c: ids for c, ids in utt2spk_to_spk2utt({f"{c}-1": c for c in clips}).items()})
    return path


@pytest.fixture
def dirs(tmp_path):
    dev = sorted((SUBSET / "validation").glob("*.wav"))[:6]
    ev = sorted((SUBSET / "evaluation").glob("*.wav"))[:4]
    copy = shutil.copy(dev[1], tmp_path / "copied.wav")  # the same bytes at another path
    link, hard = tmp_path / "link.wav", tmp_path / "hard.wav"
    os.symlink(dev[2], link)  # the same file through a symlink
    shutil.copy(dev[3], tmp_path / "own.wav")
    os.link(tmp_path / "own.wav", hard)  # and through a hard link
    train = _data_dir(tmp_path / "train", {**{f"dev-{i}": str(p) for i, p in enumerate(dev) if i != 3},
                                           "dev-3": str(tmp_path / "own.wav")})
    test = _data_dir(tmp_path / "test", {**{f"ev-{i}": str(p) for i, p in enumerate(ev)},
                                         "ev-copy": copy, "ev-link": str(link), "ev-hard": str(hard),
                                         "dev-0": str(dev[0])})
    return train, test


def test_clips_in_both_sets_by_id_file_and_bytes(dirs):
    train, test = dirs
    assert find_overlap(train, test) == {"id": [("dev-0", "dev-0")],
                                         "file": [("ev-hard", "dev-3"), ("ev-link", "dev-2")],
                                         "content": [("ev-copy", "dev-1")]}
    assert find_overlap(train, test, content=False)["content"] == []
    assert find_overlap(test, test)["file"] == []  # the same clip's own file is the id's finding


def test_binary_warns_naming_counts_and_examples_and_fails_when_strict(dirs, capfd):
    train, test = dirs
    main(["--train_dir", str(train), "--eval_dirs", str(test)])
    lines = [line.split(" WARNING: ")[1] for line in capfd.readouterr().err.splitlines() if " WARNING: " in line]
    assert lines == [
        f"1 of the 8 clips of {test} are clips of {train} with the same clip id (e.g. dev-0): their scores "
        "are of data the models were trained on",
        f"2 of the 8 clips of {test} are clips of {train} with the same media file under another id (e.g. "
        "ev-hard = dev-3): their scores are of data the models were trained on",
        f"1 of the 8 clips of {test} are clips of {train} with the same bytes in another file (e.g. ev-copy = "
        "dev-1): their scores are of data the models were trained on"]
    with pytest.raises(SystemExit) as e:
        main(["--train_dir", str(train), "--eval_dirs", str(test), "--strict", "true"])
    assert e.value.code == 1 and "ERROR: --strict: evaluation clips are training clips" in capfd.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--train_dir", str(train), "--eval_dirs", str(train.parent / "missing")])
    assert e.value.code == 1 and "missing/spk2utt" in capfd.readouterr().err


def test_equal_sizes_are_compared_by_bytes(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.bin", "b.bin", "c.bin"))
    head = bytes(range(256)) * 512  # the same first 128 KiB
    a.write_bytes(head + b"1" * 10)
    b.write_bytes(head + b"2" * 10)  # same size and head, other bytes
    c.write_bytes(head + b"1" * 10)
    assert same_content({"a": str(a)}, {"b": str(b), "c": str(c), "gone": str(tmp_path / "gone.bin")}) == [("c", "a")]
    c.write_bytes(head + b"3" * 10)  # digests are kept per process, not for a changed file
    os.utime(c, ns=(c.stat().st_atime_ns, c.stat().st_mtime_ns + 10 ** 9))  # (a clock's tick apart)
    assert same_content({"a": str(a)}, {"b": str(b), "c": str(c)}) == []
