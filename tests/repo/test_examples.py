"""The README's and the guide's examples run as written (issue 44), with the tiertrain under test.

TT_TIERTRAIN_BIN names the program (scripts/test.sh sets it); without it the tests skip.
"""
import os
import pathlib
import subprocess

import pytest

from doc_blocks import DOCS_WITH_EXAMPLES, REPO, blocks, corpus_text

BIN = os.environ.get("TT_TIERTRAIN_BIN", "")
SH = [(doc, line, text) for doc in DOCS_WITH_EXAMPLES for (line, text, run) in blocks(doc, "sh") if run]


def test_there_are_examples_and_the_quick_start_is_not_run():
    assert len(SH) >= 5
    quick = [b for b in blocks("README.md", "sh") if "scripts/test.sh" in b[1]]
    assert quick and not any(run for (_, _, run) in quick)


@pytest.mark.parametrize("doc,line,text", SH, ids=[f"{d}:{l}" for (d, l, _) in SH])
def test_shell_example_runs(doc, line, text, tmp_path):
    if not BIN or not pathlib.Path(BIN).is_file():
        pytest.skip("TT_TIERTRAIN_BIN names no tiertrain program")
    (tmp_path / "corpus.txt").write_text(corpus_text())
    env = dict(os.environ)
    env["PATH"] = str(pathlib.Path(BIN).resolve().parent) + os.pathsep + env.get("PATH", "")
    env["TT_REPO"] = str(REPO)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # a calibration lands here, not in the user's cache
    env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "2")
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=tmp_path, env=env,
                       capture_output=True, timeout=300)
    out = (r.stdout + r.stderr).decode("utf-8", errors="replace")
    assert r.returncode == 0, f"{doc}:{line} exited {r.returncode}:\n{text}\n--- output ---\n{out[-4000:]}"
