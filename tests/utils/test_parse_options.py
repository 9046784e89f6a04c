"""Tests for utils/parse_options.sh (sourced by a small caller script)."""

import pytest

CALLER = """#!/usr/bin/env bash
set -euo pipefail
nj=4
use_gpu=false
feats_type=logmel
empty_default=
help_message="Usage: caller.sh [options] <in> <out>"
. {utils}/parse_options.sh
echo "nj=$nj use_gpu=$use_gpu feats_type=$feats_type empty_default=$empty_default"
echo "nargs=$#"
for a in "$@"; do echo "arg=$a"; done
"""


@pytest.fixture
def caller(tmp_path, h, tool):
    path = tmp_path / "caller.sh"
    path.write_text(CALLER.format(utils=h.UTILS))
    path.chmod(0o755)

    def call(*args):
        return tool([path, *args], cwd=tmp_path)

    return call


def test_dash_and_underscore_set_variable(caller):
    r = caller(
        "--use-gpu", "true", "--feats_type", "fb ank", "--nj", "3", "in dir", "out"
    )
    assert r.rc == 0, r
    assert "nj=3 use_gpu=true feats_type=fb ank" in r.out
    assert "nargs=2" in r.out
    assert "arg=in dir\narg=out\n" in r.out


def test_empty_default_variable_can_be_set(caller):
    r = caller("--empty-default", "x")
    assert r.rc == 0, r
    assert "empty_default=x" in r.out


def test_unknown_option_is_an_error(caller):
    r = caller("--no-such-option", "3", "a")
    assert r.rc != 0
    assert "invalid option --no-such-option" in r.err
    assert "nj=" not in r.out


def test_equals_form_is_rejected(caller):
    r = caller("--nj=3")
    assert r.rc != 0
    assert "--nj=3" in r.err and "not supported" in r.err


def test_boolean_check(caller):
    r = caller("--use_gpu", "yes")
    assert r.rc != 0
    assert "boolean" in r.err
    assert caller("--use_gpu", "false").rc == 0


def test_missing_value(caller):
    r = caller("--nj")
    assert r.rc != 0
    assert "requires a value" in r.err


def test_help_prints_help_message_and_exits_zero(caller):
    r = caller("--help")
    assert r.rc == 0
    assert "Usage: caller.sh [options] <in> <out>" in r.err + r.out
    assert "nj=" not in r.out
    assert caller("-h").rc == 0


def test_config_file_is_sourced_and_command_line_wins(caller, tmp_path):
    (tmp_path / "my.conf").write_text("nj=7\nfeats_type=fbank\n")
    r = caller("--nj", "2", "--config", str(tmp_path / "my.conf"), "x")
    assert r.rc == 0, r
    assert "nj=2 use_gpu=false feats_type=fbank" in r.out
    assert caller("--config", str(tmp_path / "missing.conf")).rc != 0


def test_double_dash_ends_options(caller):
    r = caller("--", "--nj", "2")
    assert r.rc == 0, r
    assert "nj=4" in r.out
    assert "arg=--nj\narg=2\n" in r.out
