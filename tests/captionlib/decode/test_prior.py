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
