"""Tests for validate/fix/subset/copy/combine/split data-dir tools."""

import shutil

import pytest

C1, C2, C3 = (
    "clotho-validation-00001",
    "clotho-validation-00002",
    "clotho-validation-00003",
)


def keys(path):
    return [line.split()[0] for line in path.read_text().splitlines()]


# ---------------------------------------------------------------- validate_data_dir.sh
def test_validate_accepts_good_dirs(tool, datadir, dumpdir):
    r = tool(["validate_data_dir.sh", "--no-feats", datadir])
    assert r.rc == 0, r
    assert "Successfully validated" in r.err
    r = tool(["validate_data_dir.sh", dumpdir])
    assert r.rc == 0, r


def test_validate_requires_feats_unless_no_feats(tool, datadir):
    r = tool(["validate_data_dir.sh", datadir])
    assert r.rc != 0
    assert "feats.scp" in r.err


def test_validate_no_text_no_wav(tool, dumpdir):
    for f in ("text", "utt2spk", "spk2utt"):
        (dumpdir / f).unlink()
    assert tool(["validate_data_dir.sh", dumpdir]).rc != 0
    assert tool(["validate_data_dir.sh", "--no-text", dumpdir]).rc == 0
    (dumpdir / "wav.scp").unlink()
    assert tool(["validate_data_dir.sh", "--no-text", dumpdir]).rc != 0
    r = tool(["validate_data_dir.sh", "--no-text", "--no-wav", dumpdir])
    assert r.rc == 0, r


def test_validate_rejects_unsorted(tool, datadir, h):
    lines = h.read_lines(datadir / "text")
    lines[3], lines[4] = lines[4], lines[3]
    h.write_lines(datadir / "text", lines)
    r = tool(["validate_data_dir.sh", "--no-feats", datadir])
    assert r.rc != 0
    assert "text:5" in r.err and "not sorted" in r.err


def test_validate_sort_order_is_c_locale(tool, tmp_path, h):
    d = tmp_path / "clips"
    d.mkdir()
    h.write_lines(
        d / "wav.scp", ["Zeta-1 /a.wav", "alpha-1 /b.wav", "alpha1 /c.wav"]
    )  # C order
    r = tool(["validate_data_dir.sh", "--no-text", "--no-feats", d])
    assert r.rc == 0, r
    h.write_lines(d / "wav.scp", ["alpha-1 /b.wav", "Zeta-1 /a.wav"])  # en_US order
    r = tool(["validate_data_dir.sh", "--no-text", "--no-feats", d])
    assert r.rc != 0 and "wav.scp:2" in r.err


def test_validate_rejects_empty_caption(tool, datadir, h):
    lines = h.read_lines(datadir / "text")
    lines[1] = f"{C1}-2 "
    h.write_lines(datadir / "text", lines)
    r = tool(["validate_data_dir.sh", "--no-feats", datadir])
    assert r.rc != 0
    assert "empty caption" in r.err and f"{C1}-2" in r.err and "text:2" in r.err


def test_validate_rejects_spk2utt_mismatch(tool, datadir, h):
    lines = h.read_lines(datadir / "spk2utt")
    lines[0] = f"{C1} {C1}-1 {C1}-2"  # caption -3 missing
    h.write_lines(datadir / "spk2utt", lines)
    r = tool(["validate_data_dir.sh", "--no-feats", datadir])
    assert r.rc != 0
    assert "spk2utt:1" in r.err and C1 in r.err


def test_validate_rejects_utt2spk_to_unknown_clip(tool, datadir, h):
    lines = h.read_lines(datadir / "utt2spk")
    lines[0] = f"{C1}-1 clotho-validation-00009"
    h.write_lines(datadir / "utt2spk", lines)
    r = tool(["validate_data_dir.sh", "--no-feats", datadir])
    assert r.rc != 0
    assert "utt2spk" in r.err


@pytest.mark.parametrize(
    "fname,mutate,needle",
    [
        ("wav.scp", lambda ls: ls + [ls[-1]], "duplicate key"),
        ("reco2dur", lambda ls: ls[:2], C3),
        (
            "aud2name",
            lambda ls: ls[:1] + ["clotho-validation-0000\u00e9 x"] + ls[2:],
            "ASCII",
        ),
        ("text", lambda ls: ls[:-1], C3),
        ("reco2dur", lambda ls: [ls[0].split()[0] + " -1"] + ls[1:], "duration"),
        ("utt2spk", lambda ls: [ls[0] + " extra"] + ls[1:], "utt2spk:1"),
    ],
)
def test_validate_rejects_inconsistencies(tool, datadir, h, fname, mutate, needle):
    h.write_lines(datadir / fname, mutate(h.read_lines(datadir / fname)))
    r = tool(["validate_data_dir.sh", "--no-feats", datadir])
    assert r.rc != 0
    assert needle in r.err, r.err


