"""Image/video data dirs (image.scp / video.scp + clip2id) and the import route (clip2id, no
media list) through validate/fix/subset/split/combine/copy."""

import pytest

COCO = ["coco-000000000042", "coco-000000000073", "coco-000000000074"]
MSVD = ["msvd-vid0001", "msvd-vid0002", "msvd-vid0003"]
CORPUS_ID = {
    "coco-000000000042": "42",
    "coco-000000000073": "73",
    "coco-000000000074": "74",
    "coco-000000000001": "1",
    "coco-000000000002": "2",
    "msvd-vid0001": "-4wsuPCjDBc_5_15",  # MSVD clip names may start with "-"
    "msvd-vid0002": "-7KMZQEsJW4_205_208",
    "msvd-vid0003": "00jrXRMlZOY_0_10",
}
NCAPS = [2, 1, 3]


def keys(path):
    return [line.split()[0] for line in path.read_text().splitlines()]


def make_visual_dir(h, path, media, clips, feats=False):
    """A sorted data dir: text utt2spk spk2utt clip2id [+ <media>] [+ feats.scp ...].

    ``media`` is "image.scp", "video.scp" or None (the import route).
    """
    path.mkdir(parents=True, exist_ok=True)
    clips = sorted(clips)
    if media is not None:
        ext = "jpg" if media == "image.scp" else "avi"
        h.write_lines(path / media, [f"{c} /abs/media/{CORPUS_ID[c]}.{ext}" for c in clips])
    h.write_lines(path / "clip2id", [f"{c} {CORPUS_ID[c]}" for c in clips])
    text, utt2spk, spk2utt = [], [], []
    for i, c in enumerate(clips):
        ids = [f"{c}-{k:02d}" for k in range(1, NCAPS[i % 3] + 1)]
        text += [f"{u} a caption number {k} of {c}" for k, u in enumerate(ids)]
        utt2spk += [f"{u} {c}" for u in ids]
        spk2utt.append(" ".join([c] + ids))
    h.write_lines(path / "text", text)
    h.write_lines(path / "utt2spk", utt2spk)
    h.write_lines(path / "spk2utt", spk2utt)
    if feats:
        h.write_lines(path / "feats.scp", [f"{c} /abs/dump/feats.1.ark:{10 + 99 * i}" for i, c in enumerate(clips)])
        h.write_lines(path / "utt2num_frames", [f"{c} {20 + i}" for i, c in enumerate(clips)])
        h.write_lines(path / "feats_dim", ["2048"])
        h.write_lines(path / "feats_type", ["resnet"])
    return path


@pytest.fixture
def imagedir(tmp_path, h):
    return make_visual_dir(h, tmp_path / "coco", "image.scp", COCO)


@pytest.fixture
def videodir(tmp_path, h):
    return make_visual_dir(h, tmp_path / "msvd", "video.scp", MSVD)


@pytest.fixture
def importdir(tmp_path, h):
    return make_visual_dir(h, tmp_path / "import", None, COCO)


def validate(tool, *args):
    return tool(["validate_data_dir.sh", *args])


# ---------------------------------------------------------------- validate_data_dir.sh
def test_validate_image_and_video_dirs(tool, imagedir, videodir, tmp_path, h):
    for d in (imagedir, videodir):
        r = validate(tool, "--no-feats", d)
        assert r.rc == 0, r
        assert "Successfully validated" in r.err
    dump = make_visual_dir(h, tmp_path / "dump", "video.scp", MSVD, feats=True)
    assert validate(tool, dump).rc == 0
    # a clip-keyed file without a media list: required unless --no-media
    (imagedir / "image.scp").unlink()
    r = validate(tool, "--no-feats", imagedir)
    assert r.rc != 0 and "no media list" in r.err and "--no-media" in r.err, r


