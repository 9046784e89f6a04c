"""The documentation: README.md is a short front door, every section of the long README it
replaced (commit 35d70c9) lives on in the file it moved to, and the relative links of README.md
and docs/*.md point to files (and headings) that exist."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200

# Every heading (#, ##, ###) and bold paragraph lead of the README before it became the front
# door (git show 35d70c9:README.md), with the file it moved to and its heading there: the old
# heading itself, or the agreed replacement. A heading matches a line "#... <heading>" or a bold
# lead "**<heading>**" that starts with it (trailing dots ignored).
OLD_SECTIONS = {
    "captionlib": ("README.md", "captionlib"),
    "Set up and check": ("README.md", "Set up and check"),
    "The soundscapes recipe: where learning is measured": (
        "README.md", "The soundscapes recipe: where learning is measured"),
    "The Clotho recipe": ("egs/clotho/README.md", "The Clotho recipe: data, splits and presets"),
    "Pretrained encoders.": ("egs/clotho/README.md", "Pretrained encoders."),
    "A frozen encoder's outputs, computed once.": ("egs/clotho/README.md", "A frozen encoder's outputs, computed once"),
    "Fine-tuning a pretrained encoder": ("egs/clotho/README.md", "Fine-tuning a pretrained encoder"),
    "Stages (`egs/TEMPLATE/caption.sh`; `./run.sh --stage N --stop_stage M`)": (
        "docs/pipeline.md", "Stages (`egs/TEMPLATE/caption.sh`; `./run.sh --stage N --stop_stage M`)"),
    "The AudioCaps recipe": ("egs/audiocaps/README.md", "AudioCaps (Kim et al. 2019) audio captioning"),
    "Image and video recipes": ("docs/pipeline.md", "Image and video recipes"),
    "Caption your own audio, images and videos": ("docs/inference.md", "Caption your own audio, images and videos"),
    "Loading never runs code.": ("docs/inference.md", "Loading never runs code."),
    "Running on a cluster": ("docs/cluster.md", "Running on a cluster"),
    "Several GPUs or processes: data-parallel training (stages 5 and 6)": (
        "docs/cluster.md", "Several GPUs or processes: data-parallel training (stages 5 and 6)"),
    "Speed": ("bench/README.md", "Speed"),
    "CPU.": ("bench/README.md", "CPU."),
    "GPU.": ("bench/README.md", "GPU."),
    "GPU, 2026-11-26: compiled sampling and `--sample_logprobs recompute`.": (
        "bench/README.md", "GPU, 2026-11-26: compiled sampling and `--sample_logprobs recompute`."),
    "GPU, 2026-11-27: the loop as one CUDA graph, and one pass for the baseline and the samples.": (
        "bench/README.md",
        "GPU, 2026-11-27: the loop as one CUDA graph, and one pass for the baseline and the samples."),
    "The whole recipe on a GPU, at a quarter of Clotho's size.": (
        "bench/README.md", "The whole recipe on a GPU, at a quarter of Clotho's size."),
    "The whole recipe at Clotho's size.": ("bench/README.md", "The whole recipe at Clotho's size."),
    "Rerun on a clean clone, 2026-11-28.": ("bench/README.md", "Rerun on a clean clone, 2026-11-28."),
    "Beam search against a per-clip loop: 20-25x on a GPU, under 10x on 2 CPU cores.": (
        "bench/README.md", "Beam search against a per-clip loop: 20-25x on a GPU, under 10x on 2 CPU cores."),
    "Layout": ("docs/developers.md", "Layout"),
    "For developers": ("docs/developers.md", "For developers"),
}

HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
BOLD_LEAD = re.compile(r"^\*\*(.+?)\*\*")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _strip(text: str) -> str:
    return text.strip().rstrip(".").strip()


def _headings(path: Path):
    """The headings and bold paragraph leads of a Markdown file (outside code blocks)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        m = HEADING.match(line) or BOLD_LEAD.match(line)
        if m:
            out.append(m[1])
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _doc_files():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("old", sorted(OLD_SECTIONS))
def test_every_old_readme_section_lives_on(old):
    rel, heading = OLD_SECTIONS[old]
    path = ROOT / rel
    assert path.is_file(), f"{old!r} moved to {rel}, which does not exist"
    found = [h for h in _headings(path) if _strip(h).startswith(_strip(heading))]
    assert found, f"old README section {old!r}: no heading or bold lead {heading!r} in {rel}"


def test_every_moved_section_is_in_a_documentation_file():
    allowed = {"README.md", "bench/README.md"}
    for rel, _ in OLD_SECTIONS.values():
        assert rel in allowed or re.fullmatch(r"docs/[^/]+\.md|egs/[^/]+/README\.md", rel), rel


@pytest.mark.parametrize("doc", _doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(doc):
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # no links in code blocks
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            bad.append(f"{target} (no file {dest.relative_to(ROOT) if ROOT in dest.parents else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in {_slug(h) for h in _headings(dest)}:
            bad.append(f"{target} (no heading with anchor #{anchor} in {dest.relative_to(ROOT)})")
    assert not bad, f"{doc.relative_to(ROOT)}: broken links: " + "; ".join(bad)


def test_readme_commands_name_real_targets_and_paths():
    """What the front door runs exists: the make targets, the demo's fixture, and the packed
    model paths are those stage 10 writes (<model_dir>/packed/<model stem>.zip)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in re.findall(r"make ([a-z-]+)", text):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), f"make {target}: no such target"
    assert (ROOT / "egs" / "mini_clotho" / "clotho_fixture" / "evaluation").is_dir()
    assert "_packed=${_dir}/packed/$(basename \"${_model}\" .pth).zip" in (
        ROOT / "egs" / "TEMPLATE" / "caption.sh").read_text(encoding="utf-8")
    assert "exp/xe_train_xe_logmel_word_w2v/packed/valid.cider_d.best.zip" in text


# ------------------------------------------------------------------ docs/design.md
_REPO_PATH = re.compile(r"(?:egs|captionlib|captionbin|tests|utils|bench|docs)/[\w./<>-]*|setup\.py|\.importlinter")


def _module_file(dotted: str):
    """``(file, rest)``: the longest prefix of ``dotted`` that is a module or package of the
    repository, and the attribute path after it."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if f.is_file():
                return f, parts[n:]
    return None, parts


def test_every_path_and_module_the_design_names_exists():
    text = (ROOT / "docs" / "design.md").read_text()
    names = re.findall(r"`([^`\s]+)`", text)
    checked = 0
    for name in names:
        name = name.rstrip(",.")
        if name.startswith("captionlib.") or name.startswith("captionbin."):
            f, rest = _module_file(name)
            assert f is not None, f"docs/design.md names {name}: no such module"
            if rest:  # a class, function or constant defined at the top of that module
                src = f.read_text()
                assert re.search(rf"^(class|def) {rest[0]}\b|^{rest[0]}\b.*=", src, re.M), (name, f)
            checked += 1
        elif re.fullmatch(r"caption_[a-z0-9_]+", name) and not name.endswith("_"):
            assert (ROOT / "captionbin" / f"{name}.py").is_file(), f"docs/design.md names {name}: no such binary"
            checked += 1
        elif _REPO_PATH.fullmatch(name) and "<" not in name:
            assert (ROOT / name.rstrip("/")).exists(), f"docs/design.md names {name}: no such path"
            checked += 1
    assert checked > 40, checked  # the design names that many; fewer means the parsing broke