def test_validate_feats_keys_must_match(tool, dumpdir, h):
    h.write_lines(dumpdir / "feats.scp", h.read_lines(dumpdir / "feats.scp")[:2])
    h.write_lines(
        dumpdir / "utt2num_frames", h.read_lines(dumpdir / "utt2num_frames")[:2]
    )
    r = tool(["validate_data_dir.sh", dumpdir])
    assert r.rc != 0 and "feats.scp" in r.err and C3 in r.err


# ---------------------------------------------------------------- fix_data_dir.sh
def test_fix_data_dir_drops_inconsistent_entries(tool, dumpdir, h):
    d = dumpdir
    original_text = (d / "text").read_text()
    # clip 2 lost its features; caption C1-2 lost from utt2spk; an orphan caption
    # for an unknown clip in text; an unsorted wav.scp
    h.write_lines(
        d / "feats.scp", [x for x in h.read_lines(d / "feats.scp") if C2 not in x]
    )
    h.write_lines(
        d / "utt2spk",
        [x for x in h.read_lines(d / "utt2spk") if not x.startswith(f"{C1}-2 ")],
    )
    h.write_lines(
        d / "text", h.read_lines(d / "text") + ["clotho-validation-00009-1 orphan"]
    )
    h.write_lines(d / "wav.scp", list(reversed(h.read_lines(d / "wav.scp"))))
    assert tool(["validate_data_dir.sh", d]).rc != 0
    r = tool(["fix_data_dir.sh", d])
    assert r.rc == 0, r
    assert "kept 2 clips and 6 captions" in r.err
    assert "removed 1 clips and 4 captions" in r.err
    assert tool(["validate_data_dir.sh", d]).rc == 0
    for f in (
        "wav.scp",
        "feats.scp",
        "reco2dur",
        "aud2name",
        "utt2num_frames",
        "spk2utt",
    ):
        assert keys(d / f) == [C1, C3], f
    assert keys(d / "text") == [f"{C1}-1", f"{C1}-3"] + [
        f"{C3}-{k}" for k in range(1, 5)
    ]
    assert (d / ".backup/text").read_text() != original_text
    assert "orphan" in (d / ".backup/text").read_text()
    assert (d / "feats_dim").read_text() == "64\n"


def test_fix_data_dir_drops_clip_without_captions(tool, datadir, h):
    h.write_lines(
        datadir / "text", [x for x in h.read_lines(datadir / "text") if C2 not in x]
    )
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0, r
    assert keys(datadir / "wav.scp") == [C1, C3]
    assert tool(["validate_data_dir.sh", "--no-feats", datadir]).rc == 0


def test_fix_data_dir_on_good_dir_changes_nothing(tool, datadir):
    before = {p.name: p.read_text() for p in datadir.iterdir() if p.is_file()}
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0, r
    assert "removed 0 clips and 0 captions" in r.err
    assert {p.name: p.read_text() for p in datadir.iterdir() if p.is_file()} == before


def test_fix_data_dir_conflicting_duplicates(tool, datadir, h):
    h.write_lines(
        datadir / "reco2dur", h.read_lines(datadir / "reco2dur") + [f"{C1} 99.000"]
    )
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc != 0 and "reco2dur" in r.err and C1 in r.err


def snapshot(d):
    """Every file under d (backups included), by relative path."""
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


def test_fix_data_dir_refuses_to_empty_the_dir(tool, datadir, h):
    # wav.scp with another prefix: no clip matches reco2dur/aud2name/utt2spk
    h.write_lines(
        datadir / "wav.scp",
        [x.replace("clotho-validation", "clotho-val") for x in h.read_lines(datadir / "wav.scp")],
    )
    before = snapshot(datadir)
    for _ in range(2):
        r = tool(["fix_data_dir.sh", datadir])
        assert r.rc == 1, r
        assert "refusing" in r.err and "nothing was changed" in r.err
        assert "in reco2dur aud2name utt2spk but not in wav.scp" in r.err
        assert "in wav.scp but not in reco2dur aud2name utt2spk" in r.err
        assert C1 in r.err and "clotho-val-00001" in r.err
        assert snapshot(datadir) == before
        assert not (datadir / ".backup").exists()


def test_fix_data_dir_refuses_to_remove_every_caption(tool, datadir, h):
    h.write_lines(datadir / "text", [f"x{x}" for x in h.read_lines(datadir / "text")])
    before = snapshot(datadir)
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 1, r
    assert "in text but not in utt2spk" in r.err and f"x{C1}-1" in r.err
    assert "in utt2spk but not in text" in r.err and f"{C1}-1" in r.err
    assert snapshot(datadir) == before


