"""The Python layer's cost a call, alone (Note [python calls] in python/tiertrain/_comm.cc): in a world of one rank
(run it without a launcher), each collective on two float32 elements of the communicator's pool, called from a
Python loop (through a closure, as bench/comm/py_comm_bench.py calls them) against the same calls from a C++ loop on the
same buffers (Comm._time_loop); best of --repeats, in ns. An empty closure call is printed for scale.

    python bench/comm/py_layer_cost.py [--calls 200000] [--repeats 7]
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    import numpy as np

    import tiertrain.comm as tc

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200000, help="calls a loop (default 200000)")
    ap.add_argument("--repeats", type=int, default=7, help="loops of each kind; the best is kept (default 7)")
    a = ap.parse_args()
    comm = tc.world()
    if comm.size != 1:
        ap.error("run it as one process: it measures the layer, not the communication")
    s, r = comm.zeros(2, np.float32), comm.zeros(2, np.float32)
    # (name, the Python call, sendbuf and recvbuf of the same call for _time_loop)
    cases = [
        ("Bcast", lambda: comm.Bcast(r, root=0), None, r),
        ("Allreduce", lambda: comm.Allreduce(s, r, op=tc.SUM), s, r),
        ("Reduce", lambda: comm.Reduce(s, r, op=tc.SUM, root=0), s, r),
        ("Gather", lambda: comm.Gather(s, r, root=0), s, r),
        ("Allgather", lambda: comm.Allgather(s, r), s, r),
        ("Scatter", lambda: comm.Scatter(s, r, root=0), s, r),
        ("Reduce_scatter", lambda: comm.Reduce_scatter(s, r, op=tc.SUM), s, r),
        ("Alltoall", lambda: comm.Alltoall(s, r), s, r),
    ]
    n = a.calls
    print(f"# the Python layer a call (1 rank, 8 B, best of {a.repeats} loops of {n} calls)")
    print(f"# {'collective':<15} {'python ns':>10} {'c++ ns':>8} {'layer ns':>9}")
    for name, call, sb, rb in cases:
        best_py = best_cpp = float("inf")
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            best_py = min(best_py, (time.perf_counter() - t0) / n)
            best_cpp = min(best_cpp, comm._time_loop(name, sb, rb, tc.SUM, 0, n) / n)
        print(f"  {name:<15} {best_py * 1e9:10.0f} {best_cpp * 1e9:8.0f} {(best_py - best_cpp) * 1e9:9.0f}")

    def empty() -> None:
        pass

    best = float("inf")
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            empty()
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"# an empty Python function call: {best * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
