"""The .done markers of scripts/decode.sh and scripts/score.sh: a re-run with the same inputs is a
no-op, and an edited decode config, re-dumped features or other references redo the work (they
had kept the old captions and scores silently). The binaries are stood in for by a script that
records its calls, so only the shell logic runs."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# stands in for "python": records each call and writes what decode.sh and score.sh merge and check
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/calls"
binary=$2; shift 2
while [ $# -gt 0 ]; do
    case "$1" in
        --feats_scp) scp=$2; shift 2 ;;
        --output_dir) out=$2; shift 2 ;;
        --output) json=$2; shift 2 ;;
        *) shift ;;
    esac
done
case "${binary}" in
    captionbin.caption_decode) mkdir -p "${out}"; awk '{print $1, "a dog barks"}' "${scp}" > "${out}/text" ;;
    captionbin.caption_score) echo '{}' > "${json}"; echo '{}' > "$(dirname "${json}")/per_clip.json" ;;
esac
"""


def _setup(tmp_path):
    d = tmp_path / "recipe"
    d.mkdir()
    (d / "scripts").symlink_to(ROOT / "egs" / "TEMPLATE" / "scripts")
    (d / "utils").symlink_to(ROOT / "utils")
    fake = d / "fakepy"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    (d / "model.pth").write_bytes(b"model")
    (d / "decode.yaml").write_text("beam_size: 2\n")
    (d / "feats").mkdir()
    (d / "feats" / "feats.scp").write_text("c1 feats.1.ark:10\nc2 feats.1.ark:99\n")
    (d / "refs").mkdir()
    (d / "refs" / "text").write_text("c1-1 a dog barks\nc2-1 rain falls\n")
    return d


def _calls(d):
    path = d / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _run(d, script, *args):
    r = subprocess.run([f"scripts/{script}", "--python", str(d / "fakepy"), *args], cwd=d, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "LC_ALL": "C"})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_decode_is_redone_when_its_config_or_features_change(tmp_path):
    d = _setup(tmp_path)
    decode = ["decode.sh", "--nj", "1", "--decode_config", "decode.yaml", "model.pth", "feats", "out"]
    _run(d, *decode)
    assert _calls(d) == 1 and (d / "out" / "text").read_text() == "c1 a dog barks\nc2 a dog barks\n"
    assert "already decoded" in _run(d, *decode) and _calls(d) == 1
    (d / "decode.yaml").write_text("beam_size: 1\n")  # edited in place: same path, other options
    assert "already decoded" not in _run(d, *decode) and _calls(d) == 2
    (d / "feats" / ".done").write_text("feats_type=logmel other options\n")  # re-dumped in place
    assert "already decoded" not in _run(d, *decode) and _calls(d) == 3
    assert "already decoded" in _run(d, *decode) and _calls(d) == 3


def test_score_is_redone_when_the_references_change(tmp_path):
    d = _setup(tmp_path)
    (d / "out").mkdir()
    (d / "out" / "text").write_text("c1 a dog barks\nc2 a dog barks\n")
    score = ["score.sh", "--metrics", "bleu,cider_d", "refs", "out"]
    _run(d, *score)
    assert _calls(d) == 1 and "already scored" in _run(d, *score) and _calls(d) == 1
    (d / "refs" / "text").write_text("c1-1 a dog barks\nc2-1 a clock ticks\n")  # edited references
    assert "already scored" not in _run(d, *score) and _calls(d) == 2
    (d / "refs2").mkdir()  # the same references elsewhere: another data dir, scored again
    (d / "refs2" / "text").write_text((d / "refs" / "text").read_text())
    assert "already scored" not in _run(d, "score.sh", "--metrics", "bleu,cider_d", "refs2", "out")
    assert _calls(d) == 3


def test_score_is_redone_when_the_hypotheses_or_the_clip_grouping_change(tmp_path):
    """The hypotheses were covered by their modification time only (a file copied back with its
    old time kept the old score), and utt2spk/spk2utt not at all."""
    d = _setup(tmp_path)
    (d / "out").mkdir()
    hyp = d / "out" / "text"
    hyp.write_text("c1 a dog barks\nc2 a dog barks\n")
    (d / "refs" / "utt2spk").write_text("c1-1 c1\nc2-1 c2\n")
    score = ["score.sh", "--metrics", "bleu,cider_d", "refs", "out"]
    _run(d, *score)
    assert _calls(d) == 1
    os.utime(d / "out" / ".score.done", (1, 1))  # older than the hypotheses: still the same inputs
    assert "already scored" in _run(d, *score) and _calls(d) == 1
    hyp.write_text("c1 rain falls\nc2 a dog barks\n")
    os.utime(hyp, (1, 1))  # other hypotheses with an old modification time
    assert "already scored" not in _run(d, *score) and _calls(d) == 2
    (d / "refs" / "utt2spk").write_text("c1-1 c2\nc2-1 c1\n")  # regrouped references
    assert "already scored" not in _run(d, *score) and _calls(d) == 3
    (d / "out" / "text_samples").write_text("c1#1 a dog\nc2#1 rain\n")
    assert "already scored" not in _run(d, *score) and _calls(d) == 4
    assert "already scored" in _run(d, *score) and _calls(d) == 4


def test_a_failed_rescore_leaves_no_old_scores(tmp_path):
    """The previous score.json, per_clip.json and result.txt stayed after a failed re-score, and
    caption_results reported them; the console showed only run.pl's line."""
    d = _setup(tmp_path)
    (d / "out").mkdir()
    (d / "out" / "text").write_text("c1 a dog barks\nc2 a dog barks\n")
    _run(d, "score.sh", "--metrics", "bleu", "refs", "out")
    (d / "out" / "result.txt").write_text("BLEU-4 0.5\n")
    fail = d / "failpy"
    fail.write_text("#!/usr/bin/env bash\necho 'ValueError: out/text:2: no such clip' >&2\nexit 1\n")
    fail.chmod(0o755)
    r = subprocess.run(["scripts/score.sh", "--python", str(fail), "--metrics", "cider_d", "refs", "out"], cwd=d,
                       capture_output=True, text=True, timeout=600, env={**os.environ, "LC_ALL": "C"})
    assert r.returncode == 1 and "ValueError: out/text:2: no such clip" in r.stdout + r.stderr
    assert not any((d / "out" / f).exists() for f in ("score.json", "per_clip.json", "result.txt", ".score.done"))
