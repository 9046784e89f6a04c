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


def test_atomic_writes_get_the_mode_of_open(tmp_path, monkeypatch):
    """mkstemp's 0600 made every model, checkpoint and data-dir file unreadable to the group on a
    shared cluster; the files get what open() gives (0666 less the umask), as the others do."""
    import captionlib.utils.fileio as fileio
    from captionlib.io.datadir import write_scp

    monkeypatch.setattr(fileio, "_UMASK", 0o027)  # read at import: the process's umask then
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "config.yaml", "a: 1\n")
        write_scp(tmp_path / "wav.scp", {"c1": "/a.wav"})
        with open(tmp_path / "plain", "w"):
            pass
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"config.yaml": 0o640, "wav.scp": 0o640, "plain": 0o640}
