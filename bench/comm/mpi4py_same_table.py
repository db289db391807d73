"""The README tables of a results.json that holds several runs of bench/comm/mpi4py_same.py per side (as
docs/benchmarks/2026-12-06-cpu-p2p-single-copy/results.json does): each side's best time a case and size over its
runs, and every other side's speed as a multiple of the first side's (mpi4py's).

    python3 bench/comm/mpi4py_same_table.py docs/benchmarks/2026-12-06-cpu-p2p-single-copy/results.json
"""

from __future__ import annotations

import json
import sys


def size_name(b: int) -> str:
    return f"{b} B" if b < 1024 else (f"{b // 1024} KiB" if b < 1 << 20 else f"{b >> 20} MiB")


def main() -> None:
    data = json.load(open(sys.argv[1]))
    best = {}  # side -> (case, bytes) -> seconds
    for side, runs in data["runs"].items():
        best[side] = {}
        for rows in runs:
            for r in rows:
                k = (r["case"], r["bytes"])
                best[side][k] = min(best[side].get(k, float("inf")), r["seconds"])
    sides = list(best)
    base = sides[0]
    keys = list(best[base])
    cases = list(dict.fromkeys(c for c, _ in keys))
    sizes = list(dict.fromkeys(b for _, b in keys if b))
    for side in sides[1:]:
        print(f"\n{side}: speed as a multiple of {base}'s (best run of each; bold: slower)\n")
        print("| case | " + " | ".join(size_name(b) for b in sizes) + " |")
        print("| --- |" + " ---: |" * len(sizes))
        for c in cases:
            if c == "barrier":
                continue
            cells = []
            for b in sizes:
                k = (c, b)
                if k not in best[base] or k not in best[side]:
                    cells.append("")
                    continue
                r = best[base][k] / best[side][k]
                cells.append(f"**{r:.2f}**" if r < 1 else f"{r:.2f}")
            print(f"| {c} | " + " | ".join(cells) + " |")
        if ("barrier", 0) in best[side]:
            print(f"\nbarrier: {base} {best[base][('barrier', 0)] * 1e6:.2f} us, {side} "
                  f"{best[side][('barrier', 0)] * 1e6:.2f} us")
    print("\n8 B times (us), " + " / ".join(sides) + ": " + "; ".join(
        f"{c} " + " / ".join(f"{best[s][(c, 8)] * 1e6:.2f}" for s in sides) for c in cases if all((c, 8) in best[s] for s in sides)))


if __name__ == "__main__":
    main()
