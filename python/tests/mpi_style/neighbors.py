"""Neighbourhood collectives on Cartesian grids: a periodic ring and an open 2-D grid, Neighbor_alltoall and
Neighbor_allgather of buffers and neighbor_alltoall and neighbor_allgather of objects (called through the class, as
MPI.Topocomm.neighbor_alltoall(cart, ...)); every result checked against what MPI defines."""
import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()

# A periodic ring: neighbour 0 is the left one (the source of a shift by 1), neighbour 1 the right one.
ring = comm.Create_cart([size], periods=[True])
left, right = ring.Shift(0, 1)
sent = np.array([[rank, 0], [rank, 1]], dtype=np.int64)  # block j goes to neighbour j
got = np.full((2, 2), -1, dtype=np.int64)
ring.Neighbor_alltoall(sent, got)
assert list(got[0]) == [left, 1] and list(got[1]) == [right, 0]  # block 0 from the left (its block 1), ...
both = np.full(4, -1.0)
ring.Neighbor_allgather(np.array([rank + 0.5, -rank]), both)
assert list(both) == [left + 0.5, -left, right + 0.5, -right]
objs = MPI.Topocomm.neighbor_alltoall(ring, [("to left", rank), ("to right", rank)])
assert objs == [("to right", left), ("to left", right)]
assert MPI.Topocomm.neighbor_allgather(ring, rank) == [left, right]

# An open grid: no neighbour past an edge (its block left as it was; None in the object forms).
dims = MPI.Compute_dims(size, 2)
grid = comm.Create_cart(dims, periods=[False, False])
nbrs = []
for d in range(2):
    nbrs += list(grid.Shift(d, 1))
got = np.full(4, -7, dtype=np.int64)
grid.Neighbor_allgather(np.array([rank], dtype=np.int64), got)
assert list(got) == [n if n != MPI.PROC_NULL else -7 for n in nbrs]
objs = grid.neighbor_allgather(rank)
assert objs == [n if n != MPI.PROC_NULL else None for n in nbrs]
comm.Barrier()
print(f"neighbors: rank {rank} ok", flush=True)
