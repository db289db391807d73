#!/usr/bin/env bash
# Downloads (where apt works) the .deb files scripts/gpu.sh unpacks on a GPU machine that cannot install packages.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs
cd .deps/debs
apt-get download libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 libgtest-dev \
  nlohmann-json3-dev libcli11-dev zlib1g-dev fortunes
# The Python build tools and sources scripts/gpu_pyenv.sh installs offline: the tiertrain package's build backend,
# and mpi4py (the Open MPI reference of the collectives' benchmark) with what its build needs.
mkdir -p ../wheels
cd ../wheels
pip download --no-deps -q -d . scikit-build-core pybind11 pathspec packaging
pip download --no-deps -q -d . --only-binary :all: --platform any --python-version 3.12 cython build pyproject_hooks \
  setuptools
pip download --no-deps -q -d . --no-binary :all: mpi4py
# pytest (and what it needs) for the Python package's tests there.
pip download -q -d . --only-binary :all: --platform any --python-version 3.12 pytest
# numpy for the GPU machine's Python (3.12), which has torch but not numpy.
pip download --no-deps -q -d . --only-binary :all: --platform manylinux_2_28_x86_64 --python-version 3.12 \
  --implementation cp numpy
# CUPTI (CUDA 13.0) for bench/training/kernel_gaps_gpu.sh where the toolkit lacks extras/CUPTI.
pip download --no-deps -q -d . --only-binary :all: --platform manylinux_2_25_x86_64 "nvidia-cuda-cupti==13.0.*"
# transformers, tokenizers and safetensors (and what they need beside torch) for the golden tests against
# transformers' classes there (tools/hf_golden.py; issue 45).
pip download -q -d . --only-binary :all: --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any --python-version 3.12 --implementation cp transformers tokenizers \
  safetensors
# .deps/wslim: what scripts/gpu_pyenv.sh installs, alone (TT_WHEELS=.deps/wslim; about 21 MiB), for the calls that
# carry it beside .deps/debs within the device tool's 64 MiB, which the whole of .deps/wheels exceeds
# (bench/comm/mpi4py_same_host.sh).
mkdir -p ../wslim
cp scikit_build_core-*.whl pybind11-*.whl pathspec-*.whl packaging-*.whl cython-*.whl setuptools-*.whl \
  mpi4py-*.tar.gz pytest-*.whl iniconfig-*.whl pluggy-*.whl pygments-*.whl numpy-*.whl ../wslim/
