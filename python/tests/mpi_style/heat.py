"""A 1-D heat equation split over the ranks: halo exchange with Sendrecv (PROC_NULL at the ends), the residual by
Allreduce; the result is checked against the same iteration on one process."""
import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
n = 12 * size
lo, hi = rank * n // size, (rank + 1) * n // size
left = rank - 1 if rank > 0 else MPI.PROC_NULL
right = rank + 1 if rank < size - 1 else MPI.PROC_NULL


def initial(i):
    return np.sin(np.pi * (i + 1) / (n + 1)) + 0.1 * ((i * 7) % 5)


u = np.zeros(hi - lo + 2)
u[1:-1] = initial(np.arange(lo, hi))
steps = 0
while True:
    comm.Sendrecv([u[-2:-1], MPI.DOUBLE], right, 0, [u[0:1], MPI.DOUBLE], left, 0)
    comm.Sendrecv([u[1:2], MPI.DOUBLE], left, 1, [u[-1:], MPI.DOUBLE], right, 1)
    new = u.copy()
    new[1:-1] = u[1:-1] + 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
    local = np.array([np.sum((new[1:-1] - u[1:-1]) ** 2)])
    total = np.zeros(1)
    comm.Allreduce([local, MPI.DOUBLE], [total, MPI.DOUBLE], op=MPI.SUM)
    u = new
    steps += 1
    if total[0] < 1e-10 or steps == 400:
        break

everything = comm.gather(u[1:-1], root=0)
if rank == 0:
    w = np.zeros(n + 2)
    w[1:-1] = initial(np.arange(n))
    for _ in range(steps):
        w[1:-1] = w[1:-1] + 0.25 * (w[:-2] - 2 * w[1:-1] + w[2:])
    assert np.allclose(np.concatenate(everything), w[1:-1], rtol=0, atol=1e-12)
print(f"heat: rank {rank} ok")