@pytest.mark.parametrize("extra", ["wav.scp", "video.scp"])
def test_validate_two_media_lists_is_an_error(tool, imagedir, extra):
    (imagedir / extra).write_text((imagedir / "image.scp").read_text())
    r = validate(tool, "--no-feats", imagedir)
    assert r.rc != 0
    assert "more than one media list" in r.err
    assert "image.scp" in r.err and extra in r.err


def test_validate_clip_missing_from_clip2id(tool, imagedir, videodir, h):
    for d, clips in ((imagedir, COCO), (videodir, MSVD)):
        h.write_lines(d / "clip2id", [x for x in h.read_lines(d / "clip2id") if not x.startswith(clips[1])])
        r = validate(tool, "--no-feats", d)
        assert r.rc != 0
        assert clips[1] in r.err and "clip2id" in r.err, r.err


def test_validate_clip2id_entries(tool, videodir, h):
    lines = h.read_lines(videodir / "clip2id")
    h.write_lines(videodir / "clip2id", [lines[0], f"{MSVD[1]} ", lines[2]])
    r = validate(tool, "--no-feats", videodir)
    assert r.rc != 0 and "clip2id:2" in r.err and MSVD[1] in r.err, r.err
    h.write_lines(videodir / "clip2id", [lines[1], lines[0], lines[2]])
    r = validate(tool, "--no-feats", videodir)
    assert r.rc != 0 and "clip2id:2" in r.err and "not sorted" in r.err, r.err


def test_validate_media_list_is_checked_like_wav_scp(tool, imagedir, h):
    lines = h.read_lines(imagedir / "image.scp")
    h.write_lines(imagedir / "image.scp", [lines[1], lines[0], lines[2]])
    r = validate(tool, "--no-feats", imagedir)
    assert r.rc != 0 and "image.scp:2" in r.err and "not sorted" in r.err, r.err
    h.write_lines(imagedir / "image.scp", lines[:2])  # clip 3 has captions but no image
    r = validate(tool, "--no-feats", imagedir)
    assert r.rc != 0 and COCO[2] in r.err and "image.scp" in r.err, r.err
    h.write_lines(imagedir / "image.scp", [lines[0], f"{COCO[1]} ", lines[2]])
    r = validate(tool, "--no-feats", imagedir)
    assert r.rc != 0 and "image.scp:2" in r.err and "no path" in r.err, r.err


def test_validate_import_route(tool, importdir, h):
    r = validate(tool, "--no-feats", importdir)
    assert r.rc != 0 and "--no-media" in r.err
    for opt in ("--no-media", "--no-wav", "--no_media"):
        r = validate(tool, "--no-feats", opt, importdir)
        assert r.rc == 0, (opt, r)
    # the caption/clip cross-checks use clip2id when there is no media list
    h.write_lines(importdir / "clip2id", h.read_lines(importdir / "clip2id")[:2])
    r = validate(tool, "--no-feats", "--no-media", importdir)
    assert r.rc != 0 and COCO[2] in r.err and "clip2id" in r.err and "utt2spk:" in r.err, r.err


def test_validate_import_route_dump_dir(tool, tmp_path, h):
    dump = make_visual_dir(h, tmp_path / "dump", None, COCO, feats=True)
    assert validate(tool, "--no-media", dump).rc == 0
    h.write_lines(dump / "clip2id", h.read_lines(dump / "clip2id")[1:])
    h.write_lines(dump / "text", h.read_lines(dump / "text")[2:])
    h.write_lines(dump / "utt2spk", h.read_lines(dump / "utt2spk")[2:])
    h.write_lines(dump / "spk2utt", h.read_lines(dump / "spk2utt")[1:])
    r = validate(tool, "--no-media", dump)  # feats.scp has a clip clip2id lacks
    assert r.rc != 0 and COCO[0] in r.err and "feats.scp" in r.err, r.err


