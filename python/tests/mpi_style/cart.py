"""A ring and a grid of ranks: Compute_dims and Create_cart, Get_coords, Shift (a periodic pass around the ring,
PROC_NULL at the grid's open edges), Sub (a row's ranks), the object layer's scan and exscan and issend, Alloc_mem,
COMM_SELF and the life-cycle queries; every result checked against what MPI defines."""
import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
assert MPI.Is_initialized() and not MPI.Is_finalized()

# A periodic ring: everyone passes its rank to the right.
ring = comm.Create_cart([size], periods=[True], reorder=False)
src, dst = ring.Shift(0, 1)
assert (src, dst) == ((rank - 1) % size, (rank + 1) % size)
got = ring.sendrecv(rank, dest=dst, source=src)
assert got == (rank - 1) % size

# A grid as balanced as MPI makes it, open at the edges.
dims = MPI.Compute_dims(size, 2)
assert dims[0] * dims[1] == size and dims[0] >= dims[1]
grid = comm.Create_cart(dims, periods=[False, False])
row, col = grid.Get_coords(grid.Get_rank())
assert grid.Get_cart_rank([row, col]) == rank
up, down = grid.Shift(0, 1)
assert up == (MPI.PROC_NULL if row == 0 else rank - dims[1])
assert down == (MPI.PROC_NULL if row == dims[0] - 1 else rank + dims[1])
line = grid.Sub([False, True])  # my row
assert line.Get_size() == dims[1] and line.Get_rank() == col
assert line.allreduce(rank) == sum(row * dims[1] + c for c in range(dims[1]))

# Prefix sums of objects, and a synchronous object send around the ring.
assert comm.scan(rank + 1) == (rank + 1) * (rank + 2) // 2
assert comm.exscan(rank + 1) == (None if rank == 0 else rank * (rank + 1) // 2)
req = comm.issend({"from": rank}, dest=(rank + 1) % size, tag=3)
assert comm.recv(source=(rank - 1) % size, tag=3) == {"from": (rank - 1) % size}
req.wait()

# Memory for messages, and a Split that leaves some ranks out.
mem = MPI.Alloc_mem(8 * 4)
buf = np.frombuffer(mem, dtype=np.float64)
buf[:] = rank
comm.Allreduce(MPI.IN_PLACE, [buf, MPI.DOUBLE], op=MPI.SUM)
assert buf[0] == size * (size - 1) // 2
MPI.Free_mem(mem)
odd = comm.Split(1 if rank % 2 else MPI.UNDEFINED, rank)
assert (odd == MPI.COMM_NULL) == (rank % 2 == 0)
# This process alone, and a grid made through the class.
me = MPI.COMM_SELF
assert me.Get_size() == 1 and me.Get_rank() == 0 and me.allreduce(rank) == rank
line2 = MPI.Intracomm.Create_cart(comm, [size])
assert line2.Get_coords(rank) == [rank]
assert isinstance(MPI.get_vendor()[0], str)
print(f"cart: rank {rank} ok")
