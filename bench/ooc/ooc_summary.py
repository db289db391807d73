"""Table of bench/ooc/ooc_gpu.sh's and bench/ooc/offload_gpu.sh's runs: each tiertrain plan and PyTorch against tiertrain
in-core, with the memory figures issue 4 asks for (activations against what the budget leaves after model state; the
in-core run's model state against each plan's budget; pinned against held host bytes; allocations after warm-up).
Writes results.md and results.json into the folder it reads."""

from __future__ import annotations

import glob
import json
import os
import sys

GIB = 2**30


def load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main() -> None:
    out = sys.argv[1]
    rows = []
    base = load(os.path.join(out, "tiertrain_in-core.json"))
    base_ms = base["summary"]["median_ms_per_step"] if base else None
    act = base["memory"]["device"]["classes"]["activation"]["peak"] if base else 0
    # Model state as in-core training keeps it (parameters, gradients, AdamW moments): what the offload plans move.
    full_state = (sum(base["memory"]["device"]["classes"][c]["peak"] for c in ("param", "grad", "optim_state"))
                  if base else 0)
    known = ["in-core", "swap", "recompute", "mix", "halves", "halves-mix", "cpu-optimizer", "recompute-cpu-optimizer"]
    found = sorted(os.path.basename(p)[len("tiertrain_"):-len(".json")]
                   for p in glob.glob(os.path.join(out, "tiertrain_*.json")))
    for name in known + [n for n in found if n not in known]:
        j = load(os.path.join(out, f"tiertrain_{name}.json"))
        if j is None:
            continue
        dev = j["memory"]["device"]
        cls = dev["classes"]
        state = sum(cls[c]["peak"] for c in ("param", "grad", "optim_state"))
        left = dev["budget"] - state
        hp = j["memory"].get("host_pool", {})
        allocs = j["memory"].get("allocations_after_first_step", {})
        ms = j["summary"]["median_ms_per_step"]
        rows.append({"impl": f"tiertrain {name}", "ms": ms, "tokens_per_s": j["summary"]["median_tokens_per_s"],
                     "vs_in_core": base_ms / ms if base_ms else None, "peak_gib": dev["peak"] / GIB,
                     "budget_gib": dev["budget"] / GIB, "state_gib": state / GIB,
                     "act_over_left": act / left if left > 0 else None,
                     "full_state_over_budget": full_state / dev["budget"] if full_state else None,
                     "pinned_gib": hp.get("slab_bytes", 0) / GIB, "held_gib": hp.get("peak_held_bytes", 0) / GIB,
                     "allocs_after_warmup": allocs, "transfers": j.get("transfers_per_step"),
                     "speculation": j.get("speculation"),
                     "grad_clip": j.get("config", {}).get("grad_clip")})
    for name in ("in-core", "save_on_cpu"):
        j = load(os.path.join(out, f"torch_{name}.json"))
        if j is None:
            continue
        rows.append({"impl": j["impl"], "ms": j["median_ms_per_step"], "tokens_per_s": j["tokens_per_s"],
                     "vs_in_core": base_ms / j["median_ms_per_step"] if base_ms else None,
                     "peak_gib": j["peak_gib"], "budget_gib": j.get("memory_budget_gib")})
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
    fmt = lambda v, f="{:.2f}": "" if v is None else f.format(v)  # noqa: E731
    lines = ["| run | ms/step | tokens/s | vs tiertrain in-core | device peak GiB | budget GiB | model state GiB | "
             "activations / (budget - state) | in-core model state / budget | host pinned / held GiB | "
             "allocations after step 1 (dev, host) | grad clip | speculated updates kept / redone |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- |"]
    for r in rows:
        a = r.get("allocs_after_warmup") or {}
        lines.append(f"| {r['impl']} | {r['ms']:.1f} | {r['tokens_per_s']:,.0f} | {fmt(r['vs_in_core'])} | "
                     f"{r['peak_gib']:.2f} | {fmt(r.get('budget_gib'))} | {fmt(r.get('state_gib'))} | "
                     f"{fmt(r.get('act_over_left'), '{:.1f}x')} | {fmt(r.get('full_state_over_budget'), '{:.1f}x')} | "
                     f"{fmt(r.get('pinned_gib'))} / {fmt(r.get('held_gib'))} | "
                     f"{a.get('device', '')}, {a.get('host', '')} | {fmt(r.get('grad_clip'), '{:g}')} | "
                     + (f"{r['speculation']['kept']} / {r['speculation']['redone']} |" if r.get("speculation") else " |"))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
