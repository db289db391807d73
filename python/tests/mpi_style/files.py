"""MPI-IO on one file: Write_at at each rank's offset, read back after Close by another rank; a view of doubles with
the individual pointer (Write_all, Seek, Read_all); Write_ordered in rank order; Get_size, Set_size; File.Delete;
every result checked against what MPI defines."""
import os
import tempfile

import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
path = comm.bcast(os.path.join(tempfile.mkdtemp(), "data.bin") if rank == 0 else None, root=0)
n = 5

# Each rank writes its block at its byte offset; after Close, each reads its right neighbour's.
f = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_WRONLY)
f.Write_at(rank * n * 8, np.arange(n, dtype=np.float64) + 10 * rank)
f.Close()
f = MPI.File.Open(comm, path, MPI.MODE_RDONLY)
assert f.Get_size() == size * n * 8
right = (rank + 1) % size
got = np.zeros(n)
f.Read_at_all(right * n * 8, got)
assert list(got) == list(np.arange(n) + 10 * right)
f.Close()

# A view of doubles after a header of 16 bytes: offsets and pointers count doubles.
f = MPI.File.Open(comm, path, MPI.MODE_RDWR)
f.Set_view(16, MPI.DOUBLE, MPI.DOUBLE)
f.Seek(rank * 2)
f.Write_all(np.full(2, rank + 0.25))
assert f.Get_position() == rank * 2 + 2
f.Sync()
comm.Barrier()
f.Sync()
mine = np.zeros(2)
f.Seek(((rank + 1) % size) * 2)
f.Read_all(mine)
assert list(mine) == [(rank + 1) % size + 0.25] * 2

# Every rank's record, in rank order, at the shared pointer: rank r writes r + 1 ints.
f.Set_view(0, MPI.INT, MPI.INT)
f.Write_ordered(np.full(rank + 1, rank, dtype=np.int32))
f.Sync()
comm.Barrier()
f.Sync()
want = np.concatenate([np.full(r + 1, r, dtype=np.int32) for r in range(size)])
back = np.zeros(want.size, dtype=np.int32)
f.Read_at(0, back)
assert list(back) == list(want)
comm.Barrier()  # (every rank's read done before the file is cut)
f.Set_size(8)
assert f.Get_size() == 8
f.Close()
comm.Barrier()
if rank == 0:
    MPI.File.Delete(path)
    os.rmdir(os.path.dirname(path))
comm.Barrier()
print(f"files: rank {rank} ok", flush=True)
