"""Allgather into a receive buffer kept from call to call against one the caller has just zeroed (numpy's zeros_like,
as mpi4py_same.py's alltoall does), over mpi4py and over tiertrain.comm (issue 48: the own block's stores,
docs/benchmarks/2026-12-07-cpu-own-block-ordinary-stores/). Prints "IMPL allgather-MODE BYTES MICROSECONDS" (the
slowest rank's mean per call) for blocks of 2 and 16 MiB.

    mpirun -n 2 python3 bench/comm/allgather_fresh.py mpi4py
    tiertrain launch -n 2 -- python3 bench/comm/allgather_fresh.py tiertrain
"""
import sys, numpy as np
impl = sys.argv[1]
if impl == "mpi4py":
    from mpi4py import MPI
else:
    import tiertrain.comm as MPI
comm = MPI.COMM_WORLD
n = comm.Get_size()
for size in (2 << 20, 16 << 20):
    b = np.ones(size, np.uint8)
    big = np.zeros(size * n, np.uint8)
    for mode in ("kept", "fresh"):
        def once():
            if mode == "kept":
                comm.Allgather(b, big)
            else:
                comm.Allgather(b, np.zeros_like(big))
        for _ in range(5): once()
        comm.Barrier()
        iters = 60 if size > (4 << 20) else 300
        t0 = MPI.Wtime()
        for _ in range(iters): once()
        t = comm.allreduce((MPI.Wtime() - t0) / iters, op=MPI.MAX)
        if comm.Get_rank() == 0:
            print(f"{impl} allgather-{mode} {size} {t*1e6:.1f}", flush=True)
