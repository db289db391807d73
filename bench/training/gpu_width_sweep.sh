#!/usr/bin/env bash
# Width sweep on one GPU: tiertrain (bf16) and PyTorch bf16 eager, d in {768, 1600, 2560, 4096}, heads of 64, L4,
# T1024, B8, GPT-2 vocabulary on random tokens. Run after scripts/gpu.sh built build/gpu. Writes sweep_*.json and
# results.md (via bench/training/gpu_summary.py) into OUTDIR.
#   bench/training/gpu_width_sweep.sh OUTDIR
set -euo pipefail
OUT=${1:?usage: bench/training/gpu_width_sweep.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SHARD=/tmp/tiertrain-random-gpt2.bin
[ -f "$SHARD" ] || python3 tools/make_random_shard.py "$SHARD" --tokens 20000000
for d in 768 1600 2560 4096; do
  h=$((d / 64))
  build/gpu/src/tiertrain train --layers 4 --dim $d --heads $h --seq 1024 --batch 8 --data "$SHARD" --steps 20 \
    --warmup 5 --eval-every 0 --log-every 100 --metrics-out "$OUT/sweep_d${d}_tiertrain.json" > /dev/null
  python3 bench/training/torch_gpt_gpu.py --layers 4 --dim $d --heads $h --seq 1024 --batch 8 --steps 20 --warmup-steps 8 \
    --mode bf16 --json-out "$OUT/sweep_d${d}_torch.json" > /dev/null
done
python3 bench/training/gpu_summary.py "$OUT"
