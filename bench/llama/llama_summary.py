"""Summary of bench/llama/llama_gpu.sh: one row per run (tiertrain's --metrics-out JSON, torch_llama_gpu.py's JSON),
MFU computed the same way for both, and tiertrain's tokens/s against the fastest compiled PyTorch row of the same
configuration. Prints a Markdown table and writes OUTDIR/results.json.

    python3 bench/llama/llama_summary.py OUTDIR

FLOPs of a step, as bench/llama/torch_llama_gpu.py counts them: (6 N + 12 L T C) x tokens, N the weight matrices
that multiply activations (q, k, v, o, gate, up, down of every block, and the LM head over the vocabulary; the
embedding lookup is not counted), against 989 TFLOP/s (H100/H200 dense bf16).
"""

from __future__ import annotations

import json
import os
import sys

PEAK_BF16 = 989e12


def flop_params(L: int, C: int, H: int, KV: int, F: int, V: int) -> int:
    hs = C // H
    block = C * (C + 2 * KV * hs) + C * C + 3 * C * F
    return L * block + C * V


def flops_per_token(L: int, C: int, H: int, KV: int, F: int, V: int, T: int) -> float:
    return 6 * flop_params(L, C, H, KV, F, V) + 12 * L * T * C


def main() -> None:
    out = sys.argv[1]
    rows = []
    for name in sorted(os.listdir(out)):
        if not name.endswith(".json") or name == "results.json":
            continue
        with open(os.path.join(out, name)) as f:
            j = json.load(f)
        if "summary" in j and "model" in j:  # tiertrain --metrics-out
            m, s, c = j["model"], j["summary"], j["config"]
            if m.get("ffn", 0) <= 0:
                print(f"{name}: no explicit ffn, skipped", file=sys.stderr)
                continue
            kv = m.get("kv_heads") or m["heads"]
            B = c["batch"] * c.get("grad_accum", 1)
            key = f"L{m['layers']} d{m['dim']} H{m['heads']}/{kv} F{m['ffn']} V{m['vocab']} T{m['seq']} B{B}"
            ms = s["median_ms_per_step"]
            tokens = B * m["seq"]
            flops = flops_per_token(m["layers"], m["dim"], m["heads"], kv, m["ffn"], m["vocab"], m["seq"]) * tokens
            impl = f"tiertrain-{j['dtype']['compute']} --plan {c.get('plan')}"
            if str(c.get("attention_deterministic", "true")).lower() == "false":
                impl += " --attention-deterministic false"
            if j.get("grad_dtype", j.get("plan", {}).get("grad_dtype")) == "bf16":  # Note [bf16 gradients]
                impl += " (bf16 grads)"
            rows.append({"impl": impl, "file": name,
                         "config": key, "median_ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3),
                         "mfu": flops / (ms / 1e3) / PEAK_BF16, "peak_gib": j["memory"]["device"]["peak"] / 2**30,
                         "first_loss": s["first_loss"], "last_loss": s["last_loss"], "params": m["params"]})
        elif "impl" in j and "config" in j:  # torch_llama_gpu.py
            c = j["config"]
            B, T, V = c["B"], c["T"], c["V"]
            key = f"L{c['L']} d{c['C']} H{c['H']}/{c['KV']} F{c['F']} V{V} T{T} B{B}"
            flops = flops_per_token(c["L"], c["C"], c["H"], c["KV"], c["F"], V, T) * B * T
            ms = j["median_ms_per_step"]
            rows.append({"impl": j["impl"], "file": name, "config": key, "median_ms_per_step": ms,
                         "tokens_per_s": j["tokens_per_s"], "mfu": flops / (ms / 1e3) / PEAK_BF16,
                         "peak_gib": j["peak_gib"], "first_loss": j["first_loss"], "last_loss": j["last_loss"],
                         "params": j.get("params")})
    best = {}
    for r in rows:
        if not r["impl"].startswith("tiertrain") and "compile" in r["impl"]:
            best[r["config"]] = max(best.get(r["config"], 0.0), r["tokens_per_s"])
    for r in rows:
        r["vs_fastest_torch_compiled"] = r["tokens_per_s"] / best[r["config"]] if r["config"] in best else None
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("| implementation | config | ms/step | tokens/s | MFU | peak GiB | vs fastest torch compiled | loss first -> last |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in sorted(rows, key=lambda r: (r["config"], r["impl"])):
        ratio = f"{r['vs_fastest_torch_compiled']:.3f}" if r["vs_fastest_torch_compiled"] else "-"
        peak = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "-"
        print(f"| {r['impl']} | {r['config']} | {r['median_ms_per_step']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['mfu']:.3f} | {peak} | {ratio} | {r['first_loss']:.3f} -> {r['last_loss']:.3f} |")


if __name__ == "__main__":
    main()
