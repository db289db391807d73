#!/usr/bin/env bash
# The nccl backend against raw NCCL and PyTorch on the GPUs of this machine (issue 5): allreduce, allgather,
# reduce_scatter and broadcast of float32 from 8 B to 1 GiB, one rank per GPU; tiertrain's blocking calls and its
# stream-ordered ones (--stream), bench/nccl_raw_bench (NCCL with nothing of ours around it: queued, and each call
# waited for) and torch.distributed.
# Run after scripts/gpu.sh (or any build with NCCL) made build/gpu. Writes JSON, logs and results.md into OUTDIR.
#   bench/comm/nccl_gpu.sh OUTDIR
# TT_NCCL_RANKS (default: the GPUs, at most 8), TT_NCCL_MAX (default 1G), TT_NCCL_COLLECTIVES, TT the binary.
set -uo pipefail
OUT=${1:?usage: bench/comm/nccl_gpu.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TT=${TT:-build/gpu/src/tiertrain}
RAW=$(dirname "$(dirname "$TT")")/bench/nccl_raw_bench
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
n=${TT_NCCL_RANKS:-$(( gpus < 8 ? gpus : 8 ))}
MAX=${TT_NCCL_MAX:-1G}
sweep=(-b 8 -e "$MAX" -f 4 -n 20 -w 5)
lim=${TT_NCCL_RUN_TIMEOUT:-120}  # seconds a run may take
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1 || true
for c in ${TT_NCCL_COLLECTIVES:-allreduce allgather reduce_scatter broadcast}; do
  timeout "$lim" "$TT" launch -n "$n" -- "$TT" comm-bench --backend nccl -C "$c" "${sweep[@]}" -c 1 \
    --json "$OUT/tt_${c}_$n.json" > "$OUT/tt_${c}_$n.log" 2>&1 || tail -3 "$OUT/tt_${c}_$n.log"
  timeout "$lim" "$TT" launch -n "$n" -- "$TT" comm-bench --backend nccl --stream -C "$c" "${sweep[@]}" -c 1 \
    --json "$OUT/ttstream_${c}_$n.json" > "$OUT/ttstream_${c}_$n.log" 2>&1 || tail -3 "$OUT/ttstream_${c}_$n.log"
  timeout "$lim" "$TT" launch -n "$n" -- "$RAW" -C "$c" "${sweep[@]}" --json "$OUT/raw_${c}_$n.json" > "$OUT/raw_${c}_$n.log" 2>&1 ||
    tail -3 "$OUT/raw_${c}_$n.log"
  # Raw NCCL waited for after each call: the like-for-like reference of the blocking calls.
  timeout "$lim" "$TT" launch -n "$n" -- "$RAW" --blocking -C "$c" "${sweep[@]}" --json "$OUT/rawblock_${c}_$n.json" \
    > "$OUT/rawblock_${c}_$n.log" 2>&1 || tail -3 "$OUT/rawblock_${c}_$n.log"
  if python3 -c "import torch" 2>/dev/null; then
    timeout "$lim" "$TT" launch -n "$n" -- python3 bench/comm/torch_collective_bench.py -C "$c" "${sweep[@]}" \
      --json "$OUT/torch_${c}_$n.json" > "$OUT/torch_${c}_$n.log" 2>&1 || tail -3 "$OUT/torch_${c}_$n.log"
  fi
done
python3 bench/comm/nccl_summary.py "$OUT"
