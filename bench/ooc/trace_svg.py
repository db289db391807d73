"""Draws one step of a tiertrain --trace file as an SVG timeline: a row per stream (compute, h2d, d2h, host), compute
ops in blue, the compute stream's waits in red, copies in green (h2d) and orange (d2h), host work (the CPU optimizer)
in purple, a millisecond axis.
No dependencies beyond the standard library.

    python3 bench/ooc/trace_svg.py trace.json out.svg [--step N]
"""

from __future__ import annotations

import argparse
import json
from xml.sax.saxutils import escape


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("out")
    p.add_argument("--step", type=int, default=0, help="step to draw (default: the last traced)")
    args = p.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    step = args.step or max(e["args"]["step"] for e in spans)
    spans = [e for e in spans if e["args"]["step"] == step]
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    width, left, row_h, top = 1400, 150, 34, 40
    scale = (width - left - 20) / (t1 - t0)
    rows = {1: "compute", 2: "h2d (host -> device)", 3: "d2h (device -> host)", 4: "host (CPU optimizer)"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + row_h * len(rows) + 60}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="10" y="20" font-size="14">tiertrain --trace, step {step}: {(t1 - t0) / 1e3:.1f} ms</text>']
    for tid, name in rows.items():
        y = top + (tid - 1) * row_h
        out.append(f'<text x="10" y="{y + 21}">{escape(name)}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{width - left - 20}" height="{row_h - 6}" fill="#f4f4f4"/>')
    for e in spans:
        if e["tid"] not in rows:
            continue
        y = top + (e["tid"] - 1) * row_h
        x = left + (e["ts"] - t0) * scale
        w = max(e["dur"] * scale, 0.5)
        if e["tid"] == 2:
            color = "#3a9d5d"
        elif e["tid"] == 3:
            color = "#e08a2c"
        elif e["tid"] == 4:
            color = "#8a5cc2"
        elif e["name"].startswith("wait "):
            color = "#d9453b"
        else:
            color = "#4a78c2"
        label = escape(f'{e["name"]}: {e["dur"] / 1e3:.2f} ms')
        out.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 6}" fill="{color}" '
                   f'stroke="white" stroke-width="0.3"><title>{label}</title></rect>')
    axis_y = top + row_h * len(rows) + 10
    span_ms = (t1 - t0) / 1e3
    tick = next(t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if span_ms / t <= 12)
    ms = 0.0
    while ms <= span_ms:
        x = left + ms * 1e3 * scale
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="black"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle">{ms:g} ms</text>')
        ms += tick
    legend = [("#4a78c2", "compute op"), ("#d9453b", "compute waits"), ("#3a9d5d", "host -> device copy"),
              ("#e08a2c", "device -> host copy"), ("#8a5cc2", "host work (CPU AdamW)")]
    for i, (color, text) in enumerate(legend):
        x = left + i * 220
        out.append(f'<rect x="{x}" y="{axis_y + 28}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 18}" y="{axis_y + 39}">{text}</text>')
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
