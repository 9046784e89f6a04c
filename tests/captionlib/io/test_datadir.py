"""Tests of captionlib.io.datadir: scp/text/utt2spk/spk2utt reading and sorted atomic writing."""

import os
import subprocess

import pytest

from captionlib.io.datadir import (
    feats_dim,
    load_data_dir,
    read_scp,
    read_spk2utt,
    read_text,
    read_utt2spk,
    utt2spk_to_spk2utt,
    write_scp,
)


def _write(path, text):
    path.write_bytes(text.encode("utf-8"))
    return path


def test_read_scp_value_keeps_inner_spaces(tmp_path):
    p = _write(
        tmp_path / "aud2name",
        "clip-1 wind in tree  white birch 01.wav\nclip-2\t01 A pug struggles to breathe 1_14_2008.wav  \n",
    )
    d = read_scp(p)
    assert list(d) == ["clip-1", "clip-2"]
    assert d["clip-1"] == "wind in tree  white birch 01.wav"  # double space kept
    assert d["clip-2"] == "01 A pug struggles to breathe 1_14_2008.wav"  # trailing space stripped


def test_read_scp_keeps_insertion_order(tmp_path):
    p = _write(tmp_path / "x.scp", "b 2\na 1\nc 3\n")
    assert list(read_scp(p)) == ["b", "a", "c"]


@pytest.mark.parametrize(
    "content, line, what",
    [
        ("a 1\nb 2\na 3\n", 3, "duplicate key 'a'"),
        ("a 1\nonlykey\n", 2, "expected '<key> <value>'"),
        ("a 1\n\nb 2\n", 2, "empty line"),
        (" a 1\n", 1, "starts with whitespace"),
        # a file cut short by a crash often ends in NUL bytes; a lone CR is no line break here
        ("a 1\nb x\x00\x00\n", 2, "control character U+0000 at column 4"),
        ("a 1\rb 2\n", 1, "control character U+000D at column 4"),
        ("a 1\nb \x85x\n", 2, "control character U+0085 at column 3"),
    ],
)
def test_read_scp_errors_name_file_and_line(tmp_path, content, line, what):
    p = _write(tmp_path / "wav.scp", content)
    with pytest.raises(ValueError) as e:
        read_scp(p)
    assert f"{p}:{line}:" in str(e.value)
    assert what in str(e.value)


def test_write_scp_refuses_what_read_scp_would(tmp_path):
    with pytest.raises(ValueError, match=r"entry 'c1' holds a control character U\+0000"):
        write_scp(tmp_path / "text", {"c1": "a do\x00g"})


def test_read_scp_accepts_tabs_and_crlf(tmp_path):
    assert read_scp(_write(tmp_path / "text", "a\tx\ty\r\nb 2\r\n")) == {"a": "x\ty", "b": "2"}


def test_read_scp_invalid_utf8(tmp_path):
    p = tmp_path / "text"
    p.write_bytes(b"a ok\nb \xff\xfe\n")
    with pytest.raises(ValueError, match=r"text:2: not valid UTF-8"):
        read_scp(p)


def test_read_scp_allow_empty_value(tmp_path):
    p = _write(tmp_path / "x", "a\nb 1\n")
    assert read_scp(p, allow_empty_value=True) == {"a": "", "b": "1"}


def test_write_scp_sorts_like_lc_all_c_sort(tmp_path):
    keys = ["b", "B", "a-1", "a_1", "a.1", "clotho-x-00001-1", "clotho-x-00001", "clotho-x-00010", "Z9"]
    p = tmp_path / "x.scp"
    write_scp(p, {k: f"v {k}" for k in keys})
    written = [line.split(" ", 1)[0] for line in p.read_text().splitlines()]
    shuffled = "\n".join(reversed(written)) + "\n"
    ref = subprocess.run(
        ["sort"], input=shuffled, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"}, check=True
    ).stdout.split()
    assert written == ref
    assert written[:2] == ["B", "Z9"]  # upper case before lower case in C order


def test_write_scp_round_trip_and_list_values(tmp_path):
    p = tmp_path / "d" / "spk2utt"  # parent is created
    write_scp(p, {"c2": ["c2-1", "c2-2"], "c1": ("c1-1",)})
    assert p.read_text() == "c1 c1-1\nc2 c2-1 c2-2\n"
    assert read_spk2utt(p) == {"c1": ["c1-1"], "c2": ["c2-1", "c2-2"]}


def test_write_scp_rejects_bad_entries_and_keeps_old_file(tmp_path):
    p = tmp_path / "text"
    write_scp(p, {"a": "old"})
    with pytest.raises(ValueError, match="newline"):
        write_scp(p, {"a": "new", "b": "two\nlines"})
    with pytest.raises(ValueError, match="whitespace"):
        write_scp(p, {"a b": "x"})
    assert p.read_text() == "a old\n"
    assert sorted(os.listdir(tmp_path)) == ["text"]  # no temporary files left behind


def test_read_text_and_utt2spk(tmp_path):
    t = _write(tmp_path / "text", "c-1 A dog barks, twice.\n")
    assert read_text(t) == {"c-1": "A dog barks, twice."}
    u = _write(tmp_path / "utt2spk", "c-1 c\nc-2 c extra\n")
    with pytest.raises(ValueError, match=r"utt2spk:2:"):
        read_utt2spk(u)


def test_read_spk2utt_rejects_repeated_utterance(tmp_path):
    p = _write(tmp_path / "spk2utt", "a a-1 a-2\nb a-2\n")
    with pytest.raises(ValueError, match=r"spk2utt:2: utterance 'a-2'"):
        read_spk2utt(p)


def test_utt2spk_to_spk2utt_order():
    u2s = {"x-2": "x", "x-1": "x", "w-1": "w"}
    assert utt2spk_to_spk2utt(u2s) == {"w": ["w-1"], "x": ["x-1", "x-2"]}


def test_load_data_dir(tmp_path):
    write_scp(tmp_path / "wav.scp", {"c": "/abs/a b.wav"})
    write_scp(tmp_path / "text", {"c-1": "hello there"})
    write_scp(tmp_path / "utt2spk", {"c-1": "c"})
    write_scp(tmp_path / "spk2utt", {"c": ["c-1"]})
    write_scp(tmp_path / "reco2dur", {"c": "2.000"})
    write_scp(tmp_path / "utt2num_frames", {"c": 101})
    (tmp_path / "feats_dim").write_text("64\n")
    d = load_data_dir(tmp_path)
    assert d.wav_scp == {"c": "/abs/a b.wav"}
    assert d.spk2utt == {"c": ["c-1"]}
    assert d.reco2dur == {"c": 2.0}
    assert d.utt2num_frames == {"c": 101}
    assert d.extra["feats_dim"] == "64"
    assert d.aud2name is None
    _write(tmp_path / "reco2dur", "c two\n")
    with pytest.raises(ValueError, match=r"reco2dur:1: not a number"):
        load_data_dir(tmp_path)
    with pytest.raises(NotADirectoryError):
        load_data_dir(tmp_path / "nope")


def test_feats_dim(tmp_path):
    with pytest.raises(FileNotFoundError, match="feats_dim: missing"):
        feats_dim(tmp_path)
    (tmp_path / "feats_dim").write_text("64\n")
    assert feats_dim(tmp_path) == 64 and feats_dim(str(tmp_path)) == 64
