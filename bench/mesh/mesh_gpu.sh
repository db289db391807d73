#!/usr/bin/env bash
# Issue 22's measurements on one machine with several GPUs, in one call: data parallel GPT-2 124M on 1, 2, 4, 8 GPUs
# (tokens/s, scaling efficiency); a GPT of 3.4B parameters (L16 d4096 T2048) on data x model meshes (MFU); the
# large-input workload's three input modes (the input stage, each rank's and the slowest); the d4096 out-of-core plan
# on every GPU of a data-parallel mesh against one GPU; a resume on another mesh shape. Every run is one `tiertrain
# launch -n K -- tiertrain ...` over the first K GPUs (a rank's GPU is its local rank); the data-parallel part runs
# PyTorch DDP with torch.compile beside it (bench/training/torch_gpt_gpu.py --ddp under torchrun).
#
#   bench/mesh/mesh_gpu.sh OUTDIR [dp tp input ooc resume]      # the parts (default: all)
#
# TT_MESH_CPU=1 runs the same steps on the CPU backend with a tiny model and 2 ranks (a check of the script itself;
# its numbers mean nothing). OUTDIR gets each run's log and metrics JSON, results.json and results.md
# (bench/mesh/mesh_summary.py), packed in results.tgz after each part.
set -euo pipefail
OUT=${1:?usage: bench/mesh/mesh_gpu.sh OUTDIR [dp tp input ooc resume]}
shift
parts=" ${*:-dp tp input ooc resume} "
source "$(dirname "$0")/../lib.sh"
cpu=${TT_MESH_CPU:-0}
if [ "$cpu" = 1 ]; then
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  cd "$(dirname "$0")/../.."
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  TT=${TT:-build/release/src/tiertrain}
  gpus=2
  dev=(--backend cpu --threads 1)
  gpt2=(--layers 2 --dim 64 --heads 4 --seq 64)
  big=(--layers 2 --dim 128 --heads 4 --seq 64)
  per_rank_batch=4 big_batch=4 steps=6 feat=(--samples 4096 --dim 256) feat_batch=512
else
  tt_gpu_setup "$OUT"
  tt_gpu_tiertrain
  gpus=${TT_GPUS:-$(nvidia-smi -L | wc -l)}
  dev=()
  gpt2=(--layers 12 --dim 768 --heads 12 --seq 1024)
  big=(--layers 16 --dim 4096 --heads 32 --seq 2048)
  per_rank_batch=16 big_batch=8 steps=30 feat=(--samples 65536 --dim 4096) feat_batch=16384
  { nvidia-smi; nvidia-smi topo -m; } > "$OUT/machine.txt" 2>&1 || true
fi
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
tt_random_shard
status=0
counts=()
for k in 1 2 4 8; do [ "$k" -le "$gpus" ] && counts+=("$k"); done

pack() {
  python3 bench/mesh/mesh_summary.py "$OUT" > /dev/null || status=1
  tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true
}
launch() {  # NAME RANKS ARGS...: one job, its log in OUT/NAME.log; prints its last line
  local name=$1 k=$2
  shift 2
  "$TT" launch -n "$k" -- "$TT" "$@" > "$OUT/$name.log" 2>&1 ||
    { echo "$name failed"; tail -5 "$OUT/$name.log"; status=1; return 0; }
  local line
  line=$(grep -o 'median.*' "$OUT/$name.log" | head -n 1 || true)
  echo "$name: ${line:-$(tail -n 1 "$OUT/$name.log")}"
}
train() {  # NAME RANKS MESH GLOBAL_BATCH MODEL_ARRAY_NAME EXTRA...
  local name=$1 k=$2 mesh=$3 batch=$4
  local -n model=$5
  shift 5
  launch "$name" "$k" train "${dev[@]}" "${model[@]}" --data "$SHARD" --batch "$batch" --mesh "$mesh" \
    --steps "$steps" --warmup 5 --eval-every 0 --log-every 10 --metrics-out "$OUT/$name.json" "$@"
}