def test_fix_data_dir_never_overwrites_a_backup(tool, datadir, h):
    originals = snapshot(datadir)
    h.write_lines(datadir / "text", [x for x in h.read_lines(datadir / "text") if C2 not in x])
    first = snapshot(datadir)
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0 and f"originals in {datadir}/.backup)" in r.err, r
    h.write_lines(datadir / "reco2dur", h.read_lines(datadir / "reco2dur")[:-1])
    second = snapshot(datadir)
    second = {k: v for k, v in second.items() if not k.startswith(".backup/")}
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0 and f"originals in {datadir}/.backup.2)" in r.err, r
    assert keys(datadir / "wav.scp") == [C1]
    assert snapshot(datadir / ".backup") == first
    assert snapshot(datadir / ".backup.2") == second
    assert C2 in originals["spk2utt"].decode() and C2 not in second["spk2utt"].decode()
    # a good dir changes nothing and makes no backup; a taken name is skipped
    assert tool(["fix_data_dir.sh", datadir]).rc == 0
    assert not (datadir / ".backup.3").exists()
    (datadir / ".backup.3").write_text("not a directory\n")
    h.write_lines(datadir / "wav.scp", list(reversed(h.read_lines(datadir / "wav.scp") * 2)))
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0 and ".backup.4)" in r.err, r
    assert (datadir / ".backup.3").read_text() == "not a directory\n"
    assert snapshot(datadir / ".backup") == first


def test_fix_data_dir_names_the_removed_ids(tool, datadir, h):
    h.write_lines(datadir / "reco2dur", [x for x in h.read_lines(datadir / "reco2dur") if C2 not in x])
    h.write_lines(
        datadir / "aud2name", h.read_lines(datadir / "aud2name") + ["clotho-validation-0000\u00e9 x"]
    )
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0, r
    assert "removed 2 clips and 2 captions" in r.err
    assert f"1 clip in wav.scp aud2name utt2spk but not in reco2dur: {C2}\n" in r.err
    assert "1 clip in aud2name but not in wav.scp reco2dur utt2spk: clotho-validation-0000\\xC3\\xA9" in r.err
    assert f"2 captions of a removed clip: {C2}-1 {C2}-2\n" in r.err
    # more than three: the count, the first three and "..."
    h.write_lines(datadir / "utt2spk", [x for x in h.read_lines(datadir / "utt2spk") if C3 not in x])
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 0, r
    assert f"4 captions in text but not in utt2spk: {C3}-1 {C3}-2 {C3}-3 ...\n" in r.err
    assert f"1 clip in wav.scp reco2dur aud2name but not in utt2spk: {C3}\n" in r.err


def test_fix_data_dir_rejects_a_byte_order_mark(tool, datadir):
    wav = datadir / "wav.scp"
    wav.write_bytes(b"\xef\xbb\xbf" + wav.read_bytes())
    before = snapshot(datadir)
    r = tool(["fix_data_dir.sh", datadir])
    assert r.rc == 1, r
    assert "wav.scp:1:" in r.err and "byte-order mark" in r.err and f"'{C1}'" in r.err
    assert snapshot(datadir) == before


# ------------------------------------------------------ subset/copy/combine/split
def test_subset_by_spk_list(tool, dumpdir, tmp_path, h):
    h.write_lines(tmp_path / "clips", [C2, C3])
    r = tool(
        [
            "subset_data_dir.sh",
            "--spk-list",
            tmp_path / "clips",
            dumpdir,
            tmp_path / "sub",
        ]
    )
    assert r.rc == 0, r
    sub = tmp_path / "sub"
    for f in (
        "wav.scp",
        "feats.scp",
        "reco2dur",
        "aud2name",
        "utt2num_frames",
        "spk2utt",
    ):
        assert keys(sub / f) == [C2, C3], f
    assert len(h.read_lines(sub / "text")) == 6
    assert (sub / "feats_dim").exists()
    assert tool(["validate_data_dir.sh", sub]).rc == 0


def test_subset_first_last_utt_list(tool, datadir, tmp_path, h):
    r = tool(["subset_data_dir.sh", "--first", "1", datadir, tmp_path / "first"])
    assert r.rc == 0, r
    assert keys(tmp_path / "first/wav.scp") == [C1]
    assert keys(tmp_path / "first/text") == [f"{C1}-{k}" for k in (1, 2, 3)]
    r = tool(["subset_data_dir.sh", "--last", "2", datadir, tmp_path / "last"])
    assert r.rc == 0, r
    assert keys(tmp_path / "last/spk2utt") == [C2, C3]
    h.write_lines(tmp_path / "utts", [f"{C1}-2", f"{C3}-4"])
    r = tool(
        [
            "subset_data_dir.sh",
            "--utt-list",
            tmp_path / "utts",
            datadir,
            tmp_path / "utt",
        ]
    )
    assert r.rc == 0, r
    assert keys(tmp_path / "utt/text") == [f"{C1}-2", f"{C3}-4"]
    assert keys(tmp_path / "utt/wav.scp") == [C1, C3]
    assert h.read_lines(tmp_path / "utt/spk2utt") == [f"{C1} {C1}-2", f"{C3} {C3}-4"]
    for sub in ("first", "last", "utt"):
        assert tool(["validate_data_dir.sh", "--no-feats", tmp_path / sub]).rc == 0, sub
    assert tool(["subset_data_dir.sh", "--first", "4", datadir, tmp_path / "x"]).rc != 0
    assert tool(["subset_data_dir.sh", datadir, tmp_path / "x"]).rc != 0


