"""The repository's documents: links resolve, benchmark records are whole and small, the front page stays one.

Issue 44: every figure the README or docs state links to its record; docs/benchmarks holds a folder per current
claim (README.md, results.json, each under 300 KB, the whole under 3 MB); docs/ARCHITECTURE.md under 15 KB; the README
a front page with exactly two quick-start commands; nothing refers to files outside the repository.
"""
import pathlib
import re
import subprocess

import pytest

from doc_blocks import REPO, blocks

MARKDOWN = sorted(
    p for p in REPO.glob("**/*.md")
    # Not the build, and not hidden folders (.git, and a developer's .ab_old or .deps beside the checkout's files).
    if not any(part in ("build", "node_modules") or part.startswith(".") for part in p.relative_to(REPO).parts)
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)


def tracked_text_files():
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    keep = (".md", ".h", ".cc", ".cu", ".cuh", ".py", ".sh", ".txt", ".json", ".cmake", ".toml")
    for name in out.stdout.splitlines():
        p = REPO / name
        if p.suffix in keep and "docs/benchmarks/" not in name and p.is_file():
            yield p


def anchors(md):
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in md.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#+\s+(.*)$", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(a)
    return out


@pytest.mark.parametrize("md", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(md):
    text = md.read_text(encoding="utf-8")
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z]+:", target) or target.startswith("#") and not target[1:]:
            continue
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading '{anchor}' in {dest.name}")
    assert not bad, f"{md.relative_to(REPO)}: " + "; ".join(bad)


def test_every_benchmark_record_cited_exists():
    cited = re.compile(r"docs/benchmarks/([0-9]{4}-[0-9]{2}-[0-9]{2}-[a-z0-9-]+)")
    bad = []
    for p in tracked_text_files():
        for m in cited.finditer(p.read_text(encoding="utf-8", errors="replace")):
            if not (REPO / "docs/benchmarks" / m.group(1)).is_dir():
                bad.append(f"{p.relative_to(REPO)}: docs/benchmarks/{m.group(1)}")
    assert not bad, "records cited that do not exist:\n" + "\n".join(sorted(set(bad)))


def test_nothing_refers_to_files_outside_the_repository():
    outside = "../" + "shared/"  # spelled apart, so that this file does not name it
    bad = [str(p.relative_to(REPO)) for p in tracked_text_files()
           if outside in p.read_text(encoding="utf-8", errors="replace")]
    assert not bad, f"files that cite {outside}: " + ", ".join(bad)


def test_benchmark_records_are_whole_and_small():
    root = REPO / "docs/benchmarks"
    total = 0
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        total += size
        assert (folder / "README.md").is_file(), f"{folder.name}: no README.md"
        assert (folder / "results.json").is_file(), f"{folder.name}: no results.json"
        assert size < 300 * 1024, f"{folder.name}: {size} bytes (at most 300 KiB a record)"
        assert not list(folder.rglob("*.log")), f"{folder.name}: raw logs belong in one compressed archive"
        assert folder.name in (root / "README.md").read_text(encoding="utf-8"), f"{folder.name}: not in the index"
    assert total < 3 * 1024 * 1024, f"docs/benchmarks holds {total} bytes (at most 3 MiB)"


def test_the_readme_is_a_front_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 130
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    at = readme[: readme.index("## Quick start")].count("\n")
    first = [b for b in blocks("README.md", "sh") if b[0] > at][0]
    commands = [l.strip() for l in first[1].splitlines() if l.strip() and not l.strip().startswith("#")]
    assert commands == ["scripts/train.sh", "scripts/test.sh"], commands
    assert "scripts/test.sh --full" in quick
    # Every row of the headline table links to its record.
    table = readme.split("## Headline results", 1)[1].split("\n## ", 1)[0]
    rows = [l for l in table.splitlines() if l.startswith("| ") and not l.startswith("| ---") and "what" not in l[:8]]
    assert rows, "no headline table"
    for row in rows:
        assert re.search(r"\]\[[a-z0-9]+\]|\]\(docs/benchmarks/", row), f"a headline without its record: {row}"


def test_the_architecture_stays_short():
    size = (REPO / "docs/ARCHITECTURE.md").stat().st_size
    assert size < 15 * 1024, f"docs/ARCHITECTURE.md is {size} bytes (under 15 KiB)"


def test_source_files_the_docs_name_exist():
    """A path such as `exec/trainer.h` or src/plan/schedule.cc in a document names a file of src/ (or tests/)."""
    path = re.compile(r"\b(?:src/|tests/)?((?:core|memory|comm|host|backend|model|data|mesh|plan|exec|apps|perf|cli)"
                      r"/[a-z_0-9/]+\.(?:h|cc|cu|cuh))\b")
    bad = []
    for md in MARKDOWN:
        if "docs/benchmarks/" in str(md.relative_to(REPO)) + "/":
            continue
        for m in path.finditer(md.read_text(encoding="utf-8")):
            if not ((REPO / "src" / m.group(1)).exists() or (REPO / "tests" / m.group(1)).exists()):
                bad.append(f"{md.relative_to(REPO)}: {m.group(0)}")
    assert not bad, "documents name source files that do not exist:\n" + "\n".join(sorted(set(bad)))