if [[ $parts == *" dp "* ]]; then  # 1. data parallel GPT-2 124M, B16 a GPU; PyTorch DDP with torch.compile beside
  for k in "${counts[@]}"; do
    train "dp_n$k" "$k" "data=$k" $((per_rank_batch * k)) gpt2
    [ "$cpu" = 1 ] && continue
    torchrun --standalone --nproc_per_node="$k" bench/training/torch_gpt_gpu.py --ddp --compile "${gpt2[@]}" \
      --batch "$per_rank_batch" --steps 40 --warmup-steps 15 --mode bf16 --json-out "$OUT/dp_torch_n$k.json" \
      > "$OUT/dp_torch_n$k.log" 2>&1 || { echo "torch DDP n$k failed"; tail -5 "$OUT/dp_torch_n$k.log"; status=1; }
    echo "dp_torch_n$k: $(tail -n 1 "$OUT/dp_torch_n$k.log" | cut -c1-160)"
  done
  pack
fi
if [[ $parts == *" tp "* ]]; then  # 2. 3.4B parameters on data x model meshes, B8 a data rank
  meshes=()
  [ "$gpus" -ge 2 ] && meshes+=("model=2")
  [ "$gpus" -ge 4 ] && meshes+=("data=2,model=2" "model=4")
  [ "$gpus" -ge 8 ] && meshes+=("data=2,model=4" "data=4,model=2" "model=8")
  for mesh in "${meshes[@]}"; do
    data=1
    [[ $mesh == data=* ]] && data=${mesh#data=} && data=${data%%,*}
    k=$(( data * ${mesh##*model=} ))
    train "tp_${mesh//[=,]/_}" "$k" "$mesh" $((big_batch * data)) big
  done
  pack
fi
if [[ $parts == *" input "* ]]; then  # 3. the large-input workload: 256 MiB of features a step
  FEAT=/tmp/tiertrain-mesh-features
  [ -f "$FEAT/features.npy" ] || "$TT" gen-features --out "$FEAT" "${feat[@]}" --classes 16 > /dev/null
  for k in "${counts[@]}"; do
    [ "$k" -ge 2 ] || continue
    for input in direct via-root replicated; do
      launch "input_n${k}_$input" "$k" train-features "${dev[@]}" --data "$FEAT" --batch "$feat_batch" --hidden 64 \
        --steps 8 --mesh "data=$k" --input "$input" --metrics-out "$OUT/input_n${k}_$input.json"
    done
  done
  pack
fi
if [[ $parts == *" ooc "* ]]; then  # 4. the d4096 activation plan per rank: one GPU, then every GPU of the machine
  plan=(--plan swap-attention-recompute-mlp-norms --swap-slots 3)
  train ooc_n1 1 data=1 "$big_batch" big "${plan[@]}"
  [ "$gpus" -ge 2 ] && train "ooc_n$gpus" "$gpus" "data=$gpus" $((big_batch * gpus)) big "${plan[@]}"
  pack
fi
if [[ $parts == *" resume "* ]]; then  # 5. saved on one mesh shape, resumed on another: the same losses
  k=$(( gpus >= 2 ? 2 : 1 ))
  ck=/tmp/tiertrain-mesh-resume  # (checkpoints of the big model do not belong in OUTDIR)
  rm -rf "$ck"
  common=(train "${dev[@]}" "${gpt2[@]}" --data "$SHARD" --batch $((per_rank_batch * k)) --steps 12 --warmup 2
          --eval-every 0 --log-every 1)
  launch resume_straight "$k" "${common[@]}" --mesh "data=$k" --metrics-out "$OUT/resume_straight.json"
  launch resume_first "$k" "${common[@]}" --mesh "data=$k" --stop-at 6 --checkpoint-dir "$ck" --checkpoint-every 6
  launch resume_second "$k" "${common[@]}" --mesh "model=$k" --checkpoint-dir "$ck" --resume \
    --metrics-out "$OUT/resume_second.json"
  rm -rf "$ck"
  pack
fi
pack
cat "$OUT/results.md"
exit "$status"
