"""The `tiertrain` command of the Python package (a console script, and `python -m tiertrain`).

It runs the tiertrain program that `pip install .` built into the package (tiertrain/bin/tiertrain), or the one that
the environment variable TIERTRAIN_BIN names, with the same arguments, in this process (exec: signals, exit status
and the terminal are the program's). It also tells the program which Python this is (TIERTRAIN_PYTHON), so that
`tiertrain launch -n 2 -- python3 script.py` starts this interpreter, with this package, on every rank rather than
whichever python3 comes first on PATH.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BUNDLED = Path(__file__).resolve().parent / "bin" / "tiertrain"


def program() -> str:
    """The path of the tiertrain program this command runs; SystemExit with the reason when there is none."""
    named = os.environ.get("TIERTRAIN_BIN")
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise SystemExit(f"tiertrain: TIERTRAIN_BIN={named} is not an executable file")
        return named
    if BUNDLED.is_file() and os.access(BUNDLED, os.X_OK):
        return str(BUNDLED)
    raise SystemExit(
        "tiertrain: this package was built without the tiertrain program (pip install . with "
        "--config-settings=cmake.define.TIERTRAIN_PIP_CLI=OFF): install it again without that option, "
        "or name a built program with TIERTRAIN_BIN=/path/to/tiertrain"
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    exe = program()
    os.environ["TIERTRAIN_PYTHON"] = sys.executable
    os.execv(exe, ["tiertrain", *args])


if __name__ == "__main__":
    main()
