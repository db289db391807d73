"""One registry of environment variables (issue 44): src/core/env.cc declares every variable the product reads.

Fails when product code reads the environment around the registry (getenv, environ, os.environ of an undeclared
name), when a name the code asks the registry for is not declared, or when a variable of ours has another prefix
than TIERTRAIN_. `tiertrain --print-config` must list every declared variable.
"""
import os
import re
import subprocess

import pytest

from doc_blocks import REPO

REGISTRY = REPO / "src/core/env.cc"
CPP = [p for p in sorted((REPO / "src").rglob("*")) + sorted((REPO / "python").rglob("*.cc"))
       if p.suffix in (".h", ".cc", ".cu", ".cuh", ".inc") and p != REGISTRY]
PY = sorted((REPO / "python/tiertrain").rglob("*.py"))


def code_lines(path):
    """(number, line) of a C++ file, comments dropped (// to the end of a line; block comments are not used)."""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)  # strings blanked, so "//" in one is not a comment
        cut = code.find("//")
        yield n, (line[:cut] if cut >= 0 else line)


def declared():
    """name -> (kind, old name) from the registry's table."""
    text = REGISTRY.read_text(encoding="utf-8")
    table = text[text.index("constexpr Param kParams[] = {"):text.index("constexpr size_t kCount")]
    out = {}
    for m in re.finditer(r'\{"([A-Z0-9_]+)",(.*?)\},?\n(?=\s*(?:\{|//|\}))', table, re.S):
        kind = re.search(r"Kind::(k\w+)", m.group(2))
        old = re.search(r'Kind::k\w+,\s*"([A-Z0-9_]+)"', m.group(2))
        assert m.group(1) not in out, f"{m.group(1)} declared twice"
        out[m.group(1)] = (kind.group(1) if kind else "kSetting", old.group(1) if old else None)
    assert len(out) >= 30, f"only {len(out)} variables parsed from the registry's table"
    return out


def test_no_product_code_reads_the_environment_around_the_registry():
    bad = []
    for p in CPP:
        for n, line in code_lines(p):
            if re.search(r"\b(secure_)?getenv\s*\(|\benviron\b", line):
                bad.append(f"{p.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bad, "read the environment through core/env.h (env::get) instead:\n" + "\n".join(bad)


def test_every_name_asked_for_is_declared():
    names = declared()
    asked = set()
    for p in CPP:
        for n, line in code_lines(p):
            for m in re.finditer(r'env::(?:get|get_or|is_set)\("([A-Za-z0-9_]+)"', p.read_text(encoding="utf-8").splitlines()[n - 1]):
                asked.add((m.group(1), f"{p.relative_to(REPO)}:{n}"))
    assert len(asked) >= 20
    missing = [f"{where}: {name}" for name, where in sorted(asked) if name not in names]
    assert not missing, "not declared in src/core/env.cc:\n" + "\n".join(missing)


def test_the_python_package_reads_only_declared_variables():
    names = declared()
    bad = []
    for p in PY:
        text = p.read_text(encoding="utf-8")
        for m in re.finditer(r'os\.(?:environ\.get|getenv|environ\.setdefault)\(\s*"([^"]+)"|os\.environ\["([^"]+)"\]', text):
            name = m.group(1) or m.group(2)
            if name not in names:
                bad.append(f"{p.relative_to(REPO)}: {name}")
    assert not bad, "not declared in src/core/env.cc:\n" + "\n".join(bad)


def test_ours_have_one_prefix():
    for name, (kind, old) in declared().items():
        if kind != "kOutside":
            assert name.startswith("TIERTRAIN_"), f"{name}: ours take the TIERTRAIN_ prefix"


def test_print_config_lists_every_variable():
    binary = os.environ.get("TT_TIERTRAIN_BIN", "")
    if not binary or not os.path.isfile(binary):
        pytest.skip("TT_TIERTRAIN_BIN names no tiertrain program")
    env = dict(os.environ, TIERTRAIN_COMM_TIMEOUT="7")
    out = subprocess.run([binary, "--print-config"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    for name in declared():
        assert f"  {name} = " in out.stdout, f"--print-config does not list {name}"
    assert "  TIERTRAIN_COMM_TIMEOUT = 7  [setting" in out.stdout
