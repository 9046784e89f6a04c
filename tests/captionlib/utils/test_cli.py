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
