"""Open MPI through mpi4py, timed as `tiertrain comm-bench` times itself, for the side-by-side of issue 5: per size,
a barrier, then -n back-to-back calls after -w warm-up ones; the time is the mean over ranks of each rank's mean time
per call; busbw uses nccl-tests' factors. Out of place and in place (MPI.IN_PLACE), like comm-bench's table.

    mpirun -n 8 --bind-to core python3 bench/comm/mpi4py_bench.py -C allreduce -b 8 -e 256M -f 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys

from comm_bench_common import add_sweep_args, buffers, bus_factor, float_counts, mean_time_per_call


def main() -> None:
    from mpi4py import MPI

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-C", "--collective", default="allreduce",
                    choices=["allreduce", "broadcast", "reduce", "allgather", "gather", "scatter", "reduce_scatter",
                             "alltoall"])
    add_sweep_args(ap)
    a = ap.parse_args()
    ones, zeros = buffers(a.huge)
    comm = MPI.COMM_WORLD
    n, me = comm.Get_size(), comm.Get_rank()
    factor = bus_factor(a.collective, n)
    rows = []
    if me == 0:
        print(f"# mpi4py {__import__('mpi4py').__version__} over {MPI.Get_library_version().splitlines()[0]}: "
              f"{a.collective}, float, sum, {n} ranks")
        print("#%11s %13s %9s %8s %8s %9s %8s %8s" % ("size", "count", "time", "algbw", "busbw", "time", "algbw",
                                                      "busbw"))
    for count in float_counts(a, a.collective, n):
        per = count // n
        out = []
        for in_place in (False, True):
            send = ones(per if a.collective in ("allgather", "gather") else count)
            recv = zeros(per if a.collective in ("reduce_scatter", "scatter") else count)

            def call() -> None:
                if a.collective == "allreduce":
                    comm.Allreduce(MPI.IN_PLACE if in_place else send, recv if not in_place else send, op=MPI.SUM)
                elif a.collective == "broadcast":
                    comm.Bcast(send, root=0)
                elif a.collective == "reduce":
                    if in_place and me == 0:
                        comm.Reduce(MPI.IN_PLACE, send, op=MPI.SUM, root=0)
                    else:
                        comm.Reduce(send, recv, op=MPI.SUM, root=0)
                elif a.collective == "allgather":
                    comm.Allgather(MPI.IN_PLACE if in_place else send, recv)
                elif a.collective == "gather":
                    comm.Gather(MPI.IN_PLACE if in_place and me == 0 else send, recv, root=0)
                elif a.collective == "scatter":
                    comm.Scatter(send, MPI.IN_PLACE if in_place and me == 0 else recv, root=0)
                elif a.collective == "reduce_scatter":
                    comm.Reduce_scatter_block(send, recv, op=MPI.SUM)
                else:
                    comm.Alltoall(send, recv)

            first = not rows
            t, iters = mean_time_per_call(call, a.warmup, a.iters, comm.Barrier,
                                          lambda t: comm.allreduce(t, op=MPI.SUM) / n,
                                          a.first_warmup_ms if first and a.first_warmup_ms > 0 else a.warmup_ms,
                                          lambda x: comm.allreduce(x, op=MPI.MAX), a.min_ms)
            alg = count * 4 / t / 1e9
            out.append((t, alg, alg * factor))
            rows.append({"collective": a.collective, "ranks": n, "backend": "mpi4py+openmpi", "size": count * 4,
                         "count": count, "in_place": in_place, "time_us": t * 1e6, "algbw_gbs": alg,
                         "busbw_gbs": alg * factor, "iters": iters})
        if me == 0:
            print("%12d %13d %9.2f %8.2f %8.2f %9.2f %8.2f %8.2f" % (
                count * 4, count, out[0][0] * 1e6, out[0][1], out[0][2], out[1][0] * 1e6, out[1][1], out[1][2]))
            sys.stdout.flush()
    if me == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
