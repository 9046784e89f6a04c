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


@pytest.mark.parametrize("text, cmd, expected", [
    ("lr: abc\n", (), "train.yaml: argument --lr: invalid float value: 'abc'"),
    ("lr: .inf\n", (), "train.yaml: argument --lr: expected a finite number, got 'inf'"),
    ("lr: 1\n", ("--lr", "nan"), "argument --lr: expected a finite number, got 'nan'"),
    ("lr: -1\n", (), "train.yaml: lr must be > 0, got -1.0"),
    ("optim: sgdd\n", (), "train.yaml: argument --optim: invalid choice: 'sgdd'"),
    ("lrr: 1\nbatch_size: 2\n", ("--foo", "1"), "train.yaml: unknown key 'lrr'; unrecognized arguments: --foo 1"),
])
def test_errors_name_the_config_file_of_their_key(tmp_path, capsys, text, cmd, expected):
    """A bad value read from a config file was reported as '--lr', an option on no command line;
    and nan or inf passed every range check."""
    from captionbin.caption_train import get_parser as train_parser
    from captionlib.train.options import XEOptions
    from captionlib.utils.cli import parse_options

    conf = tmp_path / "train.yaml"
    conf.write_text(text)
    required = ["--train_data_dir", "d", "--valid_data_dir", "d", "--token_list", "t", "--output_dir", "o"]
    with pytest.raises(SystemExit) as e:
        parse_options(train_parser(), XEOptions, ["--config", str(conf), *required, *cmd])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and f"error: {expected.replace('train.yaml', str(conf))}" in err, err
    if cmd and cmd[0] == "--lr":  # the key given on the command line is not blamed on the file
        assert "train.yaml" not in err


def test_mapping_options_take_key_value_items_that_update_the_config(tmp_path, capsys):
    """ESPnet's --encoder_conf num_blocks=6: a key of the config's mapping, the others kept (a
    mapping on the command line replaces the config's; --*_args of caption.sh split at spaces)."""
    from captionbin.caption_train import get_parser as train_parser

    conf = tmp_path / "train.yaml"
    conf.write_text("decoder_conf: {hidden_size: 16, dropout: 0.3}\nencoder_conf: {rnn_units: 8}\nlr: 0.001\n")

    def parse(*cmd):
        return parse_args(train_parser(), ["--config", str(conf), *cmd])

    args = parse("--decoder_conf", "dropout=0.5", "--decoder_conf=num_layers=2",
                 "--encoder_conf", "transformer.d_model=8", "--encoder_conf", "transformer.nhead=2", "--lr", "0.01")
    assert args.decoder_conf == {"hidden_size": 16, "dropout": 0.5, "num_layers": 2} and args.lr == 0.01
    assert args.encoder_conf == {"rnn_units": 8, "transformer": {"d_model": 8, "nhead": 2}}
    assert parse("--decoder_conf", "{hidden_size: 4}", "--decoder_conf", "x=[1, 2]").decoder_conf == {
        "hidden_size": 4, "x": [1, 2]}
    assert parse().decoder_conf == {"hidden_size": 16, "dropout": 0.3}
    assert parse("--decoder_conf", "dropout=1e-1").decoder_conf["dropout"] == 0.1  # a float, not '1e-1'
    conf.write_text("decoder_conf: {dropout: 1E-1}\n")
    assert parse().decoder_conf == {"dropout": 0.1}
    assert parse("--decoder_conf", "a: 1").decoder_conf == {"a": 1}  # YAML, not key=value
    with pytest.raises(SystemExit) as e:
        parse("--decoder_conf", "x=[1")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error: argument --decoder_conf: x=[1: the value is not YAML: expected ','" in err
    assert "train.yaml: argument" not in err
