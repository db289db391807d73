"""A 2-D Jacobi smoothing split over the ranks by columns: each rank's ghost columns exchanged with a column
datatype (Create_vector, Commit), by Sendrecv one way and Irecv/Isend with Request.Waitall the other, timed with
Wtime; the result is checked against the same iteration on one process."""
import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
rows, per = 6, 4
cols = per * size
left = rank - 1 if rank > 0 else MPI.PROC_NULL
right = rank + 1 if rank < size - 1 else MPI.PROC_NULL


def initial(r, c):
    return np.sin(0.3 * r + 0.1) * np.cos(0.2 * c) + 0.05 * ((r * 3 + c * 7) % 4)


u = np.zeros((rows, per + 2))
u[:, 1:-1] = initial(np.arange(rows)[:, None], np.arange(rank * per, (rank + 1) * per)[None, :])
column = MPI.DOUBLE.Create_vector(rows, 1, per + 2).Commit()
start = MPI.Wtime()
for step in range(20):
    # My last column to the right neighbour's left ghost; its first column into my right ghost.
    comm.Sendrecv([u[0, per:], 1, column], right, 0, [u[0, 0:], 1, column], left, 0)
    reqs = [comm.Irecv([u[0, per + 1:], 1, column], source=right, tag=1),
            comm.Isend([u[0, 1:], 1, column], dest=left, tag=1)]
    MPI.Request.Waitall(reqs)
    new = u.copy()
    new[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    if rank == 0:
        new[:, 1] = u[:, 1]  # the grid's own edges stay
    if rank == size - 1:
        new[:, per] = u[:, per]
    u = new
elapsed = MPI.Wtime() - start
column.Free()

blocks = comm.gather(u[:, 1:-1], root=0)
if rank == 0:
    w = initial(np.arange(rows)[:, None], np.arange(cols)[None, :])
    for _ in range(20):
        v = w.copy()
        v[1:-1, 1:-1] = 0.25 * (w[:-2, 1:-1] + w[2:, 1:-1] + w[1:-1, :-2] + w[1:-1, 2:])
        w = v
    assert np.allclose(np.concatenate(blocks, axis=1), w, rtol=0, atol=1e-12)
    assert elapsed >= 0
print(f"halo2d: rank {rank} ok")
