#!/usr/bin/env bash
# Downloads (where apt works) the .deb files scripts/gpu.sh unpacks on a GPU machine that cannot install packages.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs
cd .deps/debs
apt-get download libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 libgtest-dev \
  nlohmann-json3-dev libcli11-dev zlib1g-dev fortunes
