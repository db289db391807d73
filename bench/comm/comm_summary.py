"""Table of bench/comm/comm_host.sh: per collective and rank count, tiertrain shm against Open MPI (through mpi4py, and
from C++ for the latency where bench/mpi_raw_bench ran) at 8 B (latency) and 64 MiB (busbw), out of place and in place (MPI_Bcast has only the in-place form), and tiertrain's
Python API against its C++ and against mpi4py (its faster row of huge-page and numpy arrays where both ran: pool
mode). Where comm_host.sh ran a sweep several times (TT_COMM_REPEATS: files
NAME.json, NAME.r2.json, ...), each size and form takes the run with the median busbw. Writes results.md and
results.json into the folder it reads."""

from __future__ import annotations

import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comm_bench_common import write_results  # noqa: E402


def load(out, prefix, coll, n):
    """The rows of PREFIX_COLL_N.json and its repeats (.r2.json, ...): per size and form, the run with the median
    busbw. [] when there is none."""
    paths = [p for p in [os.path.join(out, f"{prefix}_{coll}_{n}.json")] if os.path.exists(p)]
    paths += sorted(glob.glob(os.path.join(out, f"{prefix}_{coll}_{n}.r*.json")))
    runs = {}
    for p in paths:
        for r in json.load(open(p)):
            runs.setdefault((r["size"], r.get("in_place", False)), []).append(r)
    rows = []
    for key in sorted(runs):
        rs = sorted(runs[key], key=lambda r: r["busbw_gbs"])
        rows.append(dict(rs[(len(rs) - 1) // 2], repeats=len(rs)))
    return rows


def faster(a, b):
    """Per size and form, the row of a or b with the higher busbw (either, where only one has it): a library's best
    of two buffer kinds (mpi4py on huge-page arrays, ompi_*, and on numpy's, ompi_numpy_*)."""
    best = {}
    for r in a + b:
        k = (r["size"], r.get("in_place", False))
        if k not in best or r["busbw_gbs"] > best[k]["busbw_gbs"]:
            best[k] = r
    return [best[k] for k in sorted(best)]


def row_at(rows, size, in_place=False):
    best = None
    for r in rows:
        if r.get("in_place", False) != in_place:
            continue
        if best is None or abs(r["size"] - size) < abs(best["size"] - size):
            best = r
    return best


def min_ratio(num, den, den_form=None, from_bytes=1 << 20):
    """The smallest num/den busbw ratio over the sizes and forms both have from `from_bytes` up (and the size where
    it is). Each row of num is matched with den's row of the same form (out of place, in place), or of the form
    den_form (True: in place) when given."""
    worst = None
    for r in num:
        if r["size"] < from_bytes:
            continue
        form = r.get("in_place", False) if den_form is None else den_form
        d = next((x for x in den if x["size"] == r["size"] and x.get("in_place", False) == form), None)
        if d is None or d["busbw_gbs"] == 0:
            continue
        q = r["busbw_gbs"] / d["busbw_gbs"]
        if worst is None or q < worst[0]:
            worst = (q, r["size"])
    return worst


def main() -> None:
    out = sys.argv[1]
    lines = ["| collective | ranks | shm latency (us) | Open MPI latency (us), mpi4py | ratio | "
             "Open MPI latency (us), C++ | ratio | shm busbw 64 MiB (GB/s) | "
             "Open MPI busbw 64 MiB (GB/s) | busbw ratio | in place: shm / Open MPI (GB/s) | in-place ratio | "
             "Python busbw 64 MiB (GB/s) | Python / C++ at 64 MiB | "
             "Python / C++, worst from 1 MiB | Python / C++ loop in the same process, worst from 1 MiB | "
             "the same, best of each loop's pairs: worst from 1 MiB; median | Python / mpi4py, worst from 1 MiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: |"]
    summary = []
    sweeps = set()
    for p in glob.glob(os.path.join(out, "shm_*.json")):  # sweeps, and latency runs alone (TT_COMM_AB_LAT_ONLY)
        m = re.fullmatch(r"shm_(?:lat_)?(\w+)_(\d+)(?:\.r\d+)?\.json", os.path.basename(p))
        if m:
            sweeps.add((m.group(1), int(m.group(2))))
    for coll, n in sorted(sweeps):
        shm = load(out, "shm", coll, n)
        ompi = faster(load(out, "ompi", coll, n), load(out, "ompi_numpy", coll, n))
        s8, s64 = row_at(shm, 8), row_at(shm, 64 << 20)
        o8, o64 = (row_at(ompi, 8), row_at(ompi, 64 << 20)) if ompi else (None, None)
        # Latency from the dedicated runs (many iterations of the smallest sizes) where there are some: the
        # smallest size of each.
        lat = lambda prefix: load(out, f"{prefix}_lat", coll, n) or None  # noqa: E731
        sl, ol = lat("shm"), lat("ompi")
        if sl:
            s8 = min(sl, key=lambda r: (r["size"], r.get("in_place", False)))
        if ol:
            o8 = min(ol, key=lambda r: (r["size"], r.get("in_place", False)))
        # Open MPI from C++ (bench/mpi_raw_bench), where it ran: without mpi4py's cost a call.
        cl = lat("ompic")
        c8 = min(cl, key=lambda r: (r["size"], r.get("in_place", False))) if cl else None
        # In place (MPI_Bcast's only form; the out-of-place broadcast adds the root's own copy).
        si64, oi64 = row_at(shm, 64 << 20, in_place=True), row_at(ompi, 64 << 20, in_place=True) if ompi else None
        py = load(out, "py", coll, n)
        p64 = row_at(py, 64 << 20) if py else None
        # Python's Bcast is in place (mpi4py's signature): compare it with comm-bench's in-place column.
        bcast = coll == "broadcast"
        c64 = row_at(shm, 64 << 20, in_place=bcast)
        py_cpp = min_ratio(py, shm, den_form=True if bcast else None) if py else None
        py_mpi = min_ratio(py, ompi) if py and ompi else None
        # The cost of the Python layer alone: each Python row against the same calls from a C++ loop on the same
        # buffers in the same process (bench/comm/py_comm_bench.py), where the rows have it.
        loop = [(r["py_over_cpp_loop"], r["size"]) for r in (py or [])
                if r["size"] >= 1 << 20 and "py_over_cpp_loop" in r]
        py_loop = min(loop) if loop else None
        # The same, each loop's best of its pairs (noise on a shared VM only adds time): the worst row and the median.
        best = sorted((r["py_over_cpp_loop_best"], r["size"]) for r in (py or [])
                      if r["size"] >= 1 << 20 and "py_over_cpp_loop_best" in r)
        py_best = best[0] if best else None
        py_best_median = best[len(best) // 2][0] if best else None
        f = lambda v, p="{:.2f}": "" if v is None else p.format(v)  # noqa: E731
        w = lambda x: "" if x is None else f"{x[0]:.2f} ({x[1] >> 20} MiB)"  # noqa: E731
        lines.append(f"| {coll} | {n} | {f(s8 and s8['time_us'])} | {f(o8 and o8['time_us'])} | "
                     f"{f(o8 and s8 and o8['time_us'] / s8['time_us'], '{:.2f}x')} | {f(c8 and c8['time_us'])} | "
                     f"{f(c8 and s8 and c8['time_us'] / s8['time_us'], '{:.2f}x')} | {f(s64 and s64['busbw_gbs'])} | "
                     f"{f(o64 and o64['busbw_gbs'])} | "
                     f"{f(o64 and s64 and s64['busbw_gbs'] / o64['busbw_gbs'], '{:.2f}x')} | "
                     f"{f(si64 and si64['busbw_gbs'])} / {f(oi64 and oi64['busbw_gbs'])} | "
                     f"{f(oi64 and si64 and si64['busbw_gbs'] / oi64['busbw_gbs'], '{:.2f}x')} | "
                     f"{f(p64 and p64['busbw_gbs'])} | {f(p64 and c64 and p64['busbw_gbs'] / c64['busbw_gbs'], '{:.2f}')} | "
                     f"{w(py_cpp)} | {w(py_loop)} | {w(py_best)}{f(py_best_median, '; median {:.2f}')} | "
                     f"{w(py_mpi)} |")
        summary.append({"collective": coll, "ranks": int(n), "repeats": s64 and s64["repeats"], "shm_8B_us": s8 and s8["time_us"],
                        "ompi_8B_us": o8 and o8["time_us"], "ompi_cxx_8B_us": c8 and c8["time_us"], "shm_64MiB_busbw": s64 and s64["busbw_gbs"],
                        "ompi_64MiB_busbw": o64 and o64["busbw_gbs"],
                        "shm_64MiB_busbw_in_place": si64 and si64["busbw_gbs"],
                        "ompi_64MiB_busbw_in_place": oi64 and oi64["busbw_gbs"], "py_64MiB_busbw": p64 and p64["busbw_gbs"],
                        "py_over_cpp_worst_from_1MiB": py_cpp and py_cpp[0],
                        "py_over_cpp_loop_worst_from_1MiB": py_loop and py_loop[0],
                        "py_over_cpp_loop_best_of_pairs_worst_from_1MiB": py_best and py_best[0],
                        "py_over_cpp_loop_best_of_pairs_median_from_1MiB": py_best_median,
                        "py_over_mpi4py_worst_from_1MiB": py_mpi and py_mpi[0]})
    if glob.glob(os.path.join(out, "ompi_numpy_*.json")):
        lines += ["", "Open MPI's rows are, size by size, the faster of mpi4py on huge-page arrays and on numpy's arrays "
                  "(each the median of its repeats): a bias in Open MPI's favour."]
    write_results(out, lines, summary)


if __name__ == "__main__":
    main()
