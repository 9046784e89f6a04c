"""caption_compute_cider_df: stage-4 document frequencies from a data dir."""

import pytest
import yaml

from captionbin.caption_compute_cider_df import get_parser, main
from captionlib.metrics.cider_d import DocumentFrequency
from captionlib.text.cleaner import clean_words


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _data_dir(tmp_path, with_utt2spk=True):
    d = tmp_path / "data" / "train"
    d.mkdir(parents=True)
    caps = {
        "clotho-development-00001": ["A dog barks, twice.", "The dog's bark!"],
        "clotho-development-00002": ["Rain falls on a roof.", "Heavy rain; a dog barks."],
    }
    text = [f"{c}-{k + 1} {x}" for c, xs in caps.items() for k, x in enumerate(xs)]
    _write(d / "text", text)
    if with_utt2spk:
        _write(d / "utt2spk", [f"{c}-{k + 1} {c}" for c, xs in caps.items() for k in range(len(xs))])
    return d, caps


def test_get_parser_and_required():
    assert get_parser() is not None
    with pytest.raises(SystemExit):
        main([])


def test_print_config(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--text", "t", "--output", "o", "--print_config"])
    assert e.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["text"] == "t"


@pytest.mark.parametrize("with_utt2spk", [True, False])
def test_main_writes_df(tmp_path, with_utt2spk):
    d, caps = _data_dir(tmp_path, with_utt2spk)
    out = tmp_path / "exp" / "stats" / "cider_df.npz"
    main(["--text", str(d / "text"), "--output", str(out)])
    df = DocumentFrequency.load(str(out))
    want = DocumentFrequency.from_references({c: [clean_words(x) for x in xs] for c, xs in caps.items()})
    assert df.num_docs == 2 and df.n == 4
    assert df.to_dict() == want.to_dict()
    assert df[("a", "dog", "barks")] == 2.0 and df[("dogs", "bark")] == 1.0


def test_bad_caption_id_without_utt2spk(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    _write(d / "text", ["weird_id a caption"])
    with pytest.raises(SystemExit) as e:
        main(["--text", str(d / "text"), "--output", str(tmp_path / "o.npz")])
    assert e.value.code == 1


@pytest.mark.parametrize("case, message", [
    ("bom", "text:1: starts with a UTF-8 byte-order mark"),
    ("punctuation", "caption 'clotho-development-00002-2' has no word left after cleaning"),
])
def test_references_that_would_change_every_idf_are_refused(tmp_path, capsys, case, message):
    """A byte-order mark made the first caption a clip of its own (17 documents instead of 16)
    and a punctuation-only caption counted as a reference: both changed every idf silently."""
    d, _ = _data_dir(tmp_path, with_utt2spk=False)
    raw = (d / "text").read_bytes()
    if case == "bom":
        (d / "text").write_bytes(b"\xef\xbb\xbf" + raw)
    else:
        (d / "text").write_bytes(raw.replace(b"Heavy rain; a dog barks.", b"...!"))
    with pytest.raises(SystemExit) as e:
        main(["--text", str(d / "text"), "--output", str(tmp_path / "o.npz")])
    assert e.value.code == 1 and message in capsys.readouterr().err
    assert not (tmp_path / "o.npz").exists()
