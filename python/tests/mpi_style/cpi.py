"""pi by the midpoint rule: the interval count broadcast from rank 0, the partial sums reduced there."""
from math import pi as PI

import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
nprocs, myrank = comm.Get_size(), comm.Get_rank()

n = np.array(0, dtype=int)
pi = np.array(0, dtype=float)
mypi = np.array(0, dtype=float)
for intervals in (100, 10000, 0):
    if myrank == 0:
        n.fill(intervals)
    comm.Bcast([n, MPI.INT], root=0)
    if n == 0:
        break
    h = 1.0 / int(n)
    s = sum(4.0 / (1.0 + (h * (i - 0.5)) ** 2) for i in range(myrank + 1, int(n) + 1, nprocs))
    mypi.fill(s * h)
    comm.Reduce([mypi, MPI.DOUBLE], [pi, MPI.DOUBLE], op=MPI.SUM, root=0)
    if myrank == 0:
        assert abs(float(pi) - PI) < 1.0 / int(n) ** 2, (float(pi), int(n))
print(f"cpi: rank {myrank} ok")
