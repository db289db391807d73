#!/usr/bin/env bash
# Every test: builds (Release, with CUDA sources when nvcc is found) and runs the C++ tests with CTest and the
# Python tool tests with pytest. GPU tests skip with a message on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
tt_install_deps
cmake --preset release
cmake --build --preset release
# One test at a time: the kernels use every core, and OpenMP threads of two tests would fight for them.
ctest --preset release -j1
# The Debian interpreter, which the apt packages above serve (a pyenv or venv python3 on PATH may lack them).
/usr/bin/python3 -m pytest -q -p no:cacheprovider tools
