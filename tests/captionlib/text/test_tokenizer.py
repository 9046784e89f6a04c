import csv
from pathlib import Path

import pytest

from captionlib.text.cleaner import clean_caption
from captionlib.text.tokenizer import build_token_list, load_tokenizer, read_token_list

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
