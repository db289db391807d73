#!/usr/bin/env python3
"""The GPU's idle time between kernels, per training step, from bench/training/kernel_gaps.cc's trace.

    bench/training/kernel_gaps.py TRACE.csv [--skip N] [--json OUT.json] [--top K]

A step is the time from the end of one step's AdamW update (the last of a run of kernels whose name holds "adamw") to
the end of the next one's, so the gap between two steps (the host's work between them) counts in the later step. In
each step, the busy time is the union of the intervals of every kernel, copy and memset on any stream; the rest is
idle: the most a CUDA graph of the step could remove (it removes launch gaps, not the kernels' own time). The first N
steps (--skip, default 2: the first step builds plans and chooses algorithms) are left out. Prints the median step
and its largest gaps, with what ran before and after each.
"""
import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["kind"] == "D":
                sys.exit(f"kernel_gaps.py: CUPTI dropped {r['start_ns']} records of {path}: their time would count "
                         "as idle")
            rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], int(r["stream"]), r["name"]))
    rows.sort()
    return rows


def step_ends(rows):
    """The end of each step's update: the last kernel of each run of consecutive AdamW kernels (in start order)."""
    ends = []
    in_run = False
    for start, end, kind, _, name in rows:
        is_update = kind == "K" and "adamw" in name.lower()
        if is_update:
            if in_run:
                ends[-1] = max(ends[-1], end)
            else:
                ends.append(end)
            in_run = True
        elif kind == "K":
            in_run = False
    return ends


def update_stream(rows):
    """The stream the AdamW updates run on (the compute stream)."""
    for _, _, kind, stream, name in rows:
        if kind == "K" and "adamw" in name.lower():
            return stream
    return None


def analyse_window(rows, lo, hi, stream=None):
    """Busy and idle time in [lo, hi), the number of kernels starting in it, and its idle intervals; with `stream`,
    of that stream alone (a gap in it that another stream's copy covers is idle there)."""
    busy = 0
    cursor = lo
    gaps = []
    kernels = 0
    prev_name = "(step start)"
    for start, end, kind, st, name in rows:
        if end <= lo or start >= hi or (stream is not None and st != stream):
            continue
        if kind == "K" and start >= lo:
            kernels += 1
        s, e = max(start, lo), min(end, hi)
        if s > cursor:
            gaps.append((s - cursor, prev_name, name))
        if e > cursor:
            busy += e - max(s, cursor)
            cursor = e
            prev_name = name
    if hi > cursor:
        gaps.append((hi - cursor, prev_name, "(step end)"))
    return {"step_ns": hi - lo, "busy_ns": busy, "idle_ns": hi - lo - busy, "kernels": kernels, "gaps": gaps}


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def short(name, width=70):
    name = name.split("(")[0] if "(" in name and not name.startswith("(") else name
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    rows = load(a.trace)
    ends = step_ends(rows)
    steps = [analyse_window(rows, lo, hi) for lo, hi in zip(ends, ends[1:])][a.skip:]
    compute = update_stream(rows)
    on_compute = [analyse_window(rows, lo, hi, compute) for lo, hi in zip(ends, ends[1:])][a.skip:]
    if not steps:
        sys.exit(f"kernel_gaps.py: {len(ends)} AdamW updates in {a.trace}: too few steps to measure")
    med = lambda key: statistics.median(s[key] for s in steps) / 1e6  # noqa: E731
    by_step = sorted(steps, key=lambda s: s["step_ns"])
    typical = by_step[len(by_step) // 2]
    names = demangle(sorted({n for g in typical["gaps"] for n in g[1:]}))
    top = sorted(typical["gaps"], reverse=True)[: a.top]
    gap_sizes = sorted(g[0] for g in typical["gaps"])
    summary = {
        "trace": a.trace,
        "steps": len(steps),
        "step_ms_median": med("step_ns"),
        "busy_ms_median": med("busy_ns"),
        "idle_ms_median": med("idle_ns"),
        "idle_fraction_median": statistics.median(s["idle_ns"] / s["step_ns"] for s in steps),
        "compute_stream_idle_ms_median": statistics.median(s["idle_ns"] for s in on_compute) / 1e6,
        "kernels_per_step_median": statistics.median(s["kernels"] for s in steps),
        "gaps_in_median_step": len(gap_sizes),
        "gap_us_median_in_median_step": gap_sizes[len(gap_sizes) // 2] / 1e3 if gap_sizes else 0.0,
        "largest_gaps_in_median_step": [
            {"us": g[0] / 1e3, "after": short(names.get(g[1], g[1])), "before": short(names.get(g[2], g[2]))}
            for g in top
        ],
    }
    print(
        f"{summary['steps']} steps: median {summary['step_ms_median']:.3f} ms a step, GPU busy "
        f"{summary['busy_ms_median']:.3f} ms, idle {summary['idle_ms_median']:.3f} ms "
        f"({100 * summary['idle_fraction_median']:.2f}%; the compute stream alone "
        f"{summary['compute_stream_idle_ms_median']:.3f} ms); {summary['kernels_per_step_median']:.0f} kernels a step; "
        f"{summary['gaps_in_median_step']} gaps in the median step, median gap "
        f"{summary['gap_us_median_in_median_step']:.2f} us"
    )
    print("largest gaps in the median step:")
    for g in summary["largest_gaps_in_median_step"]:
        print(f"  {g['us']:9.2f} us  after {g['after']}  before {g['before']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
