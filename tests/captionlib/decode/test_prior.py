"""The corpus prior (captionlib.decode.prior, captionbin.caption_corpus_prior)."""

import pytest

from captionbin.caption_corpus_prior import main
from captionlib.decode.prior import most_frequent_caption


def test_most_frequent_caption_after_cleaning_ties_in_c_order():
    assert most_frequent_caption(["A dog barks.", "a dog barks", "A cat meows"]) == "a dog barks"
    assert most_frequent_caption(["b c", "a c"]) == "a c"
    with pytest.raises(ValueError):
        most_frequent_caption(["...", ""])


def test_binary_writes_one_caption_per_clip(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "text").write_text("t1-1 A bird sings.\nt1-2 a bird sings\nt2-1 A dog barks\n")
    test = tmp_path / "test"
    test.mkdir()
    (test / "spk2utt").write_text("c1 c1-1 c1-2\nc2 c2-1\n")
    main(["--train_text", str(tmp_path / "train" / "text"), "--data_dir", str(test),
          "--output_dir", str(tmp_path / "out")])
    assert (tmp_path / "out" / "text").read_text() == "c1 a bird sings\nc2 a bird sings\n"
    with pytest.raises(SystemExit):
        main(["--train_text", str(tmp_path / "nope"), "--data_dir", str(test), "--output_dir", str(tmp_path / "o")])


def test_bad_inputs_are_one_error_line_naming_them(tmp_path, capsys):
    """A directory as --train_text and an --output_dir that is a file ended in tracebacks; a text
    of only empty captions did not name the file."""
    test = tmp_path / "test"
    test.mkdir()
    (test / "spk2utt").write_text("c1 c1-1\n")
    (tmp_path / "empty_text").write_text("t1-1 ...\n")
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "text").write_text("t1-1 a dog barks\n")
    for train_text, out, expected in [(tmp_path, tmp_path / "o", str(tmp_path)),
                                      (tmp_path / "text", tmp_path / "afile", "afile"),
                                      (tmp_path / "empty_text", tmp_path / "o", "empty_text: no non-empty caption")]:
        with pytest.raises(SystemExit) as e:
            main(["--train_text", str(train_text), "--data_dir", str(test), "--output_dir", str(out)])
        err = capsys.readouterr().err
        assert e.value.code == 1 and "Traceback" not in err and expected in err, err
