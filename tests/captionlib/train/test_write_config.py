"""write_config on a resumed run: other options than the run started with are named in a warning,
and the old config.yaml is kept (the optimizer state of latest.pth keeps the old learning rate, so
the new file alone would misdescribe the model, and stage 10 packs it)."""

import logging

import pytest
import yaml

from captionlib.train.average import kept_by
from captionlib.train.fit import write_config
from captionlib.train.options import XEOptions
from captionlib.train.xe import read_feats_config


def test_changed_options_on_resume_are_named_and_the_old_config_kept(tmp_path, caplog):
    out = tmp_path / "exp"
    write_config(XEOptions(output_dir=str(out), lr=0.003))
    write_config(XEOptions(output_dir=str(out), lr=0.05))  # nothing trained yet: a fresh start
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml"]
    (out / "latest.pth").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        write_config(XEOptions(output_dir=str(out), lr=0.05))  # the same options: nothing to say
        assert not caplog.records
        write_config(XEOptions(output_dir=str(out), lr=0.1, max_epoch=30))
    msg = caplog.records[-1].getMessage()
    assert "lr: 0.05 -> 0.1" in msg and "max_epoch: 25 -> 30" in msg and "config.yaml.1" in msg
    assert yaml.safe_load((out / "config.yaml.1").read_text())["lr"] == 0.05
    assert yaml.safe_load((out / "config.yaml").read_text())["lr"] == 0.1
    write_config(XEOptions(output_dir=str(out), lr=0.2))
    assert (out / "config.yaml.2").is_file()


def test_options_added_since_or_runtime_ones_are_no_change(tmp_path, caplog):
    out = tmp_path / "exp"
    write_config(XEOptions(output_dir=str(out)))
    (out / "latest.pth").write_bytes(b"")
    old = yaml.safe_load((out / "config.yaml").read_text())
    del old["decode_compile"]  # a file written before the option existed
    (out / "config.yaml").write_text(yaml.safe_dump(old))
    with caplog.at_level(logging.WARNING):
        write_config(XEOptions(output_dir=str(out), num_workers=4, dry_run=True))
    assert not caplog.records and sorted(p.name for p in out.iterdir()) == ["config.yaml", "latest.pth"]


def test_unreadable_yaml_files_of_a_run_are_named(tmp_path):
    """The YAML files the trainers read back (config.yaml on resume and at averaging, a dump
    dir's feats_config.yaml) fail naming the file when they are not a YAML mapping."""
    out = tmp_path / "exp"
    write_config(XEOptions(output_dir=str(out)))
    (out / "latest.pth").write_bytes(b"")
    (out / "config.yaml").write_text("lr: [0.1\n")
    with pytest.raises(ValueError, match=f"{out / 'config.yaml'}: cannot read"):
        write_config(XEOptions(output_dir=str(out)))
    with pytest.raises(ValueError, match=f"{out / 'config.yaml'}: cannot read"):
        kept_by(str(out))
    (out / "config.yaml").write_text("- cider_d\n")
    with pytest.raises(ValueError, match=f"{out / 'config.yaml'}: expected a YAML mapping"):
        kept_by(str(out))
    (out / "config.yaml").unlink()
    assert kept_by(str(out)) == "cider_d"
    (out / "feats_config.yaml").write_text("fs 44100\n")
    with pytest.raises(ValueError, match=f"{out / 'feats_config.yaml'}: expected a YAML mapping"):
        read_feats_config(str(out))
