"""captionlib.corpora.tgif on the committed mini TGIF fixture (egs/mini_tgif/tgif_fixture) and on
malformed sentence files, split lists and GIF folders."""

import logging
import shutil
from pathlib import Path

import pytest

from captionlib.corpora.tgif import TgifPrepError, clip_id, gif_name, prepare_tgif
from captionlib.io.datadir import read_scp, read_spk2utt, read_text, read_utt2spk
from gif_media import write_gif

FIXTURE = Path(__file__).resolve().parents[3] / "egs" / "mini_tgif" / "tgif_fixture"
TSV = FIXTURE / "release" / "tgif-v1.0.tsv"
GIFS = FIXTURE / "gifs"


def _split(name):
    return FIXTURE / "release" / "splits" / f"{name}.txt"


def _prep(tmp_path, split="train", **kw):
    kw = dict(dict(tsv=TSV, split_list=_split(split), split=split, output_dir=tmp_path / split, gif_root=GIFS,
                   max_missing_fraction=0.2), **kw)
    return prepare_tgif(**kw)


def test_gif_name_and_clip_id():
    url = "https://38.media.tumblr.com/9f6c25cc/tumblr_mevmyaKtDf1rgvhr8o1_500.gif"
    assert gif_name(url) == "tumblr_mevmyaKtDf1rgvhr8o1_500.gif" and clip_id(gif_name(url)) == \
        "tgif-tumblr_mevmyaKtDf1rgvhr8o1_500"
    assert gif_name(url + "?x=1") == "tumblr_mevmyaKtDf1rgvhr8o1_500.gif"  # the query is not the name
    for bad in ("https://38.media.tumblr.com/abc/", "https://x/a b.gif", "https://x/video.mp4", ""):
        assert gif_name(bad) is None, bad


@pytest.mark.parametrize("split, clips, captions", [("train", 7, 7), ("val", 2, 2), ("test", 3, 9)])
def test_fixture_splits(tmp_path, split, clips, captions):
    stats = _prep(tmp_path, split)
    listed = len(_split(split).read_text().split())
    assert stats == {"clips": clips, "captions": captions, "missing": listed - clips, "listed": listed,
                     "skipped": 0}
    d = tmp_path / split
    text, utt2spk, video = read_text(d / "text"), read_utt2spk(d / "utt2spk"), read_scp(d / "video.scp")
    assert set(utt2spk.values()) == set(video) == set(read_spk2utt(d / "spk2utt"))
    for clip, path in video.items():  # absolute paths of the GIFs named as in the URLs
        name = read_scp(d / "clip2id")[clip]
        assert clip == f"tgif-{name}" and path == str(GIFS / f"{name}.gif")
        assert len([u for u, c in utt2spk.items() if c == clip]) == (3 if split == "test" else 1)
    for url, sentence in (line.split("\t") for line in TSV.read_text().splitlines()):
        key = "tgif-" + url.rsplit("/", 1)[1][:-4]
        if key in video:
            assert sentence in [text[u] for u, c in utt2spk.items() if c == key]
    assert "a yellow ball bounces" not in text.values()  # a TSV row of no split