# ---------------------------------------------------------------- fix_data_dir.sh
def test_fix_drops_clip_missing_from_image_scp(tool, imagedir, h):
    h.write_lines(imagedir / "image.scp", [x for x in h.read_lines(imagedir / "image.scp") if COCO[1] not in x])
    assert validate(tool, "--no-feats", imagedir).rc != 0
    r = tool(["fix_data_dir.sh", imagedir])
    assert r.rc == 0, r
    assert "kept 2 clips and 5 captions; removed 1 clips and 1 captions" in r.err
    for f in ("image.scp", "clip2id", "spk2utt"):
        assert keys(imagedir / f) == [COCO[0], COCO[2]], f
    assert all(COCO[1] not in x for f in ("text", "utt2spk") for x in h.read_lines(imagedir / f))
    assert COCO[1] in (imagedir / ".backup/clip2id").read_text()
    assert validate(tool, "--no-feats", imagedir).rc == 0


def test_fix_drops_clip_missing_from_clip2id(tool, videodir, importdir, h):
    for d, media in ((videodir, "video.scp"), (importdir, None)):
        h.write_lines(d / "clip2id", h.read_lines(d / "clip2id")[1:])
        r = tool(["fix_data_dir.sh", d])
        assert r.rc == 0, r
        clips = keys(d / "clip2id")
        assert keys(d / "spk2utt") == clips and len(clips) == 2
        if media:
            assert keys(d / media) == clips
        assert validate(tool, "--no-feats", *(["--no-media"] if media is None else []), d).rc == 0


def test_fix_on_good_visual_dir_changes_nothing(tool, videodir):
    before = {p.name: p.read_text() for p in videodir.iterdir() if p.is_file()}
    r = tool(["fix_data_dir.sh", videodir])
    assert r.rc == 0 and "removed 0 clips and 0 captions" in r.err, r
    assert {p.name: p.read_text() for p in videodir.iterdir() if p.is_file()} == before


# ------------------------------------------------------ subset/copy/combine/split
@pytest.mark.parametrize("media", ["image.scp", "video.scp", None])
def test_subset_keeps_media_and_clip2id(tool, tmp_path, h, media):
    clips = COCO if media != "video.scp" else MSVD
    src = make_visual_dir(h, tmp_path / "src", media, clips, feats=True)
    opts = ["--no-media"] if media is None else []
    h.write_lines(tmp_path / "list", [clips[0], clips[2]])
    h.write_lines(tmp_path / "utts", [f"{clips[2]}-02"])
    for name, args, want in (
        ("spk", ["--spk-list", tmp_path / "list"], [clips[0], clips[2]]),
        ("first", ["--first", "2"], clips[:2]),
        ("last", ["--last", "1"], clips[2:]),
        ("utt", ["--utt-list", tmp_path / "utts"], clips[2:]),
    ):
        dest = tmp_path / name
        r = tool(["subset_data_dir.sh", *args, src, dest])
        assert r.rc == 0, r
        for f in ("clip2id", "feats.scp", "spk2utt") + ((media,) if media else ()):
            assert keys(dest / f) == want, (name, f)
        assert not (dest / "wav.scp").exists()
        r = validate(tool, *opts, dest)
        assert r.rc == 0, (name, r)


def test_subset_clip_list_fallback(tool, tmp_path, h):
    """Without spk2utt the clips come from image.scp / video.scp / clip2id."""
    for media in ("image.scp", "video.scp", None):
        src = make_visual_dir(h, tmp_path / f"src-{media}", media, COCO)
        for f in ("text", "utt2spk", "spk2utt"):
            (src / f).unlink()
        dest = tmp_path / f"dest-{media}"
        r = tool(["subset_data_dir.sh", "--last", "2", src, dest])
        assert r.rc == 0, r
        assert "2 of 3 clips" in r.err
        assert keys(dest / "clip2id") == COCO[1:]
        if media:
            assert keys(dest / media) == COCO[1:]


