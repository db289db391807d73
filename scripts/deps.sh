#!/usr/bin/env bash
# Installs the Debian packages tiertrain needs to build and test, when they are missing. As root it runs apt-get;
# as another user it prints the exact command and stops. Sourced by scripts/train.sh and scripts/test.sh.
set -euo pipefail

TIERTRAIN_APT_PACKAGES=(
  build-essential cmake ninja-build git
  libopenblas-openmp-dev      # GEMM, OpenMP build (shares libgomp's threads with our kernels)
  libgtest-dev                # tests
  nlohmann-json3-dev          # JSON (config files, metrics, checkpoint metadata)
  libcli11-dev                # command line
  zlib1g-dev                  # CRC-32 of checkpoint tensors
  fortunes                    # the default corpus, /usr/share/games/fortunes
  python3 python3-numpy python3-pytest   # tensor-file tools and their tests
  python3-venv python3-pip python3-pybind11   # the Python package (pip install .) and its tests
  libopenmpi-dev openmpi-bin  # the MPI backend of the collectives, and mpirun for its tests
)

# The fuzz targets only (scripts/fuzz.sh): clang with libFuzzer and its OpenMP runtime.
TIERTRAIN_FUZZ_APT_PACKAGES=(clang libclang-rt-dev libomp-dev)

# tt_missing_packages [EXTRA...]: the packages of the list above (and EXTRA) not installed.
tt_missing_packages() {
  local missing=()
  for p in "${TIERTRAIN_APT_PACKAGES[@]}" "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  echo "${missing[@]:-}"
}

# tt_install_deps [EXTRA...]: installs what tt_missing_packages names.
tt_install_deps() {
  local missing
  missing=$(tt_missing_packages "$@")
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "tiertrain needs these Debian packages: $missing" >&2
    echo "install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y $missing" >&2
    exit 1
  fi
  echo "installing: $missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing
}

# nvcc is often installed outside PATH; CMake's CUDA detection looks on PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
