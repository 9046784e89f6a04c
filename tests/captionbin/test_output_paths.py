"""Every binary that writes a file checks, before it reads or computes anything, that the file
can be written: an output path that is a directory, or lies under a file, is one line naming it
and exit 1 (they used to end in tracebacks, some after all their work; caption_results left a
``.tmp`` behind). The inputs here do not exist: the check must come first."""

import importlib

import pytest

# binary: (its arguments with {out} for the output, the output file checked in {out})
CASES = {
    "caption_compute_cider_df": (["--text", "{missing}", "--output", "{out}"], ""),
    "caption_compute_stats": (["--feats_scp", "{missing}", "--output", "{out}"], ""),
    "caption_results": (["--exp_dir", "{missing}", "--output", "{out}"], ""),
    "caption_pack": (["--model_file", "{missing}", "--feats_config", "{missing}", "--feats_stats", "{missing}",
                      "--cider_df", "{missing}", "--output", "{out}"], ""),
    "caption_prepare_clotho": (["--clotho_root", "{missing}", "--split", "development", "--output_dir", "{out}"],
                               "text"),
    "caption_dump_feats": (["--wav_scp", "{missing}", "--out_prefix", "{out}/feats.1"], "feats.1.scp"),
    "caption_import_feats": (["--clip2id", "{missing}", "--layout", "sc_fc", "--source", "{missing}",
                              "--out_prefix", "{out}/feats.1"], "feats.1.scp"),
}


@pytest.mark.parametrize("binary", sorted(CASES))
@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_an_output_that_cannot_be_written_is_refused_first(tmp_path, capsys, binary, where):
    args, inner = CASES[binary]
    (tmp_path / "a_file").write_text("x")
    if where == "a directory":  # the output file itself is a directory
        out = tmp_path / "a_dir"
        (out / inner).mkdir(parents=True)
    else:  # the output's directory is a file
        out = tmp_path / "a_file" / ("" if inner else "x.out")
    args = [a.replace("{out}", str(out).rstrip("/")).replace("{missing}", str(tmp_path / "missing")) for a in args]
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"captionbin.{binary}").main(args)
    err = capsys.readouterr().err
    assert e.value.code == 1 and "Traceback" not in err, err
    assert ("is a directory" if where == "a directory" else "a_file is not a directory") in err, err
    assert "missing" not in err.split("ERROR", 1)[-1], err  # refused before any input was read
    assert not list(tmp_path.rglob("*.tmp"))
