"""captionlib.utils.provenance: the git revision and library versions a training run writes to
env.yaml, and how a resume in another environment keeps the old file."""

import logging
import subprocess

import pytest
import torch
import yaml

from captionlib.utils import provenance
from captionlib.utils.provenance import (
    NOT_RECORDED,
    code_revision,
    describe,
    environment,
    git_modified,
    git_revision,
    keep_previous,
    numbered_copies,
    run_environments,
    write_environment,
)


def _warnings(caplog):
    """The warnings logged (the INFO lines of write_environment are captured too where an
    earlier test of the process left the root logger at INFO)."""
    return [r for r in caplog.records if r.levelno >= logging.WARNING]

def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_environment_names_this_checkout_and_torch():
    root = provenance.source_dir()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"{root} is not a git checkout")
    env = environment("cpu")
    assert env["git_revision"] == head.stdout.strip()
    assert env["git_modified"] in (True, False)
    assert env["torch"] == torch.__version__ and env["cuda"] == torch.version.cuda
    assert list(env) == ["captionlib", "git_revision", "git_modified", "python", "torch", "cuda", "device", "cpu",
                         "threads"]
    assert env["threads"] == torch.get_num_threads() and env["cpu"]
    assert describe(env).startswith(f"captionlib {env['captionlib']} (git {head.stdout[:7]}")


def test_git_state_of_a_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    assert git_revision(repo) == "unknown" and git_modified(repo) is None  # not a repository
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "commit", "-q", "-m", "a")
    assert len(git_revision(repo)) == 40 and git_modified(repo) is False
    (repo / "untracked.py").write_text("")  # untracked files are not the code that ran
    assert git_modified(repo) is False
    (repo / "a.py").write_text("x = 2\n")
    assert git_modified(repo) is True and git_modified(repo, ["b"]) is False  # only the paths asked about


def test_a_copy_inside_another_repository_takes_not_its_revision(tmp_path, monkeypatch):
    """A wheel installed into a virtual environment that lies in some other git checkout (or
    a recipe's copy of the package) has no revision of its own; it must not report the
    other repository's HEAD."""
    repo = tmp_path / "other"
    (repo / "venv" / "site-packages").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "x").write_text("")
    _git(repo, "add", "x")
    _git(repo, "commit", "-q", "-m", "x")
    monkeypatch.setattr(provenance, "source_dir", lambda: repo / "venv" / "site-packages")
    assert code_revision() == ("unknown", None)
    monkeypatch.setattr(provenance, "source_dir", lambda: repo)
    revision, modified = code_revision()
    assert len(revision) == 40 and modified is False


def test_without_git_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert git_revision() == "unknown" and git_modified() is None
    env = environment()
    assert env["git_revision"] == "unknown" and env["git_modified"] is None
    assert "(no git revision)" in describe(env)
    assert describe(dict(env, threads=1)).endswith(f"cpu ({env['cpu']}), 1 thread")


def test_resume_in_another_environment_keeps_the_old_file(tmp_path, caplog):
    out = tmp_path / "exp"
    out.mkdir()
    first = dict(environment("cpu"), git_revision="a" * 40, git_modified=False)
    second = dict(first, git_revision="b" * 40, torch="9.9.9")
    write_environment(out, first, resuming=False)
    with caplog.at_level(logging.WARNING):
        write_environment(out, first, resuming=True)  # the same environment: nothing to say
        assert not _warnings(caplog)
        write_environment(out, second, resuming=True)
    msg = _warnings(caplog)[-1].getMessage()
    assert "env.yaml.1" in msg and f"'{'a' * 40}' -> '{'b' * 40}'" in msg and "torch" in msg
    assert yaml.safe_load((out / "env.yaml.1").read_text()) == first
    assert run_environments(out) == [first, second]
    write_environment(out, first, resuming=False)  # a fresh run replaces the one it overwrites
    assert sorted(p.name for p in out.iterdir()) == ["env.yaml"] and run_environments(out) == [first]
    assert run_environments(tmp_path) == []


def test_numbered_copies_in_order_with_gaps(tmp_path):
    for n in (2, 10, 1):
        (tmp_path / f"env.yaml.{n}").write_text("{}\n")
    (tmp_path / "env.yaml.01").write_text("")  # not a copy's name
    (tmp_path / "env.yaml.tmp").write_text("")
    assert [p.name for p in numbered_copies(tmp_path / "env.yaml")] == ["env.yaml.1", "env.yaml.2", "env.yaml.10"]
    (tmp_path / "env.yaml").write_text("{}\n")
    assert keep_previous(tmp_path / "env.yaml").name == "env.yaml.11"
    with pytest.raises(FileNotFoundError):
        keep_previous(tmp_path / "env.yaml")


def test_a_resumed_run_older_than_env_yaml_keeps_its_epochs_unattributed(tmp_path, caplog):
    env = environment()
    with caplog.at_level(logging.WARNING):
        write_environment(tmp_path, env, resuming=True)  # epochs trained by a captionlib without env.yaml
    assert "trained without env.yaml" in _warnings(caplog)[-1].getMessage()
    assert run_environments(tmp_path) == [NOT_RECORDED, env]
    assert describe(NOT_RECORDED) == "not recorded"


def test_an_unreadable_env_yaml_is_kept_and_training_goes_on(tmp_path, caplog):
    (tmp_path / "env.yaml").write_text("a: [1\n")
    with caplog.at_level(logging.WARNING):
        write_environment(tmp_path, environment(), resuming=True)
    assert "cannot read" in _warnings(caplog)[-1].getMessage() and (tmp_path / "env.yaml.1").is_file()
    with pytest.raises(ValueError, match=r"env\.yaml\.1: cannot read"):  # caption_results names it
        run_environments(tmp_path)


def test_a_bad_env_file_is_named(tmp_path):
    (tmp_path / "env.yaml").write_text("- a list\n")
    with pytest.raises(ValueError, match=r"env\.yaml: expected a YAML mapping"):
        run_environments(tmp_path)
