"""captionlib.utils.fileio: check_writable refuses, before any long work, outputs that cannot be
written (a binary used to do all its work, then lose it in a traceback)."""

import os

import pytest

from captionlib.utils.fileio import atomic_write_text, check_writable


def test_check_writable(tmp_path):
    check_writable(tmp_path / "new" / "dir" / "out.txt")  # missing parents are made when written
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_dir").mkdir()
    for path, message in [(tmp_path / "a_dir", "is a directory"),
                          (tmp_path / "a_file" / "out.txt", "a_file is not a directory"),
                          (tmp_path / "a_file" / "sub" / "out.txt", "a_file is not a directory")]:
        with pytest.raises(ValueError, match=message):
            check_writable(path)
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "locked").mkdir(mode=0o500)
        with pytest.raises(ValueError, match="no write permission"):
            check_writable(tmp_path / "locked" / "out.txt")


def test_text_with_a_file_name_that_is_not_utf8(tmp_path):
    """A file name of undecodable bytes (Python's surrogate escapes) is written back as its bytes."""
    name = os.fsdecode(b"caf\xe9.wav")
    atomic_write_text(tmp_path / "out.tsv", f"{name}\ta caption\n")
    assert (tmp_path / "out.tsv").read_bytes() == b"caf\xe9.wav\ta caption\n"
