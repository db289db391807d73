#!/usr/bin/env bash
# A short GPU call for cuDNN's fused attention (issue 23) with binaries built on a developer machine of the same
# tree and carried (build/release: Release, sm_90), for when the device time left is too short to build there:
# the cuDNN tests (loader and graph data, BackendOps attention under our kernels and attention_impl=cudnn against the
# CPU, cuDNN against our kernels, the backward bit-identical over runs), the bit-exact GPU trainer tests, then GPT-2
# 124M B16 T1024 with attention_impl=cudnn and =native and an op profile of the cuDNN run. cuDNN is the PyTorch
# environment's wheel (9.19), found through LD_LIBRARY_PATH by the tests and --cudnn-library by tiertrain.
#
#   bench/training/cudnn_carried_gpu.sh OUTDIR        (run tool: carry build/release/{src/tiertrain,tests/...}, .deps/debs)
set -uo pipefail
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source scripts/gpu_deps.sh
W=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn 2>/dev/null | head -n 1)
export LD_LIBRARY_PATH="$W/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
B=build/release
{ nvidia-smi; ls "$W/lib"; } > "$OUT/machine.txt" 2>&1
echo "cuDNN wheel: $W"
t0=$(date +%s)
summary() { echo "$1: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$2" | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"; }
$B/tests/cudnn_test > "$OUT/cudnn_test.log" 2>&1; summary cudnn_test "$OUT/cudnn_test.log"
timeout 90 $B/tests/backend_ops_test --gtest_filter='*Attention*' > "$OUT/backend_ops_attention.log" 2>&1
summary "backend_ops_test *Attention*" "$OUT/backend_ops_attention.log"
grep -E "cuDNN|Failure|FAILED|Which is|differs|worst" "$OUT/backend_ops_attention.log" | sort | uniq -c | head -20
timeout 100 $B/tests/trainer_test --gtest_filter='TrainerCuda.*' > "$OUT/trainer_cuda.log" 2>&1
summary "trainer_test TrainerCuda.*" "$OUT/trainer_cuda.log"
grep -E "Failure|FAILED|differ|skipped|cuDNN" "$OUT/trainer_cuda.log" | head -10
python3 tools/make_random_shard.py /tmp/shard.bin --tokens 4000000 > /dev/null 2>&1
g=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16 --data /tmp/shard.bin --eval-every 0 --cudnn-library "$W/lib")
for impl in cudnn native; do
  timeout 60 $B/src/tiertrain train "${g[@]}" --attention-impl $impl --steps 25 --warmup 5 --log-every 5 \
    --debug INFO --debug-subsys PERF --metrics-out "$OUT/tiertrain_gpt2_b16_$impl.json" > "$OUT/tiertrain_gpt2_b16_$impl.log" 2>&1
  echo "gpt2 B16 $impl: $(grep -o 'median.*' "$OUT/tiertrain_gpt2_b16_$impl.log" | head -n 1) ($(( $(date +%s) - t0 )) s)"
done
grep -h -m3 -E "attention B|cuDNN" "$OUT/tiertrain_gpt2_b16_cudnn.log"
timeout 40 $B/src/tiertrain train "${g[@]}" --attention-impl cudnn --steps 8 --warmup 2 --log-every 100 --profile \
  > "$OUT/profile_tiertrain_cudnn_gpt2_b16.txt" 2>&1
grep -E "attention_(forward|backward)" "$OUT/profile_tiertrain_cudnn_gpt2_b16.txt" | head -4
echo "total $(( $(date +%s) - t0 )) s"
