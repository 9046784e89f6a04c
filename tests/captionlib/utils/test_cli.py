"""Strict option parsing of the binaries: no abbreviations, no duplicate YAML keys."""

import pytest

from captionbin.caption_dump_feats import get_parser
from captionlib.utils.cli import parse_args, yaml_dict


def _parse(tmp_path, yaml_text, *cmd):
    conf = tmp_path / "conf.yaml"
    conf.write_text(yaml_text)
    return parse_args(get_parser(), ["--config", str(conf), *cmd])


def test_full_keys_parse(tmp_path):
    args = _parse(tmp_path, "n_mels: 40\n")
    assert args.n_mels == 40


@pytest.mark.parametrize("text, cmd", [("n_mel: 40\n", ()), ("", ("--n_mel", "40"))])
def test_abbreviated_keys_are_errors(tmp_path, text, cmd, capsys):
    with pytest.raises(SystemExit) as e:
        _parse(tmp_path, text, *cmd)
    assert e.value.code == 2 and "n_mel" in capsys.readouterr().err


def test_duplicate_yaml_key_is_an_error_naming_the_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _parse(tmp_path, "n_mels: 40\nn_fft: 1024\nn_mels: 64\n")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "duplicate key 'n_mels'" in err and "line 3" in err


def test_duplicate_key_in_a_nested_mapping():
    assert yaml_dict("{dropout: 0.3, rnn_units: 8}") == {"dropout": 0.3, "rnn_units": 8}
    with pytest.raises(Exception, match="duplicate key 'dropout'"):
        yaml_dict("{dropout: 0.3, dropout: 0.1}")


def _parse_train(tmp_path, yaml_text):
    from captionbin.caption_train import get_parser as train_parser

    conf = tmp_path / "train.yaml"
    conf.write_text(yaml_text)
    return parse_args(train_parser(), ["--config", str(conf)])


def test_a_key_without_value_is_not_the_default(tmp_path, capsys):
    """configargparse dropped ``lr:`` (a forgotten value) and used the default silently."""
    with pytest.raises(SystemExit) as e:
        _parse_train(tmp_path, "lr:\n")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "train.yaml: key 'lr' has no value (null)" in err and "default 0.0005" in err
    assert _parse_train(tmp_path, "init_param: null\n").init_param is None  # where None is the default
    from captionbin.caption_train import get_parser as train_parser

    conf = tmp_path / "train.yaml"
    conf.write_text("lr:\n")  # given on the command line: nothing is lost
    assert parse_args(train_parser(), ["--config", str(conf), "--lr", "0.1"]).lr == 0.1
    assert parse_args(train_parser(), ["--config", str(conf), "--lr", "0.0005"]).lr == 0.0005  # even the default


def test_nested_mappings_keep_their_yaml_types(tmp_path):
    """configargparse handed a mapping on as Python's str() of it: 1e-05 came back a string and
    None the string 'None'."""
    args = _parse_train(tmp_path, "encoder_conf:\n  lr_factor: 0.00001\n  freeze: null\n  path: 'a\\\\b'\n")
    assert args.encoder_conf == {"lr_factor": 1e-05, "freeze": None, "path": "a\\\\b"}
