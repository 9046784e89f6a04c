"""utils/split_words.py: the words of an options string as a POSIX shell splits them, for
caption.sh's --*_args and --local_data_opts; nothing in the string is run or expanded."""

import shlex
from pathlib import Path

UTILS = Path(__file__).resolve().parents[2] / "utils"


def test_words_are_split_as_a_shell_splits_them(tool, tmp_path):
    text = "--clotho_root '/data/my clotho' --x \"a \\\"b\\\"\" c\\ d --lr=1e-4 $HOME * $(touch pwned) ''"
    r = tool(["split_words.py", text], cwd=tmp_path)
    assert r.rc == 0, r
    words = r.out.split("\0")
    assert words[-1] == "" and words[:-1] == shlex.split(text)
    assert words[:-1] == ["--clotho_root", "/data/my clotho", "--x", 'a "b"', "c d", "--lr=1e-4", "$HOME", "*",
                          "$(touch", "pwned)", ""]
    assert not (tmp_path / "pwned").exists()
    script = tmp_path / "read.sh"  # as caption.sh reads them
    script.write_text("w=()\nwhile IFS= read -r -d '' x; do w+=(\"$x\"); done < <(\"$1\" \"$2\")\n"
                      "echo \"${#w[@]} ${w[1]}\"\n")
    r = tool(["/bin/bash", script, UTILS / "split_words.py", "a 'b c'"], cwd=tmp_path)
    assert r.rc == 0 and r.out == "2 b c\n", r


def test_empty_string_no_words_and_errors(tool):
    r = tool(["split_words.py", ""])
    assert r.rc == 0 and r.out == ""
    r = tool(["split_words.py", "--lr '1"])
    assert r.rc == 2 and r.err.strip() == "No closing quotation" and r.out == ""
    r = tool(["split_words.py"])
    assert r.rc == 2 and r.err.startswith("usage: split_words.py <string>")
