"""The command examples of the README and the guide, as the repository's tests run them.

A fenced block tagged ```sh (or ```python) is an example that a test runs, unless the line before its fence is
`<!-- not run: REASON -->`. Shell examples run with bash -e in a fresh folder holding a small corpus (corpus.txt),
with the tiertrain under test first on PATH and the repository's root in $TT_REPO.
"""
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS_WITH_EXAMPLES = ["README.md", "docs/GUIDE.md"]
_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: .+ -->$")


def blocks(doc, language):
    """(line, text, run) of every ```language block of doc (a path relative to the repository)."""
    lines = (REPO / doc).read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, tag = i, m.group(1)
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{doc}:{start + 1}: a code block that is never closed")
        i += 1
        if tag == language:
            run = not (start > 0 and _NOT_RUN.match(lines[start - 1].strip()))
            found.append((start + 1, "\n".join(body) + "\n", run))
    return found


def corpus_text():
    """About 60 KB of English-like text with some repetition, enough for the examples' tiny models."""
    words = ("the model trains on the host while the device computes the next block and the copies "
             "overlap with compute so that no stream waits for another one longer than it must").split()
    out, state = [], 7
    for _ in range(12000):
        state = (state * 1103515245 + 12345) % (1 << 31)
        out.append(words[state % len(words)])
        if state % 13 == 0:
            out.append(".\n")
    return " ".join(out)
