#!/usr/bin/env bash
# Sampling on one GPU (issue 24), in one call: build (Release, sm_90) tiertrain and the tests that check the KV cache
# on CUDA (generate_test: cached and uncached samples draw the same text; backend_ops_test: attention_decode against
# the CPU), then the speed of `tiertrain sample` with and without the cache: GPT-2 124M (vocabulary 50257, T 1024)
# and GPT-2 350M-shaped (d1024 L24), each a checkpoint of two steps on random tokens, 2000 tokens drawn with the
# cache after a one-token prompt (the context restarts once it fills 1024), with its step replayed as a CUDA graph
# and launched kernel by kernel, and 500 without the cache (a forward per token), in bf16 and f32.
#
#   bench/sample/sample_gpu.sh OUTDIR [all|ncu]
#
# ncu: instead of the table, Nsight Compute's duration of every kernel of a 20-token sample of GPT-2 124M (bf16, one
# prefill then 19 tokens through the cache), summed by kernel name in ncu_kernels.md.
#
# OUTDIR gets the logs, results.md (a table) and everything packed in results.tgz.
set -uo pipefail
OUT=${1:?usage: bench/sample/sample_gpu.sh OUTDIR [all|ncu]}
part=${2:-all}
source "$(dirname "$0")/../lib.sh"
tt_gpu_setup "$OUT"
echo "${TT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"
nvidia-smi > "$OUT/machine.txt" 2>&1
status=0
pack() { tar -czf "$OUT/results.tgz" -C "$OUT" --exclude results.tgz . 2>/dev/null || true; }
trap pack EXIT
tt_gpu_build "$OUT" tiertrain generate_test backend_ops_test || status=1
TT=build/gpu/src/tiertrain

build/gpu/tests/generate_test > "$OUT/test_generate.log" 2>&1 || status=1
echo "generate_test: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_generate.log" | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure' -A6 "$OUT/test_generate.log" | head -30
build/gpu/tests/backend_ops_test --gtest_filter='*Attention*' > "$OUT/test_backend_ops.log" 2>&1 || status=1
echo "backend_ops_test Attention: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_backend_ops.log" | tr '\n' ' ')"
grep -E 'attention_decode' "$OUT/test_backend_ops.log" | head -10

tt_random_shard
if [ "$part" = ncu ]; then
  ck=/tmp/tt-sample-124M
  "$TT" train --layers 12 --dim 768 --heads 12 --seq 1024 --batch 4 --steps 2 --warmup 1 --eval-every 0 \
    --data "$SHARD" --checkpoint-dir "$ck" > "$OUT/train_124M.log" 2>&1 || { tail -5 "$OUT/train_124M.log"; exit 1; }
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu.csv" \
    "$TT" sample "$ck" --tokens 20 --dtype bf16 > "$OUT/ncu_sample.log" 2>&1 || { status=1; tail -5 "$OUT/ncu_sample.log"; }
  python3 - "$OUT/ncu.csv" > "$OUT/ncu_kernels.md" <<'PY'
import csv, sys, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
tot, cnt = collections.Counter(), collections.Counter()
for r in rows:
    v = float(r["Metric Value"].replace(",", ""))
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[r["Metric Unit"]]
    name = r["Kernel Name"][:90]
    tot[name] += v * scale
    cnt[name] += 1
all_us = sum(tot.values())
print(f"{len(rows)} kernels, {all_us:.0f} us in all\n")
print("| kernel | launches | total us | us each |\n|---|---:|---:|---:|")
for name, us in tot.most_common(25):
    print(f"| `{name}` | {cnt[name]} | {us:.0f} | {us / cnt[name]:.1f} |")
PY
  cat "$OUT/ncu_kernels.md"
  exit $status
fi
echo "| model | dtype | mode | tokens | seconds | tokens/s | full forwards | ms a token: enqueue / wait / draw |" > "$OUT/results.md"
echo "|---|---|---|---:|---:|---:|---:|---|" >> "$OUT/results.md"
for shape in "124M:12:768:12" "350M:24:1024:16"; do
  IFS=: read -r name layers dim heads <<< "$shape"
  ck=/tmp/tt-sample-$name
  rm -rf "$ck"
  "$TT" train --layers "$layers" --dim "$dim" --heads "$heads" --seq 1024 --batch 4 --steps 2 --warmup 1 \
    --eval-every 0 --data "$SHARD" --checkpoint-dir "$ck" > "$OUT/train_$name.log" 2>&1 ||
    { status=1; tail -5 "$OUT/train_$name.log"; continue; }
  for dtype in bf16 f32; do
    for kv in kv-cache kv-cache-no-graph no-kv-cache; do
      log="$OUT/sample_${name}_${dtype}_${kv}.log"
      n=2000
      flags=(--kv-cache)
      [ "$kv" = kv-cache-no-graph ] && flags=(--kv-cache --no-cuda-graph)
      [ "$kv" = no-kv-cache ] && { flags=(--no-kv-cache); n=500; }  # a forward per token: the same rate at any length
      "$TT" sample "$ck" --tokens "$n" --dtype "$dtype" "${flags[@]}" --seed 1 > "$log" 2>&1 || { status=1; tail -3 "$log"; }
      # --- sample of ... (step 2): 2000 tokens after a prompt of 1, in S s (R tokens/s, F full forwards) ---
      line=$(grep -m1 -- '--- sample of' "$log")
      secs=$(sed -E 's/.* in ([0-9.]+) s \(.*/\1/' <<< "$line")
      rate=$(sed -E 's/.*\(([0-9.]+) tokens\/s.*/\1/' <<< "$line")
      full=$(sed -E 's/.*, ([0-9]+) full forwards.*/\1/' <<< "$line")
      # (a token: E ms enqueuing the model, W ms waiting for it, D ms drawing)
      split=$(grep -m1 '^(a token:' "$log" | sed -E 's/.*: ([0-9.]+) ms enq.*, ([0-9.]+) ms wait.*, ([0-9.]+) ms draw.*/\1 \/ \2 \/ \3/')
      echo "| GPT-2 $name | $dtype | $kv | $n | $secs | $rate | $full | $split |" >> "$OUT/results.md"
    done
  done
done
cat "$OUT/results.md"
exit $status
