"""--help of every binary: each option shows one default, the usage line names the command as it
was invoked, configargparse's boilerplate (with its link to an unrelated site) is not shown; and
the console scripts of setup.py (tools/venv/bin/caption_*) run from any shell."""

import argparse
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from captionlib.utils.cli import HelpFormatter, command_name, get_base_parser

REPO = Path(__file__).resolve().parents[2]
BINS = sorted(p.stem for p in (REPO / "captionbin").glob("caption_*.py"))
VENV_BIN = REPO / "tools" / "venv" / "bin"


def _help(name):
    r = subprocess.run([sys.executable, "-m", f"captionbin.{name}", "--help"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def helps():
    return {name: _help(name) for name in BINS}


@pytest.mark.parametrize("name", BINS)
def test_each_option_shows_one_default(name):
    parser = importlib.import_module(f"captionbin.{name}").get_parser()
    formatter = parser._get_formatter()
    assert isinstance(formatter, HelpFormatter)
    twice = []
    for action in parser._actions:
        if action.help in (None, argparse.SUPPRESS):
            continue
        text = formatter._get_help_string(action)
        if len(re.findall(r"(?<!%)\(default\b", text, re.IGNORECASE)) > 1:
            twice.append(f"{'/'.join(action.option_strings) or action.dest}: {text}")
    assert not twice, "\n".join(twice)


def test_help_text_has_no_default_twice(helps):
    pattern = re.compile(r"\(default[^()]*(?:\([^()]*\)[^()]*)*\)\s*\(default", re.IGNORECASE)
    for name, text in helps.items():
        assert not pattern.search(" ".join(text.split())), f"{name} --help shows a default twice"


def test_usage_names_the_command(helps):
    for name, text in helps.items():
        first = text.splitlines()[0]
        assert first.startswith(f"usage: python -m captionbin.{name} "), first
        assert f"{name}.py" not in text.split("\n\n")[0], first


def test_no_configargparse_boilerplate(helps):
    for name, text in helps.items():
        assert "getgrav" not in text, name
        assert "Args that start with '--'" not in text, name
        assert "can also be set in a config file" not in text, name


def test_config_help_says_what_a_config_is(helps):
    text = " ".join(helps["caption_infer"].split())
    assert "YAML config: a mapping of option names without '--'" in text


def test_command_name():
    assert command_name("/opt/x/tools/venv/bin/caption_infer") == "caption_infer"
    assert command_name("caption_train.py") == "caption_train"  # not run with -m captionbin (this process)
    assert get_base_parser("d", prog="caption_x").prog == "caption_x"


def _console_script(name):
    script = VENV_BIN / name
    if not script.is_file():
        pytest.skip(f"{script} is not installed (pip install -e . installs the console scripts of setup.py)")
    return script


def test_console_script_runs_help_without_activation(tmp_path):
    script = _console_script("caption_infer")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"  # a fresh shell: no venv on PATH
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: caption_infer "), r.stdout[:200]
    assert "--model MODEL" in r.stdout


def test_every_installed_entry_point_has_its_script():
    """Each captionbin console script of the installed distribution is in tools/venv/bin; a binary
    added since the last "pip install -e ." (make demo and make test rerun it) is skipped."""
    from importlib.metadata import distributions

    _console_script("caption_infer")
    # every installed captionlib distribution: a stale captionlib.egg-info in the checkout (on
    # sys.path under pytest) may come first and hold no entry points
    installed = {e.name: e.value for d in distributions() if (d.metadata["Name"] or "") == "captionlib"
                 for e in d.entry_points if e.group == "console_scripts" and e.value.startswith("captionbin.")}
    assert installed, "no captionbin console scripts installed"
    for name, value in installed.items():
        assert value == f"captionbin.{name}:main", (name, value)
        assert (VENV_BIN / name).is_file(), name
    not_yet = sorted(set(BINS) - set(installed))
    if not_yet:
        pytest.skip(f"binaries newer than the install (rerun pip install -e .): {not_yet}")


def test_setup_py_lists_every_binary():
    text = (REPO / "setup.py").read_text()
    assert 'glob("caption_*.py")' in text and '"console_scripts": console_scripts' in text
