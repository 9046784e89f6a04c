"""Tests for split_scp.pl, filter_scp.pl and the utt2spk <-> spk2utt converters."""

import pytest


def test_split_scp_near_equal_contiguous(tmp_path, tool, h):
    lines = [f"clotho-validation-{i:05d} /a/{i}.wav" for i in range(1, 11)]
    h.write_lines(tmp_path / "wav.scp", lines)
    outs = [tmp_path / f"wav.{n}.scp" for n in (1, 2, 3)]
    r = tool(["split_scp.pl", tmp_path / "wav.scp", *outs])
    assert r.rc == 0, r
    parts = [h.read_lines(o) for o in outs]
    assert [len(p) for p in parts] == [4, 3, 3]
    assert sum(parts, []) == lines


def test_split_scp_utt2spk_keeps_groups(tmp_path, tool, h):
    h.make_data_dir(tmp_path / "d")  # clips with 3, 2 and 4 captions
    outs = [tmp_path / f"text.{n}" for n in (1, 2)]
    r = tool(
        [
            "split_scp.pl",
            f"--utt2spk={tmp_path / 'd/utt2spk'}",
            tmp_path / "d/text",
            *outs,
        ]
    )
    assert r.rc == 0, r
    parts = [h.read_lines(o) for o in outs]
    assert sum(parts, []) == h.read_lines(tmp_path / "d/text")
    clips = [{line.split()[0].rsplit("-", 1)[0] for line in p} for p in parts]
    assert all(clips) and not (clips[0] & clips[1])
    # three shards: one clip each
    outs = [tmp_path / f"t.{n}" for n in (1, 2, 3)]
    r = tool(
        [
            "split_scp.pl",
            "--utt2spk",
            tmp_path / "d/utt2spk",
            tmp_path / "d/text",
            *outs,
        ]
    )
    assert r.rc == 0, r
    assert [len(h.read_lines(o)) for o in outs] == [3, 2, 4]


def test_split_scp_balances_groups(tmp_path, tool, h):
    utt2spk = [
        f"s{s}-{u} s{s}"
        for s, n in ((1, 1), (2, 1), (3, 1), (4, 1), (5, 4))
        for u in range(n)
    ]
    h.write_lines(tmp_path / "utt2spk", utt2spk)
    outs = [tmp_path / "a", tmp_path / "b"]
    r = tool(
        [
            "split_scp.pl",
            f"--utt2spk={tmp_path / 'utt2spk'}",
            tmp_path / "utt2spk",
            *outs,
        ]
    )
    assert r.rc == 0, r
    assert [len(h.read_lines(o)) for o in outs] == [4, 4]


def test_split_scp_errors(tmp_path, tool, h):
    h.make_data_dir(tmp_path / "d")
    outs = [tmp_path / f"o.{n}" for n in range(1, 5)]
    r = tool(
        [
            "split_scp.pl",
            f"--utt2spk={tmp_path / 'd/utt2spk'}",
            tmp_path / "d/text",
            *outs,
        ]
    )
    assert r.rc != 0 and "3 speakers into 4" in r.err
    h.write_lines(tmp_path / "small", ["a 1", "b 2"])
    r = tool(["split_scp.pl", tmp_path / "small", *outs[:3]])
    assert r.rc != 0 and "2 lines into 3" in r.err
    # non-contiguous speaker
    h.write_lines(tmp_path / "u2s", ["a x", "b y", "c x"])
    r = tool(
        ["split_scp.pl", f"--utt2spk={tmp_path / 'u2s'}", tmp_path / "u2s", *outs[:2]]
    )
    assert r.rc != 0 and "contiguous" in r.err
    # key missing from utt2spk
    h.write_lines(tmp_path / "in", ["a 1", "zz 2"])
    r = tool(
        ["split_scp.pl", f"--utt2spk={tmp_path / 'u2s'}", tmp_path / "in", *outs[:2]]
    )
    assert r.rc != 0 and "zz" in r.err


def test_filter_scp(tmp_path, tool, h):
    d = h.make_data_dir(tmp_path / "d")
    h.write_lines(
        tmp_path / "ids",
        ["clotho-validation-00003 extra columns", "clotho-validation-00001"],
    )
    r = tool(["filter_scp.pl", tmp_path / "ids", d / "wav.scp"])
    assert r.rc == 0, r
    assert [line.split()[0] for line in r.out.splitlines()] == [
        "clotho-validation-00001",
        "clotho-validation-00003",
    ]
    assert (
        "/abs/audio dir/clotho-validation-00001.wav" in r.out
    )  # value with a space kept whole
    r = tool(["filter_scp.pl", "--exclude", tmp_path / "ids", d / "wav.scp"])
    assert [line.split()[0] for line in r.out.splitlines()] == [
        "clotho-validation-00002"
    ]
    r = tool(["filter_scp.pl", "-f", "2", tmp_path / "ids", d / "utt2spk"])
    assert len(r.out.splitlines()) == 7
    assert "clotho-validation-00002" not in r.out
    r = tool(["filter_scp.pl", tmp_path / "ids"], stdin=(d / "aud2name").read_text())
    assert len(r.out.splitlines()) == 2
    assert tool(["filter_scp.pl", tmp_path / "missing", d / "wav.scp"]).rc != 0


def test_utt2spk_spk2utt_round_trip(tmp_path, tool, h):
    d = h.make_data_dir(tmp_path / "d")
    r = tool(["utt2spk_to_spk2utt.pl", d / "utt2spk"])
    assert r.rc == 0, r
    assert r.out == (d / "spk2utt").read_text()
    r = tool(["spk2utt_to_utt2spk.pl"], stdin=(d / "spk2utt").read_text())
    assert r.rc == 0, r
    assert r.out == (d / "utt2spk").read_text()


@pytest.mark.parametrize(
    "name,bad",
    [("utt2spk_to_spk2utt.pl", "a b c\n"), ("spk2utt_to_utt2spk.pl", "lonely\n")],
)
def test_mapping_tools_reject_bad_lines(tool, name, bad):
    r = tool([name], stdin="ok-1 ok\n" + bad)
    assert r.rc != 0
    assert ":2:" in r.err
