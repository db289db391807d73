"""The losses of runs against the first run's, step by step, from their --metrics-jsonl files: identical (every
step's loss and gradient norm the same double), or the largest difference.

    python3 bench/llama/compare_losses.py REFERENCE.jsonl OTHER.jsonl...
"""

from __future__ import annotations

import json
import os
import sys


def steps(path: str) -> dict[int, tuple[float, float]]:
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train":
                out[r["step"]] = (r["loss"], r["grad_norm"])
    return out


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ref_path = sys.argv[1]
    ref = steps(ref_path)
    name = lambda p: os.path.basename(p).removesuffix(".jsonl")  # noqa: E731
    first, last = min(ref), max(ref)
    print(f"{name(ref_path)}: {len(ref)} steps, loss {ref[first][0]:.6f} -> {ref[last][0]:.6f} (the reference)")
    for path in sys.argv[2:]:
        got = steps(path)
        common = sorted(set(ref) & set(got))
        if not common:
            print(f"{name(path)}: no steps in common")
            continue
        same = all(got[s] == ref[s] for s in common) and len(common) == len(ref) == len(got)
        worst = max(abs(got[s][0] - ref[s][0]) for s in common)
        rel = max(abs(got[s][0] - ref[s][0]) / abs(ref[s][0]) for s in common)
        what = "identical (every loss and norm, bit for bit)" if same else f"max |loss difference| {worst:.3g} ({rel:.3g} relative)"
        print(f"{name(path)}: {len(common)} steps, loss {got[common[0]][0]:.6f} -> {got[common[-1]][0]:.6f}: {what}")


if __name__ == "__main__":
    main()
