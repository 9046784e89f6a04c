import csv
from pathlib import Path

import pytest

from captionlib.text.cleaner import clean_caption
from captionlib.text.tokenizer import TokenListOptionError, build_token_list, load_tokenizer, read_token_list

CSV = Path(__file__).resolve().parents[3].parent / "shared/data/clotho_captions_v2.1/clotho_captions_evaluation.csv"


def _captions():
    with open(CSV, encoding="utf-8") as f:
        return [r[f"caption_{k}"] for r in csv.DictReader(f) for k in range(1, 6)]


def test_cleaner():
    assert clean_caption("A dog barks, twice.  Loudly!") == "a dog barks twice loudly"
    assert clean_caption("The dog's bark") == "the dogs bark"


def test_word_vocabulary_min_count(tmp_path):
    caps = _captions()
    path = build_token_list(caps, tmp_path / "w1", "word", min_count=1)
    path5 = build_token_list(caps, tmp_path / "w5", "word", min_count=5)
    t1, t5 = read_token_list(path), read_token_list(path5)
    assert t1[:2] == ["<blank>", "<unk>"] and t1[-1] == "<sos/eos>"
    assert len(t5) < len(t1)
    assert t1[2] == "a"  # most frequent word first
    tok = load_tokenizer(path5)
    ids = tok.text2ids("A dog barks xyzzyq!")
    assert ids[-1] == tok.unk_id and tok.ids2text(ids[:3] + [tok.eos_id, 5]) == "a dog barks"


def test_bpe_round_trip(tmp_path):
    path = build_token_list(_captions(), tmp_path / "bpe", "bpe", nbpe=300)
    tok = load_tokenizer(path)
    assert tok.bpe_proto
    text = "a dog barks loudly while rain falls"
    assert tok.ids2text(tok.text2ids(text)) == text


def test_bad_token_list(tmp_path):
    p = tmp_path / "tokens.txt"
    p.write_text("<blank>\n<unk>\na\na\n<sos/eos>\n")
    with pytest.raises(ValueError, match=r"tokens.txt:4: duplicate"):
        read_token_list(p)


CAPS = ["A dog barks, twice.", "Rain falls on a roof.", "Heavy rain; a dog barks.", "Birds chirp while a car passes."]


def test_word_list_after_bpe_run_drops_bpe_model(tmp_path):
    build_token_list(CAPS, tmp_path, "bpe", nbpe=40)
    assert (tmp_path / "bpe.model").exists()
    path = build_token_list(CAPS, tmp_path, "word")
    assert not (tmp_path / "bpe.model").exists() and not (tmp_path / "bpe.vocab").exists()
    tok = load_tokenizer(path)
    assert tok.unk_id not in [i for c in CAPS for i in tok.text2ids(c)]


def test_load_refuses_word_list_with_stale_bpe_model(tmp_path):
    """tokens.txt of a word run beside bpe.model of a BPE run: most words would be <unk>."""
    build_token_list(CAPS, tmp_path / "bpe", "bpe", nbpe=40)
    path = build_token_list(CAPS, tmp_path / "word", "word")
    (tmp_path / "word" / "bpe.model").write_bytes((tmp_path / "bpe" / "bpe.model").read_bytes())
    with pytest.raises(ValueError, match=r"word/tokens.txt and .*word/bpe.model do not belong together"):
        load_tokenizer(path)


def test_load_refuses_bpe_list_with_another_bpe_model(tmp_path):
    build_token_list(CAPS, tmp_path / "a", "bpe", nbpe=40)
    path = build_token_list(CAPS, tmp_path / "b", "bpe", nbpe=60)
    (tmp_path / "b" / "bpe.model").write_bytes((tmp_path / "a" / "bpe.model").read_bytes())
    with pytest.raises(ValueError, match=r"do not belong together"):
        load_tokenizer(path)


def test_load_refuses_bpe_list_without_bpe_model(tmp_path):
    path = build_token_list(CAPS, tmp_path, "bpe", nbpe=40)
    (tmp_path / "bpe.model").unlink()
    with pytest.raises(ValueError, match=r"tokens.txt: \d+ tokens are BPE pieces .* no .*bpe.model"):
        load_tokenizer(path)


def test_load_refuses_corrupt_bpe_model(tmp_path):
    path = build_token_list(CAPS, tmp_path, "bpe", nbpe=40)
    (tmp_path / "bpe.model").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"bpe.model: not a sentencepiece model"):
        load_tokenizer(path)


@pytest.mark.parametrize("nbpe, match", [(0, r"^nbpe 0 is too small: it must be >= 1"),
                                         (-2, r"^nbpe -2 is too small"),
                                         (3, r"^nbpe 3 is too small: BPE needs at least \d+ pieces")])
def test_bad_nbpe(tmp_path, nbpe, match):
    with pytest.raises(TokenListOptionError, match=match) as e:
        build_token_list(CAPS, tmp_path, "bpe", nbpe=nbpe)
    assert e.value.option == "nbpe"
    assert not (tmp_path / "tokens.txt").exists()


def test_min_count_leaving_no_word(tmp_path):
    with pytest.raises(TokenListOptionError, match=r"^min_count 6 leaves no word.*\('a'\) occurs 4 times") as e:
        build_token_list(CAPS, tmp_path, "word", min_count=6)
    assert e.value.option == "min_count"
    assert not (tmp_path / "tokens.txt").exists()


def test_no_caption_left_after_cleaning(tmp_path):
    with pytest.raises(ValueError, match="no caption has a word left"):
        build_token_list(["!!!", "..."], tmp_path, "word")
