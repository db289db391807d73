"""Collects the JSON files of scripts/gpu.sh's benchmark runs in OUTDIR into results.json and a Markdown table
results.md (ms/step, tokens/s, MFU, peak memory, ratio to PyTorch bf16 eager and to the fastest PyTorch bf16
`torch.compile` run of the same configuration, default or max-autotune; an fp32 row's ratio to the fastest PyTorch
fp32 run, eager or compiled)."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_gpu import flops_per_step  # noqa: E402


def main() -> None:
    out = sys.argv[1]
    rows = []
    for name in sorted(os.listdir(out)):
        if not name.endswith(".json") or name == "results.json":
            continue
        with open(os.path.join(out, name)) as f:
            j = json.load(f)
        if "summary" in j and "model" in j:  # tiertrain --metrics-out
            m, s = j["model"], j["summary"]
            B = j["config"]["batch"]
            ms = s["median_ms_per_step"]
            flops = flops_per_step(m["layers"], m["dim"], m["vocab"], m["seq"], B, m["params"])
            compute = j["dtype"]["compute"]
            impl = "tiertrain-" + ("fp32" if compute == "f32" else compute)
            attention = j["config"].get("attention_impl", "auto")
            if attention != "auto":  # attention_impl=cudnn or native named in the row (issue 23)
                impl += "-" + attention + "-attention"
            # No GEMM workspace (the knob 0, a number before it took `auto`, a string since): the flash kernels.
            if compute == "f32" and str(j["config"].get("attention_workspace")) == "0":
                impl += "-flash-kernels"
            if j["config"].get("grads_in_activations") is False:  # Note [gradients in dead activations] off
                impl += " (own gradient buffers)"
            plan = str(j["config"].get("plan", "in-core"))
            if plan != "in-core":  # another plan named in the row (in-core-selective: issue 23's memory)
                impl += " --plan " + os.path.basename(plan)
            if j.get("grad_dtype", j.get("plan", {}).get("grad_dtype")) == "bf16":  # Note [bf16 gradients]
                impl += " (bf16 grads)"
            rows.append({"impl": impl,
                         "file": name, "config": f"L{m['layers']} d{m['dim']} T{m['seq']} B{B} V{m['vocab']}",
                         "median_ms_per_step": ms, "tokens_per_s": s["median_tokens_per_s"],
                         "mfu": flops / (ms / 1e3) / (67e12 if compute == "f32" else 989e12),
                         "peak_gib": j["memory"]["device"]["peak"] / 2**30, "first_loss": s["first_loss"],
                         "last_loss": s["last_loss"], "backend": j["backend"]})
        elif "impl" in j:
            c = j["config"]
            rows.append({"impl": j["impl"], "file": name,
                         "config": f"L{c['L']} d{c['C']} T{c['T']} B{c['B']} V{c['V']}",
                         "median_ms_per_step": j["median_ms_per_step"], "tokens_per_s": j["tokens_per_s"],
                         "mfu": j["mfu"], "peak_gib": j["peak_gib"], "first_loss": j["first_loss"],
                         "last_loss": j["last_loss"]})
    # Ratios against PyTorch bf16 eager of the same configuration.
    base = {r["config"]: r["tokens_per_s"] for r in rows if r["impl"] == "torch-bf16-eager"}
    best_compile = {}
    for r in rows:
        if r["impl"].startswith("torch-bf16-compile"):
            best_compile[r["config"]] = max(best_compile.get(r["config"], 0), r["tokens_per_s"])
    best_fp32 = {}  # the fastest PyTorch fp32 run (eager or compiled): the reference of tiertrain's f32 rows
    for r in rows:
        if r["impl"].startswith("torch-fp32"):
            best_fp32[r["config"]] = max(best_fp32.get(r["config"], 0), r["tokens_per_s"])
    for r in rows:
        r["ratio_vs_fastest_torch_fp32"] = (r["tokens_per_s"] / best_fp32[r["config"]]
                                            if r["config"] in best_fp32 and "fp32" in r["impl"] else None)
        bf16 = "fp32" not in r["impl"]  # an fp32 row is compared with PyTorch fp32 only
        r["ratio_vs_torch_bf16_eager"] = r["tokens_per_s"] / base[r["config"]] if bf16 and r["config"] in base else None
        r["ratio_vs_torch_bf16_compile"] = (r["tokens_per_s"] / best_compile[r["config"]]
                                            if bf16 and r["config"] in best_compile else None)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
        f.write("\n")
    lines = ["| implementation | config | ms/step | tokens/s | MFU | peak GiB | vs torch bf16 eager | "
             "vs fastest torch bf16 compile | vs fastest torch fp32 | loss first -> last |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    rows.sort(key=lambda r: (r["config"], r["impl"]))
    for r in rows:
        ratio = f"{r['ratio_vs_torch_bf16_eager']:.2f}x" if r["ratio_vs_torch_bf16_eager"] else "-"
        ratio_c = f"{r['ratio_vs_torch_bf16_compile']:.2f}x" if r["ratio_vs_torch_bf16_compile"] else "-"
        ratio_f = f"{r['ratio_vs_fastest_torch_fp32']:.2f}x" if r["ratio_vs_fastest_torch_fp32"] else "-"
        lines.append(f"| {r['impl']} | {r['config']} | {r['median_ms_per_step']:.1f} | {r['tokens_per_s']:,.0f} | "
                     f"{100 * r['mfu']:.1f}% | {r['peak_gib']:.1f} | {ratio} | {ratio_c} | {ratio_f} | "
                     f"{r['first_loss']:.3f} -> {r['last_loss']:.3f} |")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
