"""caption_tokenize: token lists from a data dir's text; bad input is one error line, no traceback."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from captionbin.caption_tokenize import get_parser, main
from captionlib.text.tokenizer import load_tokenizer, read_token_list

REPO = Path(__file__).resolve().parents[2]
CAPTIONS = [
    "A dog barks, twice.",
    "The dog's bark!",
    "Rain falls on a roof.",
    "Heavy rain; a dog barks.",
    "A train slowly gains momentum before moving past the platform.",
    "Birds chirp while a car passes by.",
]


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _text(tmp_path):
    return _write(tmp_path / "text", [f"clip-{k // 2 + 1}-{k % 2 + 1} {c}" for k, c in enumerate(CAPTIONS)])


def _run(cmd):
    """main(cmd) that must fail; returns its exit code."""
    with pytest.raises(SystemExit) as e:
        main(cmd)
    return e.value.code


def _error_lines(capsys):
    """The ERROR lines the binary logged (its logging is set up by setup_logging on stderr)."""
    return [line for line in capsys.readouterr().err.splitlines() if " ERROR: " in line]


def test_get_parser_and_required():
    assert get_parser() is not None
    assert _run([]) == 2


def test_print_config_alone(capsys):
    assert _run(["--print_config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["token_type"] == "word"


@pytest.mark.parametrize("token_type", ["word", "bpe"])
def test_main_writes_token_list(tmp_path, token_type):
    out = tmp_path / "tl"
    main(["--text", str(_text(tmp_path)), "--token_type", token_type, "--nbpe", "40", "--output_dir", str(out)])
    tokens = read_token_list(out / "tokens.txt")
    assert tokens[:2] == ["<blank>", "<unk>"] and tokens[-1] == "<sos/eos>"
    assert (out / "bpe.model").exists() == (token_type == "bpe")
    tok = load_tokenizer(out / "tokens.txt")
    assert tok.ids2text(tok.text2ids("A dog barks.")) == "a dog barks"


def test_word_run_removes_stale_bpe_model(tmp_path, capsys):
    """A word run into a dir of an earlier BPE run must not leave bpe.model: the loader would
    read the word list as BPE pieces and map most words to <unk>."""
    text, out = _text(tmp_path), tmp_path / "tl"
    main(["--text", str(text), "--token_type", "bpe", "--nbpe", "40", "--output_dir", str(out)])
    assert (out / "bpe.model").exists()
    capsys.readouterr()
    main(["--text", str(text), "--token_type", "word", "--output_dir", str(out)])
    assert not (out / "bpe.model").exists() and not (out / "bpe.vocab").exists()
    assert f"WARNING: removed {out / 'bpe.model'} of an earlier BPE run" in capsys.readouterr().err
    tok = load_tokenizer(out / "tokens.txt")
    assert tok.bpe_proto is None
    ids = [i for c in CAPTIONS for i in tok.text2ids(c)]
    assert tok.unk_id not in ids


def _bad_inputs(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "adir").mkdir()
    (d / "nonutf").write_bytes(b"a-1 a dog\nb-1 a \xff cat\n")
    (d / "empty").write_bytes(b"")
    return {
        "id_without_words": (_write(d / "noword", ["a-1 a dog", "b-1"]), ":2:"),
        "blank_line": (_write(d / "blank", ["a-1 a dog", "", "b-1 a cat"]), ":2:"),
        "duplicate_id": (_write(d / "dup", ["a-1 a dog", "a-1 a cat"]), ":2:"),
        "non_utf8": (d / "nonutf", ":2:"),
        "empty_file": (d / "empty", "empty"),
        "missing_file": (d / "missing", "No such file"),
        "directory": (d / "adir", "directory"),
        "only_punctuation": (_write(d / "punct", ["a-1 !!!", "b-1 ..."]), "no caption"),
    }


@pytest.mark.parametrize("case", ["id_without_words", "blank_line", "duplicate_id", "non_utf8", "empty_file",
                                  "missing_file", "directory", "only_punctuation"])
def test_bad_text_is_one_error_line(tmp_path, capsys, case):
    path, what = _bad_inputs(tmp_path)[case]
    assert _run(["--text", str(path), "--output_dir", str(tmp_path / "tl")]) == 1
    errors = _error_lines(capsys)
    assert len(errors) == 1 and str(path) in errors[0] and what in errors[0], errors
    assert not (tmp_path / "tl" / "tokens.txt").exists()


@pytest.mark.parametrize("nbpe, what", [("0", ">= 1"), ("-3", ">= 1"), ("3", "needs at least")])
def test_bad_nbpe_is_a_usage_error(tmp_path, capsys, nbpe, what):
    cmd = ["--text", str(_text(tmp_path)), "--token_type", "bpe", "--nbpe", nbpe, "--output_dir", str(tmp_path / "tl")]
    assert _run(cmd) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--nbpe {nbpe}" in err and what in err, err
    assert not (tmp_path / "tl" / "tokens.txt").exists()


def test_min_count_leaving_no_word_is_a_usage_error(tmp_path, capsys):
    cmd = ["--text", str(_text(tmp_path)), "--min_count", "1000", "--output_dir", str(tmp_path / "tl")]
    assert _run(cmd) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--min_count 1000" in err and "occurs 5 times" in err, err  # 'a' is the most frequent word
    assert not (tmp_path / "tl" / "tokens.txt").exists()


def test_output_dir_that_is_a_file(tmp_path, capsys):
    text = _text(tmp_path)
    assert _run(["--text", str(text), "--output_dir", str(text)]) == 1
    errors = _error_lines(capsys)
    assert len(errors) == 1 and "--output_dir" in errors[0]


def test_no_traceback_from_the_command_line(tmp_path):
    """As a user runs it: stderr has the one error line and no Python traceback."""
    bad = _write(tmp_path / "text", ["a-1 a dog", "a-1 a cat"])
    p = subprocess.run([sys.executable, "-m", "captionbin.caption_tokenize", "--text", str(bad),
                        "--output_dir", str(tmp_path / "tl")], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and f"{bad}:2: duplicate key 'a-1'" in p.stderr
