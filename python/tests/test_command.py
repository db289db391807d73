"""The package's `tiertrain` command (console script and `python -m tiertrain`): it runs the tiertrain program (the
one built into the package, or TIERTRAIN_BIN), says what to do when there is none, and makes `launch -- python3`
start this interpreter on every rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tiertrain.__main__ as command
from test_comm import launcher

SCRIPT = Path(sys.executable).parent / "tiertrain"  # where pip put the console script, beside this interpreter


def env_with(**changes: str | None) -> dict:
    env = dict(os.environ)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


@pytest.mark.parametrize("how", ["script", "module"])
def test_runs_the_program_with_the_arguments(how):
    if how == "script" and not SCRIPT.exists():
        pytest.skip(f"no console script at {SCRIPT} (the package is not installed into this interpreter's prefix)")
    argv = [str(SCRIPT)] if how == "script" else [sys.executable, "-m", "tiertrain"]
    out = subprocess.run([*argv, "--version"], env=env_with(TIERTRAIN_BIN=launcher()), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "tiertrain 0.1.0"
    # The program's own exit status and messages come through: an unknown subcommand is a usage error (2).
    bad = subprocess.run([*argv, "no-such-command"], env=env_with(TIERTRAIN_BIN=launcher()), capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2, bad.stderr
    assert "no-such-command" in bad.stderr


def test_without_a_program_it_says_what_to_do(tmp_path):
    env = env_with(TIERTRAIN_BIN=None)
    if command.BUNDLED.exists():
        # Built with the program (pip install . as the README says): that program runs.
        out = subprocess.run([sys.executable, "-m", "tiertrain", "--version"], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "tiertrain 0.1.0", out.stderr
    else:
        out = subprocess.run([sys.executable, "-m", "tiertrain", "--version"], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 1
        assert "TIERTRAIN_PIP_CLI=OFF" in out.stderr and "TIERTRAIN_BIN" in out.stderr
    missing = subprocess.run([sys.executable, "-m", "tiertrain", "--version"],
                             env=env_with(TIERTRAIN_BIN=str(tmp_path / "nothing")), capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 1
    assert "is not an executable file" in missing.stderr


def test_launch_starts_this_interpreter_for_python3(tmp_path):
    # PATH leads to the system's python3 first; the ranks must still run this interpreter (its prefix: the venv).
    path = "/usr/bin:/bin:" + os.environ.get("PATH", "")
    code = "import sys; print('prefix', sys.prefix)"
    out = subprocess.run([sys.executable, "-m", "tiertrain", "launch", "-n", "2", "--", "python3", "-c", code],
                         env=env_with(TIERTRAIN_BIN=launcher(), PATH=path), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "unknown environment variable" not in out.stderr, out.stderr
    lines = sorted(line for line in out.stdout.splitlines() if "prefix" in line)
    assert lines == [f"[rank 0] prefix {sys.prefix}", f"[rank 1] prefix {sys.prefix}"], out.stdout
    # An explicit path is the user's choice, left alone.
    out = subprocess.run([sys.executable, "-m", "tiertrain", "launch", "-n", "1", "--", "/usr/bin/python3", "-c",
                          code], env=env_with(TIERTRAIN_BIN=launcher(), PATH=path), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "prefix /usr" in out.stdout
