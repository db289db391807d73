"""The two tiers of tests (issue 44): each entry of tests/CMakeLists.txt's long tier (TT_FULL_TESTS_<binary>, a gtest
filter) labels at least one CTest test `full`, and no test of the long tier runs in the fast one. A filter that
matches nothing (gtest numbers a parameterised test from 0 where CTest names it by the parameter's value) would
otherwise leave its slow tests in the fast tier without a word.

TT_TIERTRAIN_BIN (build/release/src/tiertrain, set by scripts/test.sh) locates the build; without it the test skips.
"""
import fnmatch
import os
import pathlib
import re
import subprocess

import pytest

from doc_blocks import REPO


def ctest_names(build, *args):
    out = subprocess.run(["ctest", "--test-dir", str(build), "-N", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return re.findall(r"Test +#\d+: (\S+)", out.stdout)


def test_every_long_tier_filter_labels_tests():
    binary = os.environ.get("TT_TIERTRAIN_BIN", "")
    if not binary or not os.path.isfile(binary):
        pytest.skip("TT_TIERTRAIN_BIN names no tiertrain program")
    build = pathlib.Path(binary).resolve().parents[1]
    full, fast = ctest_names(build, "-L", "full"), ctest_names(build, "-LE", "full")
    assert full and fast
    assert not set(full) & set(fast)
    entries = re.findall(r'set\(TT_FULL_TESTS_(\w+) "([^"]+)"\)', (REPO / "tests/CMakeLists.txt").read_text())
    assert entries, "no TT_FULL_TESTS_ entries"
    for binary_name, filt in entries:
        # CTest's names carry a parameter's value where gtest's carry its index: compare without the last /part.
        pats = [p.rsplit("/", 1)[0] if re.search(r"/\d+$", p) else p for p in filt.split(":")]
        labelled = [n for n in full if any(fnmatch.fnmatch(n.rsplit("/", 1)[0] if re.search(r"/\d+$", n) else n, p)
                                           for p in pats)]
        assert labelled, f"TT_FULL_TESTS_{binary_name} '{filt}' labels no test `full`"
    # The multi-rank stress at 4 ranks is in the long tier, and the same checks at fewer ranks in the fast one.
    assert any(re.fullmatch(r"Ranks/CommRanks\.\w+/4", n) for n in full)
    assert not any(re.fullmatch(r"Ranks/CommRanks\.\w+/4", n) for n in fast)
    assert any(re.fullmatch(r"Ranks/CommRanks\.\w+/3", n) for n in fast)
