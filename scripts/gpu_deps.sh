# Sourced by the GPU scripts (scripts/gpu.sh, bench/training/ab_step_time.sh) from the repository root, with OUT set: makes
# the Debian packages of scripts/deps.sh available on a GPU machine that cannot install them, by unpacking the
# missing ones from .deps/debs/ (scripts/gpu_fetch_debs.sh, run where apt works) into a private prefix. Sets
# cmake_prefix (empty when nothing was unpacked), LD_LIBRARY_PATH and CMAKE_PREFIX_PATH, and DATA_DIR (the fortunes
# corpus). TT_DEBS names another folder of .deb files (e.g. one without the corpus's, for a call whose carry must stay
# under the device tool's 64 MiB beside a folder of wheels).
arch=x86_64-linux-gnu
debs=${TT_DEBS:-.deps/debs}
PREFIX=/tmp/tiertrain-deps
declare -A KEY=(
  [libopenblas-openmp-dev]=/usr/include/$arch/openblas-openmp/cblas.h
  [libopenblas0-openmp]=/usr/lib/$arch/openblas-openmp/libopenblas.so.0
  [libgfortran5]=/usr/lib/$arch/libgfortran.so.5
  [libquadmath0]=/usr/lib/$arch/libquadmath.so.0
  [libgtest-dev]=/usr/include/gtest/gtest.h
  [nlohmann-json3-dev]=/usr/include/nlohmann/json.hpp
  [libcli11-dev]=/usr/include/CLI/CLI.hpp
  [zlib1g-dev]=/usr/include/zlib.h
  [fortunes]=/usr/share/games/fortunes/fortunes
)
cmake_prefix=""
for pkg in "${!KEY[@]}"; do
  [ -e "${KEY[$pkg]}" ] && continue
  # (Unpacked by an earlier call on this machine: a later call need not carry the .deb files again.)
  if [ -e "$PREFIX${KEY[$pkg]}" ]; then cmake_prefix="$PREFIX/usr"; continue; fi
  deb=$(ls "$debs"/"${pkg}"_*.deb 2>/dev/null | head -n 1 || true)
  if [ -z "$deb" ]; then
    # (The tests' gtest and the default corpus are not needed by every call: a call that carries less goes on.)
    if [ "$pkg" = libgtest-dev ] || [ "$pkg" = fortunes ]; then
      echo "no ${KEY[$pkg]} here and no $debs/${pkg}_*.deb: the tests or the default corpus are unavailable" >&2
      continue
    fi
    echo "missing ${KEY[$pkg]} and no $debs/${pkg}_*.deb to unpack" >&2
    exit 1
  fi
  dpkg -x "$deb" "$PREFIX"
  cmake_prefix="$PREFIX/usr"
done
if [ -n "$cmake_prefix" ]; then
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/$arch:$PREFIX/usr/lib/$arch/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$cmake_prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  echo "unpacked missing packages into $PREFIX" | tee "$OUT/deps.log"
fi
DATA_DIR=/usr/share/games/fortunes
[ -d "$DATA_DIR" ] || DATA_DIR="$PREFIX/usr/share/games/fortunes"

