"""Side by side on this machine's CPU: tiertrain's CPU backend against PyTorch, same GPT, same corpus, same shape.

Runs both ``--rounds`` times, interleaved (tiertrain, torch, tiertrain, ...), so that drift of the machine hits both
alike. Each run trains ``--steps`` steps; the first ``--warmup-steps`` are not timed; a run's figure is the median
step time of the rest, and the reported figure is the median over rounds. tiertrain's step time is wall time around
one whole step (batch sampling, host-to-device copies, forward, backward, AdamW, reading the loss back); PyTorch's
is the same minus batch sampling (bench/training/torch_gpt_cpu.py).

Writes ``cpu_vs_torch.json`` and ``cpu_vs_torch.md`` (table, machine, commit, command) into ``--out-dir``.

Example (after scripts/train.sh or a Release build; docs/benchmarks/2026-11-29-cpu-vs-torch/ is its record, run with
``--rounds 3 --threads 2 --compile``):
    python3 bench/training/cpu_vs_torch.py --binary build/release/src/tiertrain --out-dir "$OUT"
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_tiertrain(args, tmp: str, r: int) -> dict:
    metrics = os.path.join(tmp, f"tiertrain-{r}.json")
    cmd = [args.binary, "train", "--layers", str(args.layers), "--dim", str(args.dim), "--heads", str(args.heads),
           "--seq", str(args.seq), "--batch", str(args.batch), "--steps", str(args.steps), "--eval-every", "0",
           "--log-every", str(args.steps), "--threads", str(args.threads), "--data", args.data,
           "--metrics-out", metrics]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        m = json.load(f)
    timed = [s["ms"] for s in m["steps"][args.warmup_steps:]]
    return {"median_ms": statistics.median(timed), "first_loss": m["steps"][0]["loss"],
            "last_loss": m["steps"][-1]["loss"], "params": m["model"]["params"], "command": shlex.join(cmd)}


def run_torch(args, tmp: str, r: int, compile_: bool) -> dict:
    out = os.path.join(tmp, f"torch-{r}-{int(compile_)}.json")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "training", "torch_gpt_cpu.py"), "--data", args.data,
           "--threads", str(args.threads), "--layers", str(args.layers), "--dim", str(args.dim), "--heads",
           str(args.heads), "--seq", str(args.seq), "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup-steps", str(args.warmup_steps), "--json-out", out] + (["--compile"] if compile_ else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        m = json.load(f)
    return {"median_ms": m["median_ms_per_step"], "first_loss": m["first_loss"], "last_loss": m["last_loss"],
            "params": m["params"], "torch_version": m["torch_version"], "compile": m["compile"],
            "command": shlex.join(cmd)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "release", "src", "tiertrain"))
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="also run torch.compile")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    runs = {"tiertrain": [], "torch_eager": [], "torch_compile": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            runs["tiertrain"].append(run_tiertrain(args, tmp, r))
            runs["torch_eager"].append(run_torch(args, tmp, r, False))
            if args.compile:
                runs["torch_compile"].append(run_torch(args, tmp, r, True))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{k} {v[-1]['median_ms']:.1f} ms" for k, v in runs.items() if v), flush=True)

    tokens = args.batch * args.seq
    summary = {}
    for name, rs in runs.items():
        if not rs:
            continue
        ms = statistics.median(r["median_ms"] for r in rs)
        summary[name] = {"median_ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3),
                         "rounds_ms": [r["median_ms"] for r in rs], "first_loss": rs[0]["first_loss"],
                         "last_loss": rs[0]["last_loss"], "params": rs[0]["params"], "command": rs[0]["command"]}
        if "compile" in rs[0]:
            summary[name]["compile"] = rs[0]["compile"]
    base = summary["torch_eager"]["tokens_per_s"]
    for v in summary.values():
        v["ratio_vs_torch_eager"] = v["tokens_per_s"] / base
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    result = {
        "date": datetime.date.today().isoformat(),
        "commit": commit + ("-dirty" if dirty else ""),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads_used": args.threads},
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS")},
        "torch_version": runs["torch_eager"][0]["torch_version"],
        "config": {"L": args.layers, "C": args.dim, "H": args.heads, "T": args.seq, "B": args.batch, "V": 256,
                   "tokens_per_step": tokens, "steps": args.steps, "warmup_steps": args.warmup_steps,
                   "rounds": args.rounds},
        "command": shlex.join([sys.executable] + sys.argv),
        "results": summary,
    }
    with open(os.path.join(args.out_dir, "cpu_vs_torch.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    lines = [
        f"# tiertrain CPU backend vs PyTorch on the CPU ({result['date']})",
        "",
        f"- machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, {args.threads} threads used",
        f"- commit: `{result['commit']}`; PyTorch {result['torch_version']}; environment: "
        + ", ".join(f"{k}={v}" for k, v in result["env"].items() if v),
        f"- model: GPT L{args.layers} d{args.dim} H{args.heads} T{args.seq}, batch {args.batch} ({tokens} tokens/step), "
        f"vocab 256, {summary['tiertrain']['params']:,} parameters, corpus `{args.data}`",
        f"- each run: {args.steps} steps, first {args.warmup_steps} untimed, median step time; {args.rounds} "
        "interleaved rounds, median over rounds",
        f"- command: `{result['command']}`",
        "",
        "| implementation | ms/step | tokens/s | vs PyTorch eager | per-round ms/step |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, v in summary.items():
        rounds = ", ".join(f"{x:.1f}" for x in v["rounds_ms"])
        label = name + (f" ({v['compile']})" if name == "torch_compile" else "")
        lines.append(f"| {label} | {v['median_ms_per_step']:.1f} | {v['tokens_per_s']:,.0f} | "
                     f"{v['ratio_vs_torch_eager']:.2f}x | {rounds} |")
    with open(os.path.join(args.out_dir, "cpu_vs_torch.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
