"""Table of bench/comm/comm_ab.sh: per collective, rank count and size, the median (over repeats) out-of-place and
in-place time of each setting, and its ratio to the first setting's (below 1: faster). Writes results.md and
results.json into the folder it reads and prints the table; #wrong other than 0 in any run is an error."""

from __future__ import annotations

import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comm_bench_common import write_results  # noqa: E402


def main(out: str) -> int:
    settings = {}
    for line in open(os.path.join(out, "settings.txt")):
        key, _, text = line.rstrip("\n").partition(" ")
        settings[key] = text
    # (collective, ranks, size, in_place) -> setting -> [time_us]
    times: dict = {}
    bad = []
    for p in sorted(glob.glob(os.path.join(out, "*_s*_r*.json"))):
        m = re.match(r"(.+)_(\d+)_(s\d+)_r(\d+)\.json$", os.path.basename(p))
        if not m:
            continue
        for row in json.load(open(p)):
            if row.get("wrong", 0) != 0:
                bad.append(f"{os.path.basename(p)}: {row['size']} B, #wrong {row['wrong']}")
            key = (m.group(1), int(m.group(2)), row["size"], row.get("in_place", False))
            times.setdefault(key, {}).setdefault(m.group(3), []).append(row["time_us"])
    keys = sorted(settings, key=lambda k: int(k[1:]))
    lines = [f"# A/B ({open(os.path.join(out, 'command.txt')).read().strip()})", ""]
    lines += [f"- `{k}`: {settings[k] if settings[k] != '-' else 'defaults'}" for k in keys]
    lines += ["", "Median time per call (us) over the repeats (n), and each setting against s0.", ""]
    head = "| collective | ranks | size (B) | form | n | " + " | ".join(keys) + " | " + " | ".join(
        f"{k}/s0" for k in keys[1:]) + " |"
    lines += [head, "| --- | ---: | ---: | --- | ---: |" + " ---: |" * (2 * len(keys) - 1)]
    summary = []
    for key in sorted(times):
        per = times[key]
        med = {k: statistics.median(per[k]) for k in keys if k in per}
        n = min(len(v) for v in per.values())
        summary.append({"collective": key[0], "ranks": key[1], "size": key[2], "in_place": key[3], "repeats": n,
                        "median_time_us": {settings[k]: med[k] for k in med}})
        cells = [f"{med[k]:.2f}" if k in med else "" for k in keys]
        ratios = [f"{med[k] / med['s0']:.2f}" if k in med and "s0" in med else "" for k in keys[1:]]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {'in place' if key[3] else 'out of place'} | {n} | "
                     + " | ".join(cells + ratios) + " |")
    if bad:
        lines += ["", "**Wrong results:**", *[f"- {b}" for b in bad]]
    write_results(out, lines, summary)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
