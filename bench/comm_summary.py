"""Table of bench/comm_host.sh: per collective and rank count, tiertrain shm against Open MPI (mpi4py) at 8 B
(latency) and 64 MiB (busbw), out of place, and tiertrain's Python API against its C++. Writes results.md into the
folder it reads."""

from __future__ import annotations

import glob
import json
import os
import sys


def row_at(rows, size, in_place=False):
    best = None
    for r in rows:
        if r.get("in_place", False) != in_place:
            continue
        if best is None or abs(r["size"] - size) < abs(best["size"] - size):
            best = r
    return best


def main() -> None:
    out = sys.argv[1]
    lines = ["| collective | ranks | shm 8 B (us) | Open MPI 8 B (us) | latency ratio | shm busbw 64 MiB (GB/s) | "
             "Open MPI busbw 64 MiB (GB/s) | busbw ratio | Python busbw 64 MiB (GB/s) | Python / C++ |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for path in sorted(glob.glob(os.path.join(out, "shm_*.json"))):
        name = os.path.basename(path)[4:-5]
        coll, n = name.rsplit("_", 1)
        shm = json.load(open(path))
        ompi_path = os.path.join(out, f"ompi_{coll}_{n}.json")
        ompi = json.load(open(ompi_path)) if os.path.exists(ompi_path) else []
        s8, s64 = row_at(shm, 8), row_at(shm, 64 << 20)
        o8, o64 = (row_at(ompi, 8), row_at(ompi, 64 << 20)) if ompi else (None, None)
        py_path = os.path.join(out, f"py_{coll}_{n}.json")
        p64 = row_at(json.load(open(py_path)), 64 << 20) if os.path.exists(py_path) else None
        # Python's Bcast is in place (mpi4py's signature): compare it with comm-bench's in-place column.
        c64 = row_at(shm, 64 << 20, in_place=(coll == "broadcast"))
        f = lambda v, p="{:.2f}": "" if v is None else p.format(v)  # noqa: E731
        lines.append(f"| {coll} | {n} | {f(s8 and s8['time_us'])} | {f(o8 and o8['time_us'])} | "
                     f"{f(o8 and s8 and o8['time_us'] / s8['time_us'], '{:.2f}x')} | {f(s64 and s64['busbw_gbs'])} | "
                     f"{f(o64 and o64['busbw_gbs'])} | "
                     f"{f(o64 and s64 and s64['busbw_gbs'] / o64['busbw_gbs'], '{:.2f}x')} | "
                     f"{f(p64 and p64['busbw_gbs'])} | {f(p64 and c64 and p64['busbw_gbs'] / c64['busbw_gbs'], '{:.2f}')} |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "results.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
