#!/usr/bin/env bash
# The Python wheels of the PyTorch baselines that the GPU machine (no PyPI) installs from .deps/hfwheels (carried to
# it; bench/llama/llama_gpu.sh installs them over its system torch): transformers and torchao (bench/llama/*.py's hf
# rows, torchao's CPUOffloadOptimizer) and DeepSpeed (ZeRO-Offload in bench/llama/torch_offload_gpu.py) with the
# dependencies torch's environment lacks. DeepSpeed is an sdist on PyPI: built here into a pure-Python wheel without
# its compiled ops (DeepSpeed builds CPUAdam with ninja at first use on the GPU machine). Run where PyPI is reachable,
# with a Python whose pip can build the sdist (PY, default python3; torch in it avoids DeepSpeed's warning).
#
#   bench/llama/fetch_wheels.sh [DIR]            DIR default .deps/hfwheels
set -euo pipefail
DIR=${1:-.deps/hfwheels}
PY=${PY:-python3}
mkdir -p "$DIR"
plat=(--only-binary :all: --python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64)
"$PY" -m pip download -q "${plat[@]}" -d "$DIR" transformers torchao
"$PY" -m pip download -q "${plat[@]}" --no-deps -d "$DIR" hjson ninja psutil py-cpuinfo nvidia-ml-py msgpack einops \
  pydantic pydantic-core annotated-types typing-inspection tqdm
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download -q --no-deps --no-binary :all: -d "$tmp" deepspeed
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIR" "$tmp"/deepspeed-*.tar.gz
ls "$DIR"
# The golden part's minimum (TT_HF_WHEELS=.deps/hfmin, installed with --no-deps): transformers' runtime without the
# Hub's download accelerator and command-line tools (hf_xet, typer, click, rich, pygments, pydantic, ...), small
# enough to carry beside .deps/debs (with transformers 5.25 the two come to 54 MiB; with the repository's files the
# carry is just over 64 MiB, so such a call carries the .deb files without the corpus's, fortunes, which the golden
# tests do not read: `mkdir .deps/dg && cp .deps/debs/*.deb .deps/dg && rm .deps/dg/fortunes_*`, then TT_DEBS=.deps/dg).
mkdir -p "$DIR/../hfmin"
for w in "$DIR"/*.whl; do
  case $(basename "$w") in
    hf_xet-*|pygments-*|rich-*|typer-*|click-*|markdown_it_py-*|mdurl-*|shellingham-*|pydantic*|annotated_*|\
    typing_inspection-*|tomlkit-*|torchao-*|deepspeed-*|hjson-*|ninja-*|psutil-*|py_cpuinfo-*|nvidia_ml_py-*|\
    msgpack-*|einops-*) ;;
    *) cp "$w" "$DIR/../hfmin/" ;;
  esac
done