def test_subset_combine_round_trip(tool, dumpdir, tmp_path):
    assert tool(["subset_data_dir.sh", "--first", "1", dumpdir, tmp_path / "a"]).rc == 0
    assert tool(["subset_data_dir.sh", "--last", "2", dumpdir, tmp_path / "b"]).rc == 0
    r = tool(["combine_data.sh", tmp_path / "all", tmp_path / "b", tmp_path / "a"])
    assert r.rc == 0, r
    for f in sorted(p.name for p in dumpdir.iterdir()):
        assert (tmp_path / "all" / f).read_text() == (dumpdir / f).read_text(), f
    assert tool(["validate_data_dir.sh", tmp_path / "all"]).rc == 0


def test_combine_two_splits(tool, tmp_path, h):
    a = h.make_data_dir(tmp_path / "dev", prefix="clotho-development")
    b = h.make_data_dir(tmp_path / "val")
    r = tool(["combine_data.sh", tmp_path / "train", a, b])
    assert r.rc == 0, r
    t = tmp_path / "train"
    assert len(h.read_lines(t / "wav.scp")) == 6 and len(h.read_lines(t / "text")) == 18
    assert keys(t / "spk2utt")[0].startswith("clotho-development")
    assert tool(["validate_data_dir.sh", "--no-feats", t]).rc == 0


def test_combine_duplicate_keys_is_an_error(tool, datadir, tmp_path):
    shutil.copytree(datadir, tmp_path / "copy")
    r = tool(["combine_data.sh", tmp_path / "out", datadir, tmp_path / "copy"])
    assert r.rc != 0
    assert "clotho-validation-00001" in r.err
    assert tool(["combine_data.sh", datadir, datadir, tmp_path / "copy"]).rc != 0


def test_combine_skips_files_missing_in_a_source(tool, datadir, dumpdir, tmp_path, h):
    other = h.make_data_dir(tmp_path / "other", prefix="clotho-evaluation")
    r = tool(["combine_data.sh", tmp_path / "out", dumpdir, other])
    assert r.rc == 0, r
    assert "feats.scp" in r.err
    assert not (tmp_path / "out/feats.scp").exists()
    assert len(h.read_lines(tmp_path / "out/wav.scp")) == 6


def test_combine_source_without_final_newline(tool, tmp_path, h):
    a = h.make_data_dir(tmp_path / "dev", prefix="clotho-development")
    b = h.make_data_dir(tmp_path / "val")
    for f in ("wav.scp", "text", "utt2spk"):
        (a / f).write_text((a / f).read_text().rstrip("\n"))
    r = tool(["combine_data.sh", tmp_path / "train", a, b])
    assert r.rc == 0, r
    t = tmp_path / "train"
    for f in ("wav.scp", "text", "utt2spk"):
        want = sorted(h.read_lines(a / f) + h.read_lines(b / f))
        assert h.read_lines(t / f) == want, f
    assert tool(["validate_data_dir.sh", "--no-feats", t]).rc == 0


def test_copy_data_dir(tool, dumpdir, tmp_path):
    r = tool(["copy_data_dir.sh", dumpdir, tmp_path / "copy"])
    assert r.rc == 0, r
    for p in dumpdir.iterdir():
        assert (tmp_path / "copy" / p.name).read_text() == p.read_text()
    assert tool(["copy_data_dir.sh", dumpdir, dumpdir]).rc != 0


def test_split_data_per_clip(tool, datadir, h):
    r = tool(["split_data.sh", datadir, "2"])
    assert r.rc == 0, r
    parts = [datadir / "split2" / str(n) for n in (1, 2)]
    assert sum((keys(p / "wav.scp") for p in parts), []) == [C1, C2, C3]
    assert sum((h.read_lines(p / "text") for p in parts), []) == h.read_lines(
        datadir / "text"
    )
    for p in parts:
        assert tool(["validate_data_dir.sh", "--no-feats", p]).rc == 0
    r = tool(["split_data.sh", "--per-utt", datadir, "4"])
    assert r.rc == 0, r
    texts = [h.read_lines(datadir / "split4utt" / str(n) / "text") for n in range(1, 5)]
    assert [len(t) for t in texts] == [3, 2, 2, 2]
