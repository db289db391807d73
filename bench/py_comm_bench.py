"""tiertrain.comm from Python, timed as `tiertrain comm-bench` and bench/mpi4py_bench.py time themselves, for issue
5's Python targets (>= 97% of the C++ busbw from 1 MiB; Bcast, Gather, Allreduce >= 2x mpi4py + Open MPI):

    tiertrain launch -n 8 --bind-to core -- python3 bench/py_comm_bench.py -C allreduce -b 8 -e 256M -f 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def main() -> None:
    import numpy as np

    import tiertrain.comm as tc

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-C", "--collective", default="allreduce", choices=["allreduce", "broadcast", "gather", "allgather"])
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="64M")
    ap.add_argument("-f", "--stepfactor", type=float, default=2.0)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    comm = tc.world()
    n, me = comm.size, comm.rank
    factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(a.collective, (n - 1) / n)
    split = a.collective in ("gather", "allgather")
    rows = []
    if me == 0:
        print(f"# tiertrain.comm (Python): {a.collective}, float, sum, {n} ranks")
        print("#%11s %13s %9s %8s %8s" % ("size", "count", "time", "algbw", "busbw"))
    size = float(parse_size(a.minbytes))
    while size <= parse_size(a.maxbytes) * 1.0000001:
        count = int(size) // 4
        if split:
            count = count // n * n
        if count == 0:
            size *= a.stepfactor
            continue
        per = count // n
        send = np.ones(per if split else count, dtype=np.float32)
        recv = np.zeros(count, dtype=np.float32)

        def call() -> None:
            if a.collective == "allreduce":
                comm.Allreduce(send, recv, op=tc.SUM)
            elif a.collective == "broadcast":
                comm.Bcast(recv, root=0)
            elif a.collective == "gather":
                comm.Gather(send, recv if me == 0 else None, root=0)
            else:
                comm.Allgather(send, recv)

        for _ in range(a.warmup):
            call()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            call()
        t = np.array([(time.perf_counter() - t0) / a.iters])
        comm.Allreduce(tc.IN_PLACE, t, op=tc.AVG)
        alg = count * 4 / t[0] / 1e9
        rows.append({"collective": a.collective, "ranks": n, "backend": "tiertrain.comm (python)", "size": count * 4,
                     "count": count, "in_place": False, "time_us": t[0] * 1e6, "algbw_gbs": alg,
                     "busbw_gbs": alg * factor})
        if me == 0:
            print("%12d %13d %9.2f %8.2f %8.2f" % (count * 4, count, t[0] * 1e6, alg, alg * factor))
            sys.stdout.flush()
        size *= a.stepfactor
    if me == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
