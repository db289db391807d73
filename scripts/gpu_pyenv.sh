#!/usr/bin/env bash
# On a machine that cannot reach PyPI (the GPU machine): a virtual environment over the system Python (its numpy and
# torch stay visible) with the tiertrain package and mpi4py installed from the files in .deps/wheels
# (scripts/gpu_fetch_debs.sh downloads them where PyPI is reachable). Prints the environment's python on the last line.
#   scripts/gpu_pyenv.sh [VENV]        (default /tmp/tt-pyenv)
# CMAKE_PREFIX_PATH must name where nlohmann_json and zlib are if they are not installed (scripts/gpu.sh sets it).
# TT_WHEELS names another folder of wheels (a slimmer one carried beside the full .deps/wheels, which may not fit the
# 64 MiB the device tool carries: mpi4py's sdist, scikit-build-core, pybind11, pathspec, packaging, setuptools, cython,
# pytest, iniconfig, pluggy, pygments).
set -euo pipefail
VENV=${1:-/tmp/tt-pyenv}
cd "$(dirname "$0")/.."
WHEELS=${TT_WHEELS:-.deps/wheels}
[[ $WHEELS = /* ]] || WHEELS=$PWD/$WHEELS
[ -x "$VENV/bin/python" ] || python3 -m venv --system-site-packages "$VENV" >&2
# Where python3 is itself a virtual environment (torch installed there), --system-site-packages sees only the base
# interpreter's packages: a .pth file adds python3's own site directories (their .pth files included) after the venv's.
own=$("$VENV/bin/python" -c "import site; print(site.getsitepackages()[0])")
[ -f "$own/tt_parent_env.pth" ] ||
  python3 -c "import site, sys; sys.prefix != sys.base_prefix and print('\n'.join('import site; site.addsitedir(%r)' % d for d in site.getsitepackages()))" \
    > "$own/tt_parent_env.pth"
pip=("$VENV/bin/python" -m pip install --no-index --find-links "$WHEELS" -q)
"$VENV/bin/python" -c "import numpy" 2>/dev/null || "${pip[@]}" numpy >&2 || echo "gpu_pyenv: no numpy" >&2
"$VENV/bin/python" -c "import pytest" 2>/dev/null || "${pip[@]}" pytest >&2 || echo "gpu_pyenv: no pytest" >&2
# mpi4py (built against this machine's MPI by its mpicc; only if there is one), while the tiertrain package builds:
# into a wheel first, kept in $VENV/wheels, so that it can be brought back into .deps/wheels (where a later fresh
# machine installs it in seconds: pip takes a wheel there over the source).
mpi_pid=""
if ! "$VENV/bin/python" -c "import mpi4py" 2>/dev/null && command -v mpicc >/dev/null; then
  (
    "$VENV/bin/python" -m pip wheel --no-index --find-links "$WHEELS" -q --no-deps mpi4py -w "$VENV/wheels" >&2 &&
      "${pip[@]}" --find-links "$VENV/wheels" mpi4py >&2
  ) || echo "gpu_pyenv: mpi4py did not build (the mpi4py rows will be missing)" >&2 &
  mpi_pid=$!
fi
# The package builds without pip's build isolation, its build requirements installed in the venv from the wheels: the
# .pth above makes the parent environment's packages visible inside an isolated build too, and scikit-build-core
# then asks for the PyPI cmake it finds there (the first call of 2026-11-30 failed so: "No matching distribution
# found for cmake>=3.25"); without isolation it uses the cmake it finds.
"${pip[@]}" scikit-build-core pybind11 >&2 || echo "gpu_pyenv: no scikit-build-core or pybind11 wheels" >&2
"${pip[@]}" --no-build-isolation . >&2 ||
  echo "gpu_pyenv: the tiertrain package did not build (the Python rows will be missing)" >&2
[ -z "$mpi_pid" ] || wait "$mpi_pid"
# Whether the GPU tests of python/tests can run here (they skip without torch and a CUDA device): said in the log.
"$VENV/bin/python" -c "import torch; print('gpu_pyenv: torch', torch.__version__, 'CUDA devices', torch.cuda.device_count())" >&2 ||
  echo "gpu_pyenv: torch does not import in the venv over $(command -v python3) (the torch CUDA test will skip)" >&2
echo "$VENV/bin/python"
