#!/usr/bin/env bash
# Note [prefetches to the host in pieces] (src/backend/cuda/um.cc), A/B on one GPU: GPT-2 B16 with activations out of
# core through managed memory (um-swap-activations) with the prefetches to the host whole (--um-host-piece-mib 0,
# as before) and in 32 MiB pieces, alternated, REPS times each; the explicit copies (swap-activations) once for the
# ratio; a trace of each um-swap-activations kind for the rate of its prefetches. Expects build/gpu/src/tiertrain
# (scripts/gpu_tests.sh or bench/training/engine_gpu.sh build it). Managed memory is never oversubscribed.
#   bench/um/um_pieces_gpu.sh OUTDIR [REPS, default 2]
set -uo pipefail
OUT=${1:?usage: bench/um/um_pieces_gpu.sh OUTDIR [REPS]}
reps=${2:-2}
source "$(dirname "$0")/../lib.sh"
mkdir -p "$OUT"
TT=build/gpu/src/tiertrain
[ -x "$TT" ] || { echo "no $TT: build first"; exit 1; }
tt_random_shard
g=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 16 --data "$SHARD")
status=0
run() {  # NAME PIECE_MIB FLAGS...
  local name=$1 piece=$2
  shift 2
  "$TT" train "${g[@]}" --um-host-piece-mib "$piece" "$@" --steps 30 --warmup 5 --eval-every 0 --log-every 10 \
    --metrics-out "$OUT/$name.json" > "$OUT/$name.log" 2>&1 ||
    { echo "$name failed"; tail -5 "$OUT/$name.log"; status=1; }
  echo "$name: $(grep -o 'median.*' "$OUT/$name.log" | head -n 1)"
}
for r in $(seq 1 "$reps"); do
  run "um_swap_whole_$r" 0 --plan um-swap-activations
  run "um_swap_pieces_$r" 32 --plan um-swap-activations
done
run swap_explicit 32 --plan swap-activations
for piece in 0 32; do
  "$TT" train "${g[@]}" --um-host-piece-mib "$piece" --plan um-swap-activations --steps 6 --warmup 2 --eval-every 0 \
    --log-every 100 --trace "$OUT/trace_um_swap_piece$piece.json" > "$OUT/trace_um_swap_piece$piece.log" 2>&1 || true
done
python3 - "$OUT" <<'PY' || true
import json, sys, glob, os
out = sys.argv[1]
for f in sorted(glob.glob(os.path.join(out, "trace_um_swap_piece*.json"))):
    ev = json.load(open(f))
    ev = ev.get("traceEvents", ev) if isinstance(ev, dict) else ev
    tot_b = tot_us = 0.0
    for e in ev:
        n = e.get("name", "")
        if e.get("ph") == "X" and n.startswith("um_out"):  # the swapped blocks' pages to the host (d2h stream)
            tot_us += e.get("dur", 0)
            tot_b += float(e.get("args", {}).get("bytes", 0))
    if tot_us:
        print(f"{os.path.basename(f)}: prefetches to the host {tot_b/1e9:.2f} GB in {tot_us/1e3:.1f} ms: {tot_b/tot_us/1e3:.1f} GB/s")
PY
tar -czf "$OUT/um_pieces.tgz" -C "$OUT" --exclude um_pieces.tgz . 2>/dev/null
exit $status
