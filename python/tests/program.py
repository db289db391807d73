"""The tiertrain program the command-line tests run (they need only it, not the package): TT_TIERTRAIN_BIN, the
repository's build, or the one on PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def launcher() -> str:
    for path in (os.environ.get("TT_TIERTRAIN_BIN", ""), str(REPO / "build/release/src/tiertrain"),
                 shutil.which("tiertrain") or ""):
        if path and os.access(path, os.X_OK):
            return path
    pytest.fail("no tiertrain binary: build it (scripts/test.sh) or set TT_TIERTRAIN_BIN")
