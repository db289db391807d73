#!/usr/bin/env python3
"""The CPU optimizer's host updates in training beside their calibrated times (bench/perf/host_opt_gpu.sh).

    python3 bench/perf/host_opt_summary.py RESULTS_DIR

For each trace_<name>.json.gz: the median step (steps after the first), and per segment the median span of its
update on the host stream ("adamw <segment>") against the profile's time for a segment of that many parameters
(profile_d1024.json for the d1024 runs, else profile.json).
"""
import collections
import gzip
import json
import pathlib
import statistics
import sys


def calibrated(profile_path):
    p = json.loads(pathlib.Path(profile_path).read_text())
    host = p["host"]
    return {sum(s["param_sizes"]): s["seconds"] * 1e3 for s in host["adamw_segments"]}, host.get(
        "adamw_segment_threads")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = pathlib.Path(sys.argv[1])
    for trace in sorted(d.glob("trace_*.json.gz")):
        name = trace.name[len("trace_"):-len(".json.gz")]
        cal, threads = calibrated(d / ("profile_d1024.json" if name.startswith("d1024") else "profile.json"))
        events = [e for e in json.load(gzip.open(trace))["traceEvents"] if e.get("ph") == "X"]
        steps = [e["dur"] / 1e3 for e in events if e["tid"] == 0][1:]
        spans = collections.defaultdict(list)
        for e in events:
            if e["tid"] == 4 and e["args"]["step"] >= 2:
                spans[e["name"].split(" ", 1)[1]].append(e["dur"] / 1e3)
        print(f"{name}: median step {statistics.median(steps):.1f} ms (steps {', '.join(f'{s:.0f}' for s in steps)})")
        blocks = [statistics.median(v) for k, v in spans.items() if k.startswith("h.")]
        if not blocks:
            continue  # the optimizer on the device: no host updates
        others = {k: statistics.median(v) for k, v in spans.items() if not k.startswith("h.")}
        total = sum(blocks) + sum(others.values())
        print(f"  host updates: {total:.1f} ms a step; a block {statistics.median(blocks):.2f} ms "
              f"(range {min(blocks):.2f}-{max(blocks):.2f}); "
              + ", ".join(f"{k} {v:.2f} ms" for k, v in others.items()))
        print(f"  calibrated ({threads} threads): " + ", ".join(f"{n / 1e6:.2f}M params {t:.2f} ms" for n, t in
                                                                sorted(cal.items())))


if __name__ == "__main__":
    main()
