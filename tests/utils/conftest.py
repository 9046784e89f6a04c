"""Shared fixtures for the tests of the Kaldi-style command-line tools in ``utils/``."""

import os
import subprocess
from pathlib import Path

import pytest

UTILS = Path(__file__).resolve().parents[2] / "utils"


class Result:
    """Outcome of one tool invocation."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"Result(rc={self.rc}, out={self.out!r}, err={self.err!r})"


def run_tool(args, cwd=None, env=None, stdin=None, timeout=30):
    """Run ``utils/<args[0]>`` and capture its output.

    ``args`` may also be a bash snippet (str) or start with a path containing "/".
    """
    full_env = dict(os.environ)
    full_env["LC_ALL"] = "C"
    if env:
        full_env.update(env)
    if isinstance(args, str):
        cmd = ["bash", "-c", args]
    elif "/" in str(args[0]):
        cmd = [str(a) for a in args]
    else:
        cmd = [str(UTILS / args[0])] + [str(a) for a in args[1:]]
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(proc)


@pytest.fixture
def tool():
    """Callable running a utils/ tool: ``tool(["run.pl", "log", "true"], cwd=...)``."""
    return run_tool


CAPTIONS = {
    "clotho-validation-00001": [
        "a dog barks twice",
        "a dog is barking",
        "barking outside",
    ],
    "clotho-validation-00002": ["rain falls on a roof", "heavy rain"],
    "clotho-validation-00003": [
        "birds chirp",
        "birds sing in a forest",
        "a bird",
        "chirping",
    ],
}


def write_lines(path, lines):
    Path(path).write_text("".join(line + "\n" for line in lines))


def read_lines(path):
    return Path(path).read_text().splitlines()


def make_data_dir(path, captions=None, feats=False, prefix="clotho-validation"):
    """Write a consistent, sorted data dir (clip = speaker, caption = utterance)."""
    captions = captions if captions is not None else CAPTIONS
    if prefix != "clotho-validation":
        captions = {
            k.replace("clotho-validation", prefix): v for k, v in captions.items()
        }
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    clips = sorted(captions)
    write_lines(path / "wav.scp", [f"{c} /abs/audio dir/{c}.wav" for c in clips])
    write_lines(path / "reco2dur", [f"{c} {15 + i}.250" for i, c in enumerate(clips)])
    write_lines(
        path / "aud2name", [f"{c} Original name {i}.wav" for i, c in enumerate(clips)]
    )
    text, utt2spk, spk2utt = [], [], []
    for c in clips:
        ids = [f"{c}-{k}" for k in range(1, len(captions[c]) + 1)]
        text += [f"{u} {t}" for u, t in zip(ids, captions[c])]
        utt2spk += [f"{u} {c}" for u in ids]
        spk2utt.append(" ".join([c] + ids))
    write_lines(path / "text", text)
    write_lines(path / "utt2spk", utt2spk)
    write_lines(path / "spk2utt", spk2utt)
    if feats:
        write_lines(
            path / "feats.scp",
            [f"{c} /abs/dump/feats.1.ark:{10 + 100 * i}" for i, c in enumerate(clips)],
        )
        write_lines(
            path / "utt2num_frames", [f"{c} {700 + i}" for i, c in enumerate(clips)]
        )
        write_lines(path / "feats_dim", ["64"])
        write_lines(path / "feats_type", ["logmel"])
    return path


@pytest.fixture
def datadir(tmp_path):
    """A 3-clip, 9-caption data dir (no feats) at tmp_path/data."""
    return make_data_dir(tmp_path / "data")


@pytest.fixture
def dumpdir(tmp_path):
    """The same clips as a dump dir (with feats.scp, utt2num_frames, feats_dim)."""
    return make_data_dir(tmp_path / "dump", feats=True)


@pytest.fixture
def h():
    """Helper functions: make_data_dir, read_lines, write_lines, CAPTIONS, UTILS."""
    import types

    return types.SimpleNamespace(
        make_data_dir=make_data_dir,
        read_lines=read_lines,
        write_lines=write_lines,
        CAPTIONS=CAPTIONS,
        UTILS=UTILS,
    )
