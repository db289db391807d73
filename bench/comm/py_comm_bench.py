"""tiertrain.comm from Python, timed as `tiertrain comm-bench` and bench/comm/mpi4py_bench.py time themselves, for issue
5's Python targets (>= 97% of the C++ busbw from 1 MiB; Bcast, Gather, Allreduce >= 2x mpi4py + Open MPI).

Each size and form is also timed as the same calls made by a C++ loop on the same buffers, in the same process
(`Comm._time_loop`), right after the Python loop: the last columns are that time and Python's busbw as a fraction
of it, the cost of the Python layer alone (the two separate benchmark programs differ in their buffers too).

    tiertrain launch -n 8 --bind-to core -- python3 bench/comm/py_comm_bench.py -C allreduce -b 8 -e 256M -f 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys

from comm_bench_common import add_sweep_args, buffers, bus_factor, float_counts, mean_time_per_call


# The Comm method each benchmarked collective is (Comm._time_loop's names).
CPP_NAME = {"allreduce": "Allreduce", "broadcast": "Bcast", "reduce": "Reduce", "gather": "Gather",
            "allgather": "Allgather", "scatter": "Scatter", "reduce_scatter": "Reduce_scatter", "alltoall": "Alltoall"}
# Rooted collectives (root 0): the ones whose receive (gather, reduce) or send (scatter) buffer only the root has.
ROOTED = ("broadcast", "reduce", "gather", "scatter")


def arguments(c: str, count: int, n: int, me: int, in_place: bool, ones, zeros, IN_PLACE):
    """(sendbuf, recvbuf) of collective c on this rank, as comm-bench shapes them (count: the elements of the
    collective, per = count / n: a rank's piece) in either form; None where a rank passes no buffer."""
    per = count // n
    root = me == 0
    if c == "allreduce":
        return (IN_PLACE, zeros(count)) if in_place else (ones(count), zeros(count))
    if c == "broadcast":
        return None, zeros(count)  # one form (mpi4py's): both passes time it
    if c == "reduce":
        if in_place and root:
            return IN_PLACE, zeros(count)
        return ones(count), zeros(count) if root else None
    if c == "gather":
        if in_place and root:
            return IN_PLACE, zeros(count)
        return ones(per), zeros(count) if root else None
    if c == "allgather":
        return (IN_PLACE, zeros(count)) if in_place else (ones(per), zeros(count))
    if c == "scatter":  # in place at the root: recvbuf holds every piece (tiertrain's IN_PLACE sendbuf)
        if in_place and root:
            return IN_PLACE, ones(count)
        return ones(count) if root else None, zeros(per)
    if c == "reduce_scatter":  # in place: recvbuf holds all, the result at its start (MPI's)
        return (IN_PLACE, ones(count)) if in_place else (ones(count), zeros(per))
    return (IN_PLACE, ones(count)) if in_place else (ones(count), zeros(count))  # alltoall


def main() -> None:
    import numpy as np

    import tiertrain.comm as tc

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-C", "--collective", default="allreduce", choices=list(CPP_NAME))
    add_sweep_args(ap)
    ap.add_argument("--pairs", type=int, default=1,
                    help="alternate the Python and the C++ loop this many times at each size; medians (default 1)")
    ap.add_argument("--pool", action="store_true",
                    help="buffers from Comm.zeros (the shared pool, read and written where they are)")
    a = ap.parse_args()
    ones, zeros = buffers(a.huge)
    if a.pairs < 1:
        ap.error("--pairs must be >= 1")
    comm = tc.world()
    n, me = comm.size, comm.rank
    if a.pool:
        def ones(count):
            x = comm.zeros(count, np.float32)
            x.fill(1)
            return x

        def zeros(count):
            return comm.zeros(count, np.float32)
    factor = bus_factor(a.collective, n)
    rows = []
    if me == 0:
        print(f"# tiertrain.comm (Python): {a.collective}, float, sum, {n} ranks")
        print("#%11s %13s %9s %8s %8s %9s %8s %8s %9s %7s %9s %7s" % (
            "size", "count", "time", "algbw", "busbw", "time", "algbw", "busbw", "c++ time", "py/c++", "c++ time",
            "py/c++"))

    def mean_over_ranks(t: float) -> float:
        v = np.array([t])
        comm.Allreduce(tc.IN_PLACE, v, op=tc.AVG)
        return float(v[0])

    def max_over_ranks(x: float) -> float:
        v = np.array([x])
        comm.Allreduce(tc.IN_PLACE, v, op=tc.MAX)
        return float(v[0])

    for count in float_counts(a, a.collective, n):
        out = []
        # Out of place, then in place, as comm-bench and mpi4py_bench.py run them (Bcast has one form: both passes
        # time it).
        for in_place in (False, True):
            sb, rb = arguments(a.collective, count, n, me, in_place, ones, zeros, tc.IN_PLACE)
            method = getattr(comm, CPP_NAME[a.collective])
            if a.collective == "broadcast":
                def call() -> None:
                    comm.Bcast(rb, root=0)
            elif a.collective in ROOTED:
                def call() -> None:
                    method(sb, rb, root=0)
            elif a.collective in ("allreduce", "reduce_scatter"):
                def call() -> None:
                    method(sb, rb, op=tc.SUM)
            else:
                def call() -> None:
                    method(sb, rb)

            # The same calls from a C++ loop (warm already), timed alike: a barrier, then iters calls. --pairs
            # alternates the two loops that many times and takes each one's median, so that a slow spell of the
            # machine falls on both.
            ts, ts_cpp = [], []
            first = not rows
            warm_ms = a.first_warmup_ms if first and a.first_warmup_ms > 0 else a.warmup_ms
            iters = a.iters
            def cpp_loop() -> None:
                comm.Barrier()
                ts_cpp.append(mean_over_ranks(comm._time_loop(CPP_NAME[a.collective], sb, rb, tc.SUM, 0, iters)
                                              / iters))

            for k in range(a.pairs):
                # The first pair warms up and settles the number of calls; the others time as many. From the second
                # pair on, the two loops take turns at going first (C++ first in the second, fourth, ... pair), so
                # that whatever favours the first or the second loop of a pair falls on both.
                if k > 0 and k % 2 == 1:
                    cpp_loop()
                t, iters = mean_time_per_call(call, a.warmup if k == 0 else 0, iters, comm.Barrier, mean_over_ranks,
                                              warm_ms if k == 0 else 0.0, max_over_ranks, a.min_ms if k == 0 else 0.0)
                ts.append(t)
                if k == 0 or k % 2 == 0:
                    cpp_loop()
            t, t_cpp = float(np.median(ts)), float(np.median(ts_cpp))
            alg = count * 4 / t / 1e9
            out.append((t, alg, alg * factor, t_cpp))
            rows.append({"collective": a.collective, "ranks": n, "backend": "tiertrain.comm (python)",
                         "size": count * 4, "count": count, "in_place": in_place, "time_us": t * 1e6,
                         "algbw_gbs": alg, "busbw_gbs": alg * factor, "cpp_loop_time_us": t_cpp * 1e6,
                         "py_over_cpp_loop": t_cpp / t,
                         "py_over_cpp_loop_best": min(ts_cpp) / min(ts), "pairs": a.pairs, "iters": iters,
                         "time_us_all": [x * 1e6 for x in ts],
                         "cpp_loop_time_us_all": [x * 1e6 for x in ts_cpp]})
        if me == 0:
            print("%12d %13d %9.2f %8.2f %8.2f %9.2f %8.2f %8.2f %9.2f %7.3f %9.2f %7.3f" % (
                count * 4, count, out[0][0] * 1e6, out[0][1], out[0][2], out[1][0] * 1e6, out[1][1], out[1][2],
                out[0][3] * 1e6, out[0][3] / out[0][0], out[1][3] * 1e6, out[1][3] / out[1][0]))
            sys.stdout.flush()
    if me == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
