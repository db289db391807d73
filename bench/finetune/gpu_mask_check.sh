#!/usr/bin/env bash
# On a GPU machine, after bench/restructure/old_new_gpu.sh built build/gpu: the loss mask (Note [loss mask]) and
# gradient accumulation on the CUDA backend against the CPU backend. Masked shards of a synthetic text (prompts of 5
# to 35 bytes not counted); GPT-2 and Llama models; the step losses of the CUDA f32 run against the CPU run's, of
# --grad-accum 2 against a batch twice as large, and a bf16 run (the fused cross-entropy kernel). Summary to stdout.
#   bench/finetune/gpu_mask_check.sh OUTDIR [TIERTRAIN]
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
bin=${2:-build/gpu/src/tiertrain}
python3 - "$out/masked" <<'PY'
import os, struct, sys
os.makedirs(sys.argv[1], exist_ok=True)
words = "the memory of a device is never enough so we swap and recompute what is cheaper to rebuild".split()
text, k = [], 0
while len(text) < 200000:
    text.extend((" ".join(words[(k * 7 + i) % len(words)] for i in range(12)) + ".\n").encode())
    k += 1
tokens, at, k = [], 0, 0
while at < len(text):
    n = min(len(text) - at, 40 + (k * 7919) % 31)
    prompt = 5 + (k * 104729) % 31
    tokens += [text[at + i] | ((1 << 31) if i < prompt else 0) for i in range(n)]
    at += n
    k += 1
header = [20240801, 8, len(tokens), 256] + [0] * 252
open(sys.argv[1] + "/train_000.bin", "wb").write(struct.pack("<256i", *header) + struct.pack("<%dI" % len(tokens), *tokens))
# The same text unmasked (every target counts): whether a bf16 departure is the mask's.
os.makedirs(sys.argv[1] + "-plain", exist_ok=True)
plain = [t & 0x7FFFFFFF for t in tokens]
header = [20240801, 7, len(plain), 256] + [0] * 252
open(sys.argv[1] + "-plain/train_000.bin", "wb").write(struct.pack("<256i", *header) + struct.pack("<%dI" % len(plain), *plain))
PY
common="--data $out/masked --seq 64 --steps 20 --warmup 2 --eval-every 10 --eval-batches 4 --log-every 10"
run() {  # NAME ARGS...
  local name=$1
  shift
  "$bin" train $common "$@" --metrics-out "$out/$name.json" > "$out/$name.log" 2>&1 || { echo "$name FAILED"; tail -5 "$out/$name.log"; }
}
if [ "${TT_PLAIN_ONLY:-0}" = 1 ]; then  # GPT-2, f32 and bf16, masked and not
  fam="--layers 2 --dim 128 --heads 4"
  run gpt2-cuda-f32 $fam --backend cuda --dtype f32 --batch 8
  run gpt2-cuda-bf16 $fam --backend cuda --dtype bf16 --batch 8
  common="--data $out/masked-plain --seq 64 --steps 20 --warmup 2 --eval-every 10 --eval-batches 4 --log-every 10"
  run gpt2-plain-cuda-f32 $fam --backend cuda --dtype f32 --batch 8
  run gpt2-plain-cuda-bf16 $fam --backend cuda --dtype bf16 --batch 8
  python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
def curve(n):
    j = json.load(open(f"{d}/{n}.json"))
    return [s["loss"] for s in j["steps"]], [v["loss"] for v in j["val"]]
for pre in ("gpt2", "gpt2-plain"):
    a, av = curve(f"{pre}-cuda-f32")
    b, bv = curve(f"{pre}-cuda-bf16")
    print(f"{pre}: f32 vs bf16 worst relative step-loss difference {max(abs(x - y) / x for x, y in zip(a, b)):.2e}; "
          f"val {av} vs {bv}")
PY
  exit 0
fi
for fam in "--layers 2 --dim 128 --heads 4" "--family llama --layers 2 --dim 128 --heads 4 --ffn 256"; do
  tag=$([[ $fam == *llama* ]] && echo llama || echo gpt2)
  run "$tag-cuda-f32" $fam --backend cuda --dtype f32 --batch 8
  run "$tag-cpu-f32" $fam --backend cpu --dtype f32 --batch 8 --threads 8
  run "$tag-cuda-f32-accum" $fam --backend cuda --dtype f32 --batch 4 --grad-accum 2 --eval-batches 8
  run "$tag-cuda-bf16" $fam --backend cuda --dtype bf16 --batch 8
  run "$tag-cuda-bf16-swap" $fam --backend cuda --dtype bf16 --batch 8 --plan swap-activations
done
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
def losses(n):
    j = json.load(open(f"{d}/{n}.json"))
    return [s["loss"] for s in j["steps"]], [v["loss"] for v in j["val"]]
for tag in ("gpt2", "llama"):
    base, bval = losses(f"{tag}-cuda-f32")
    for other in ("cpu-f32", "cuda-f32-accum", "cuda-bf16", "cuda-bf16-swap"):
        l, v = losses(f"{tag}-{other}")
        worst = max(abs(a - b) / a for a, b in zip(base, l))
        print(f"{tag}: cuda f32 vs {other}: steps {len(l)}, worst relative loss difference {worst:.2e}, "
              f"val {bval} vs {v}, first {base[0]:.5f} last {base[-1]:.5f} / {l[-1]:.5f}")
PY
