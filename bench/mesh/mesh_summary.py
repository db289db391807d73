"""Collects bench/mesh/mesh_gpu.sh's runs in OUTDIR into results.json and results.md: data-parallel scaling
(tokens/s, efficiency against K times one GPU), the large model on meshes (MFU over all GPUs of the mesh), the input
modes (median input stage of each rank and of the slowest, against direct; the first step, which warms the page
cache, left out), the out-of-core plan per GPU against one GPU, and whether the resumed run on another mesh shape
followed the straight one."""

from __future__ import annotations

import json
import os
import re
import statistics
import sys

H200_BF16 = 989e12  # dense bf16 FLOP/s of one H200 (the MFU's denominator, as bench/training/gpu_summary.py)


def flops_per_step(L: int, C: int, V: int, T: int, B: int, n_params: int) -> float:
    # As bench/training/torch_gpt_gpu.py counts them (llm.c's and nanoGPT's count): 6 N per token for the weights
    # (N without the position embedding) plus 12 L T C per token for attention.
    return (6 * (n_params - T * C) + 12 * L * T * C) * B * T


def load(out: str, name: str) -> dict | None:
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def ranks_of(name: str) -> int:
    mesh = dict(re.findall(r"(data|model)_(\d+)", name))
    return int(mesh.get("data", 1)) * int(mesh.get("model", 1))


def main() -> None:
    out = sys.argv[1]
    names = sorted(n[:-5] for n in os.listdir(out) if n.endswith(".json") and n != "results.json")
    res: dict = {"dp": [], "tp": [], "input": [], "ooc": [], "resume": None}
    lines: list[str] = []

    dp = {int(n[4:]): load(out, n) for n in names if re.fullmatch(r"dp_n\d+", n)}
    torch_dp = {int(n[10:]): load(out, n) for n in names if re.fullmatch(r"dp_torch_n\d+", n)}
    if dp or torch_dp:
        lines += ["| data parallel GPT-2 124M | GPUs | ms/step | tokens/s | efficiency vs GPUs x 1 GPU | peak GiB | "
                  "tiertrain / torch DDP compile |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        one, tone = dp.get(1), torch_dp.get(1)
        for k, j in sorted(dp.items()):
            s = j["summary"]
            eff = s["median_tokens_per_s"] / (k * one["summary"]["median_tokens_per_s"]) if one else None
            vs = s["median_tokens_per_s"] / torch_dp[k]["tokens_per_s"] if k in torch_dp else None
            row = {"impl": "tiertrain", "gpus": k, "ms": s["median_ms_per_step"], "tokens_per_s": s["median_tokens_per_s"],
                   "efficiency": eff, "peak_gib": j["memory"]["device"]["peak"] / 2**30, "vs_torch_ddp_compile": vs}
            res["dp"].append(row)
            lines.append(f"| tiertrain | {k} | {row['ms']:.1f} | {row['tokens_per_s']:,.0f} | "
                         f"{'' if eff is None else f'{eff:.3f}'} | {row['peak_gib']:.1f} | "
                         f"{'' if vs is None else f'{vs:.2f}x'} |")
        for k, j in sorted(torch_dp.items()):
            eff = j["tokens_per_s"] / (k * tone["tokens_per_s"]) if tone else None
            row = {"impl": j["impl"], "gpus": k, "ms": j["median_ms_per_step"], "tokens_per_s": j["tokens_per_s"],
                   "efficiency": eff, "peak_gib": j["peak_gib"]}
            res["dp"].append(row)
            lines.append(f"| {j['impl']} | {k} | {row['ms']:.1f} | {row['tokens_per_s']:,.0f} | "
                         f"{'' if eff is None else f'{eff:.3f}'} | {row['peak_gib']:.1f} | |")
        lines.append("")

    tp = [n for n in names if n.startswith("tp_")]
    if tp:
        lines += ["| 3.4B on a mesh | GPUs | ms/step | tokens/s | MFU | peak GiB (rank 0) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for n in tp:
            j = load(out, n)
            m, s, k = j["model"], j["summary"], ranks_of(n)
            flops = flops_per_step(m["layers"], m["dim"], m["vocab"], m["seq"], j["config"]["batch"], m["params"])
            mfu = flops / (s["median_ms_per_step"] / 1e3) / (k * H200_BF16)
            row = {"mesh": n[3:], "gpus": k, "ms": s["median_ms_per_step"], "tokens_per_s": s["median_tokens_per_s"],
                   "mfu": mfu, "peak_gib": j["memory"]["device"]["peak"] / 2**30}
            res["tp"].append(row)
            lines.append(f"| {row['mesh']} | {k} | {row['ms']:.1f} | {row['tokens_per_s']:,.0f} | {mfu:.1%} | "
                         f"{row['peak_gib']:.1f} |")
        lines.append("")

    inputs = [n for n in names if n.startswith("input_")]
    if inputs:
        lines += ["| input | GPUs | input stage rank 0 (ms) | slowest rank (ms) | step (ms) | via-root / this (slowest) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        by = {}
        for n in inputs:
            k, mode = re.fullmatch(r"input_n(\d+)_(.+)", n).groups()
            st = load(out, n)["steps"][1:] or load(out, n)["steps"]
            by[(int(k), mode)] = {"gpus": int(k), "input": mode,
                                  "input_ms": statistics.median(x["input_ms"] for x in st),
                                  "input_ms_max": statistics.median(x["input_ms_max"] for x in st),
                                  "step_ms": statistics.median(x["step_ms"] for x in st)}
        for (k, mode), row in sorted(by.items()):
            root = by.get((k, "via-root"))
            row["via_root_over_this"] = root["input_ms_max"] / row["input_ms_max"] if root else None
            res["input"].append(row)
            ratio = row["via_root_over_this"]
            lines.append(f"| {mode} | {k} | {row['input_ms']:.2f} | {row['input_ms_max']:.2f} | {row['step_ms']:.1f} | "
                         f"{'' if ratio is None else f'{ratio:.2f}x'} |")
        lines.append("")

    ooc = {int(n[5:]): load(out, n) for n in names if re.fullmatch(r"ooc_n\d+", n)}
    if ooc:
        one = ooc.get(1)
        lines += ["| d4096 swap-attention-recompute-mlp-norms | GPUs | ms/step | tokens/s a GPU | vs one GPU |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for k, j in sorted(ooc.items()):
            per = j["summary"]["median_tokens_per_s"] / k
            vs = per / one["summary"]["median_tokens_per_s"] if one else None
            res["ooc"].append({"gpus": k, "ms": j["summary"]["median_ms_per_step"], "tokens_per_s_per_gpu": per,
                               "vs_one_gpu": vs})
            lines.append(f"| tiertrain | {k} | {j['summary']['median_ms_per_step']:.1f} | {per:,.0f} | "
                         f"{'' if vs is None else f'{vs:.3f}'} |")
        lines.append("")

    straight, second = load(out, "resume_straight"), load(out, "resume_second")
    if straight and second:
        a = {s["step"]: s["loss"] for s in straight["steps"]}
        b = {s["step"]: s["loss"] for s in second["steps"]}
        common = sorted(set(a) & set(b))
        worst = max((abs(a[i] - b[i]) / abs(a[i]) for i in common), default=None)
        res["resume"] = {"steps_compared": common, "max_rel_loss_diff": worst}
        lines.append(f"Resume on another mesh shape (data -> model): steps {common[0] if common else '-'}-"
                     f"{common[-1] if common else '-'} compared, largest relative loss difference "
                     f"{'n/a' if worst is None else f'{worst:.2e}'}.")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
