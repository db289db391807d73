#!/usr/bin/env python3
"""Tables of `tiertrain plan --measure` runs (bench/perf/plan_gpu.sh): every row's predicted and measured step,
and the error statistics, as JSON and Markdown.

    python3 bench/perf/plan_summary.py RESULTS_DIR OUT_JSON OUT_MD

RESULTS_DIR holds plan_<workload>.txt files as `tiertrain plan` printed them.
"""
import glob
import json
import os
import re
import statistics
import sys

ROW = re.compile(r"^(\S+)\s+(device|cpu)\s+(yes\*?|no)\s+([\d.]+ \S+)\s+([\d.]+ \S+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+"
                 r"([\d.]+)(?:\s+([\d.]+|-)\s+([+-][\d.]+%|-)(?:\s+([\d.]+ \S+|-))?)?$")


def parse(path):
    head, rows, auto = "", [], ""
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("GPT "):
            head = line
        m = ROW.match(line)
        if m:
            measured = None if m.group(10) in (None, "-") else float(m.group(10))
            rows.append({"plan": m.group(1), "optimizer": m.group(2), "fits": m.group(3).startswith("yes"),
                         "device": m.group(4), "host": m.group(5), "predicted_ms": float(m.group(6)),
                         "exposed_ms": float(m.group(8)), "host_ms": float(m.group(9)), "measured_ms": measured,
                         "measured_peak": None if m.group(12) in (None, "-") else m.group(12),
                         "error_pct": None if measured is None else
                         round(100 * (float(m.group(6)) - measured) / measured, 2)})
        if line.startswith("auto plan: "):
            auto = line[len("auto plan: "):]
    return {"workload": os.path.basename(path)[5:-4], "model": head, "auto": auto, "rows": rows}


def main():
    src, out_json, out_md = sys.argv[1:4]
    runs = [parse(p) for p in sorted(glob.glob(os.path.join(src, "plan_*.txt")))]
    errs = [abs(r["error_pct"]) for run in runs for r in run["rows"] if r["error_pct"] is not None]
    dev = [abs(r["error_pct"]) for run in runs for r in run["rows"]
           if r["error_pct"] is not None and r["optimizer"] == "device"]
    cpu = [abs(r["error_pct"]) for run in runs for r in run["rows"]
           if r["error_pct"] is not None and r["optimizer"] == "cpu"]
    stats = {"rows_measured": len(errs), "median_abs_error_pct": statistics.median(errs), "worst_abs_error_pct": max(errs),
             "within_5pct": sum(e <= 5 for e in errs), "within_10pct": sum(e <= 10 for e in errs),
             "device_optimizer_rows": len(dev), "device_median_abs_error_pct": statistics.median(dev),
             "device_worst_abs_error_pct": max(dev), "cpu_optimizer_rows": len(cpu),
             "cpu_median_abs_error_pct": statistics.median(cpu) if cpu else None,
             "cpu_worst_abs_error_pct": max(cpu) if cpu else None}
    # The automatic plan against the fastest measured shortcut of each workload.
    for run in runs:
        auto = [r for r in run["rows"] if r["plan"] == "auto" and r["measured_ms"]]
        hand = [r["measured_ms"] for r in run["rows"] if r["plan"] != "auto" and r["measured_ms"]]
        if auto and hand:
            run["auto_over_best_shortcut"] = round(auto[0]["measured_ms"] / min(hand), 4)
    json.dump({"stats": stats, "runs": runs}, open(out_json, "w"), indent=1)
    lines = []
    for run in runs:
        lines += ["", "### %s" % run["workload"], "", run["model"], "",
                  "| plan | optimizer | fits | device (predicted) | peak (measured) | host | predicted ms | measured ms | error |",
                  "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in run["rows"]:
            lines.append("| %s | %s | %s | %s | %s | %s | %.2f | %s | %s |" % (
                r["plan"], r["optimizer"], "yes" if r["fits"] else "no", r["device"], r["measured_peak"] or "-",
                r["host"], r["predicted_ms"],
                "-" if r["measured_ms"] is None else "%.2f" % r["measured_ms"],
                "-" if r["error_pct"] is None else "%+.1f%%" % r["error_pct"]))
        if run["auto"]:
            lines += ["", "auto: " + run["auto"]]
        if "auto_over_best_shortcut" in run:
            lines.append("auto measured / fastest measured shortcut: %.3f" % run["auto_over_best_shortcut"])
    lines = ["| rows measured | median abs error | worst | within 5% | within 10% | device-optimizer rows: median, "
             "worst | CPU-optimizer rows: median, worst |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
             "| %d | %.1f%% | %.1f%% | %d | %d | %d: %.1f%%, %.1f%% | %d: %s |" % (
                 stats["rows_measured"], stats["median_abs_error_pct"], stats["worst_abs_error_pct"],
                 stats["within_5pct"], stats["within_10pct"], stats["device_optimizer_rows"],
                 stats["device_median_abs_error_pct"], stats["device_worst_abs_error_pct"], stats["cpu_optimizer_rows"],
                 "-" if not cpu else "%.1f%%, %.1f%%" % (stats["cpu_median_abs_error_pct"],
                                                       stats["cpu_worst_abs_error_pct"]))] + lines
    open(out_md, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines[:3]))


if __name__ == "__main__":
    main()