def test_missing_gifs_are_listed_counted_named_and_bounded(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        _prep(tmp_path, "train")
    missing = read_scp(tmp_path / "train" / "missing")
    assert list(missing) == ["tgif-tumblr_nb8sq0yel8_250"]
    assert missing["tgif-tumblr_nb8sq0yel8_250"].endswith("/tumblr_nb8sq0yel8_250.gif tumblr_nb8sq0yel8_250.gif")
    assert any("TGIF train: 1 of 8 GIFs missing (12.5%): tumblr_nb8sq0yel8_250.gif" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(TgifPrepError, match=r"1 of 8 GIFs missing .*--max_missing_fraction 0.1"):
        _prep(tmp_path, "train", max_missing_fraction=0.1, output_dir=tmp_path / "strict")
    assert (tmp_path / "strict" / "missing").is_file()  # written before failing
    assert (tmp_path / "val" / "missing").exists() is False
    _prep(tmp_path, "val")
    assert (tmp_path / "val" / "missing").read_text() == ""


def test_without_gif_root_no_media_list(tmp_path):
    _prep(tmp_path, "test")
    stats = _prep(tmp_path, "test", gif_root=None)  # over a run with GIFs: the stale lists go
    assert stats["clips"] == 3 and stats["missing"] == 0
    assert not (tmp_path / "test" / "video.scp").exists() and not (tmp_path / "test" / "missing").exists()


@pytest.fixture
def corpus(tmp_path):
    """A copy of the fixture to break."""
    root = tmp_path / "corpus"
    shutil.copytree(FIXTURE / "release", root / "data")
    shutil.copytree(GIFS, root / "gifs")
    return root


def _prep_copy(root, out, split="val", **kw):
    return prepare_tgif(root / "data" / "tgif-v1.0.tsv", root / "data" / "splits" / f"{split}.txt", split, out,
                        gif_root=root / "gifs", **kw)


@pytest.mark.parametrize("content, message", [
    (b"", r"empty media file \(0 bytes\): .*tumblr_nc1sq0red1_250.gif \(clip tgif-tumblr_nc1sq0red1_250"),
    (b"<html>gone</html>", r"not a GIF \(it does not start with GIF87a or GIF89a\): .*tumblr_nc1sq0red1_250.gif"),
])
def test_bad_gif_files_fail_or_are_skipped(corpus, tmp_path, content, message, caplog):
    (corpus / "gifs" / "tumblr_nc1sq0red1_250.gif").write_bytes(content)
    with pytest.raises(TgifPrepError, match=message):
        _prep_copy(corpus, tmp_path / "out")
    # skipped, a broken download is a missing GIF: listed, and counted against max_missing_fraction
    with pytest.raises(TgifPrepError, match=r"1 of 2 GIFs missing \(50.0%\): tumblr_nc1sq0red1_250.gif"):
        _prep_copy(corpus, tmp_path / "out", skip_bad=True)
    with caplog.at_level(logging.WARNING):
        stats = _prep_copy(corpus, tmp_path / "out", skip_bad=True, max_missing_fraction=0.5)
    assert stats["clips"] == 1 and stats["skipped"] == 1 and stats["missing"] == 1
    assert any("skipping: " in r.getMessage() for r in caplog.records)
    assert "tumblr_nc1sq0red1_250" in (tmp_path / "out" / "missing").read_text()


def test_truncated_and_one_frame_gifs_are_kept_for_the_extractor(corpus, tmp_path):
    """Prep checks files, not frames: a cut or a still GIF is the feature extractor's (a warning for
    the cut one, see tests/captionlib/visual/test_gif.py), as for videos."""
    cut = corpus / "gifs" / "tumblr_nc1sq0red1_250.gif"
    cut.write_bytes(cut.read_bytes()[:-50])
    write_gif(corpus / "gifs" / "tumblr_nc2ba0blu2_250.gif", [100])
    assert _prep_copy(corpus, tmp_path / "out")["clips"] == 2


def test_malformed_rows_and_urls(corpus, tmp_path):
    tsv = corpus / "data" / "tgif-v1.0.tsv"
    val = corpus / "data" / "splits" / "val.txt"
    urls = val.read_text().split()
    rows = tsv.read_text()
    tsv.write_text(rows + "no tab on this line\n")
    line = len(rows.splitlines()) + 1
    with pytest.raises(TgifPrepError, match=rf"tgif-v1.0.tsv:{line}: expected '<GIF URL><TAB><sentence>'"):
        _prep_copy(corpus, tmp_path / "a")
    assert _prep_copy(corpus, tmp_path / "a", skip_bad=True)["skipped"] == 1
    tsv.write_text(rows + f"{urls[0]}\t  ...  \n")  # a sentence without words: logged, left out
    assert _prep_copy(corpus, tmp_path / "b")["captions"] == 2
    tsv.write_text(rows)
    val.write_text(val.read_text() + "https://38.media.tumblr.com/x/not_a_gif.mp4\n")
    with pytest.raises(TgifPrepError, match=r"val.txt:3: expected a GIF URL ending in <name>.gif"):
        _prep_copy(corpus, tmp_path / "c")
    other_host = urls[0].replace("38.media", "31.media")
    # a repeated URL is kept once; another URL of the same file name would overwrite its file
    val.write_text(f"{urls[0]}\n{urls[1]}\n{urls[0]}\n{other_host}\n")
    with pytest.raises(TgifPrepError, match=r"val.txt:4: .* has the file name tumblr_nc1sq0red1_250.gif of line 1"):
        _prep_copy(corpus, tmp_path / "d")
    val.write_text(f"{urls[0]}\n{urls[1]}\n{urls[0]}\n")
    assert _prep_copy(corpus, tmp_path / "d")["clips"] == 2
    val.write_text(f"{urls[0]}\nhttps://38.media.tumblr.com/y/tumblr_nosentence_250.gif\n")
    with pytest.raises(TgifPrepError, match=r"val.txt:2: .*tumblr_nosentence_250.gif has no sentence in"):
        _prep_copy(corpus, tmp_path / "e")



def test_a_unicode_line_separator_inside_a_sentence_is_a_space(corpus, tmp_path):
    """str.splitlines() split a row at U+2028 (and U+0085, VT, FF): the sentence was cut short
    under skip_bad, else the next line was blamed, and every later line number was off."""
    tsv = corpus / "data" / "tgif-v1.0.tsv"
    url = (corpus / "data" / "splits" / "val.txt").read_text().split()[0]
    rows = tsv.read_text()
    tsv.write_text(f"{url}\ta red square\u2028slides from the left\x85to the right\n" + rows + "no tab here\n")
    with pytest.raises(TgifPrepError, match=rf"tgif-v1.0.tsv:{len(rows.splitlines()) + 2}: expected '<GIF URL>"):
        _prep_copy(corpus, tmp_path / "a")
    _prep_copy(corpus, tmp_path / "b", skip_bad=True)
    captions = read_text(tmp_path / "b" / "text").values()
    assert "a red square slides from the left to the right" in captions


@pytest.mark.parametrize("kw, message", [
    (dict(split="dev"), "unknown TGIF split 'dev'"),
    (dict(max_missing_fraction=1.5), r"max_missing_fraction must be in \[0, 1\]"),
    (dict(gif_root="/nonexistent/gifs"), "/nonexistent/gifs: GIF root not found"),
    (dict(tsv="/nonexistent/tgif-v1.0.tsv"), "tgif-v1.0.tsv: TGIF sentence file not found"),
    (dict(split_list="/nonexistent/train.txt"), "train.txt: split list not found"),
])
def test_bad_arguments_are_named(tmp_path, kw, message):
    with pytest.raises(TgifPrepError, match=message):
        _prep(tmp_path, **kw)


def test_empty_split_list(tmp_path):
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(TgifPrepError, match="empty.txt: no GIF URL in the split list"):
        _prep(tmp_path, split_list=tmp_path / "empty.txt")