def test_split_keeps_media_and_clip2id(tool, videodir, importdir, h):
    for d, media in ((videodir, "video.scp"), (importdir, None)):
        r = tool(["split_data.sh", d, "2"])
        assert r.rc == 0, r
        parts = [d / "split2" / str(n) for n in (1, 2)]
        for f in ("clip2id",) + ((media,) if media else ()):
            assert sum((h.read_lines(p / f) for p in parts), []) == h.read_lines(d / f), f
        for p in parts:
            assert keys(p / "clip2id") == keys(p / "spk2utt")
            r = validate(tool, "--no-feats", *(["--no-media"] if media is None else []), p)
            assert r.rc == 0, r


def test_split_clip_list_fallback(tool, imagedir, h):
    for f in ("text", "utt2spk", "spk2utt"):
        (imagedir / f).unlink()
    r = tool(["split_data.sh", imagedir, "3"])
    assert r.rc == 0, r
    for n, c in enumerate(COCO, 1):
        for f in ("image.scp", "clip2id"):
            assert keys(imagedir / "split3" / str(n) / f) == [c], (n, f)
    (imagedir / "image.scp").unlink()
    r = tool(["split_data.sh", imagedir, "3"])  # clip2id alone
    assert r.rc == 0, r
    assert keys(imagedir / "split3/3/clip2id") == [COCO[2]]
    assert not (imagedir / "split3/3/image.scp").exists()


def test_subset_combine_round_trip_video_dump(tool, tmp_path, h):
    dump = make_visual_dir(h, tmp_path / "dump", "video.scp", MSVD, feats=True)
    assert tool(["subset_data_dir.sh", "--first", "2", dump, tmp_path / "a"]).rc == 0
    assert tool(["subset_data_dir.sh", "--last", "1", dump, tmp_path / "b"]).rc == 0
    r = tool(["combine_data.sh", tmp_path / "all", tmp_path / "b", tmp_path / "a"])
    assert r.rc == 0, r
    for f in sorted(p.name for p in dump.iterdir()):
        assert (tmp_path / "all" / f).read_text() == (dump / f).read_text(), f
    assert validate(tool, tmp_path / "all").rc == 0


def test_combine_image_dirs_and_mixed_media(tool, imagedir, videodir, tmp_path, h):
    other = make_visual_dir(h, tmp_path / "coco2", "image.scp", ["coco-000000000001", "coco-000000000002"])
    r = tool(["combine_data.sh", tmp_path / "all", imagedir, other])
    assert r.rc == 0, r
    all_ = tmp_path / "all"
    assert keys(all_ / "image.scp") == keys(all_ / "clip2id") == keys(all_ / "spk2utt")
    assert len(keys(all_ / "clip2id")) == 5
    assert validate(tool, "--no-feats", all_).rc == 0
    # an image dir and a video dir: each media list is in only one source
    r = tool(["combine_data.sh", tmp_path / "mixed", imagedir, videodir])
    assert r.rc == 0, r
    assert "image.scp is in only 1 of 2" in r.err and "video.scp is in only 1 of 2" in r.err
    mixed = tmp_path / "mixed"
    assert not (mixed / "image.scp").exists() and not (mixed / "video.scp").exists()
    assert keys(mixed / "clip2id") == sorted(COCO + MSVD)
    assert validate(tool, "--no-feats", "--no-media", mixed).rc == 0
    # the same clip twice in clip2id is an error
    again = make_visual_dir(h, tmp_path / "again", None, COCO)
    r = tool(["combine_data.sh", tmp_path / "dup", again, imagedir])
    assert r.rc != 0 and COCO[0] in r.err


def test_copy_data_dir_visual(tool, imagedir, videodir, tmp_path):
    dest = tmp_path / "copy"
    r = tool(["copy_data_dir.sh", videodir, dest])
    assert r.rc == 0, r
    r = tool(["copy_data_dir.sh", imagedir, dest])  # replaces the earlier copy
    assert r.rc == 0, r
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in imagedir.iterdir())
    for p in imagedir.iterdir():
        assert (dest / p.name).read_text() == p.read_text(), p.name
    assert not (dest / "video.scp").exists()
    assert validate(tool, "--no-feats", dest).rc == 0
