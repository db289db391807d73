"""One-sided windows: Put and Get between Fences, accumulates from every rank (Accumulate under a shared lock,
Fetch_and_op as a counter, Compare_and_swap as a lock word), Allocate and tomemory, Allocate_shared read through
Shared_query; every result checked against what MPI defines."""
import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
right, left = (rank + 1) % size, (rank - 1) % size

# A window over an array: each rank puts its rank into its right neighbour's slot `rank`, then gets the left one's.
mem = np.full(size, -1.0)
win = MPI.Win.Create(mem, disp_unit=mem.itemsize, comm=comm)
win.Fence()
win.Put(np.array([float(rank)]), right, target=rank)
win.Fence()
assert mem[left] == left and all(mem[i] == -1.0 for i in range(size) if i != left)
got = np.zeros(size)
win.Fence()
win.Get(got, left)
win.Fence()
assert got[(left - 1) % size] == (left - 1) % size
win.Free()

# Accumulates into rank 0 in passive-target epochs: a sum from every rank, a fetched counter, and a
# compare-and-swap on a word; rank 0 reads its own window under a lock of its own.
acc = np.zeros(4, dtype=np.int64)
win = MPI.Win.Create(acc, disp_unit=8, comm=comm)
comm.Barrier()
win.Lock(0, MPI.LOCK_SHARED)
win.Accumulate(np.arange(4, dtype=np.int64) + rank, 0, target=(0, 4, MPI.LONG), op=MPI.SUM)
win.Unlock(0)
comm.Barrier()
if rank == 0:
    win.Lock(0)
    assert list(acc) == [sum(i + r for r in range(size)) for i in range(4)]
    acc[:] = 0
    win.Unlock(0)
comm.Barrier()
before = np.zeros(1, dtype=np.int64)
win.Lock(0, MPI.LOCK_EXCLUSIVE)
win.Fetch_and_op(np.array([1], dtype=np.int64), before, 0, target_disp=1, op=MPI.SUM)
win.Unlock(0)
comm.Barrier()
seen = sorted(comm.allgather(int(before[0])))
assert seen == list(range(size))
old = np.zeros(1, dtype=np.int64)
win.Lock(0)
win.Compare_and_swap(np.array([rank + 100], dtype=np.int64), np.array([0], dtype=np.int64), old, 0, target_disp=2)
win.Unlock(0)
comm.Barrier()
winners = comm.allgather(int(old[0]) == 0)
assert sum(winners) == 1
if rank == 0:
    win.Lock(0)
    assert acc[1] == size and acc[2] == 100 + winners.index(True)
    win.Unlock(0)
win.Free()

# Memory the window allocates, and one shared by every rank of the machine.
win = MPI.Win.Allocate(8 * size, disp_unit=8, comm=comm)
mine = np.frombuffer(win.tomemory(), dtype=np.float64)
mine[:] = 0
win.Fence()
for r in range(size):
    win.Put(np.array([rank + 0.5]), r, target=rank)
win.Fence()
assert list(mine) == [r + 0.5 for r in range(size)]
win.Free()
win = MPI.Win.Allocate_shared(8 if rank == 0 else 0, disp_unit=8, comm=comm)
buf, unit = win.Shared_query(0)
shared = np.ndarray(buffer=buf, dtype=np.float64, shape=(1,))
assert unit == 8
win.Fence()
if rank == 0:
    shared[0] = 42.0
win.Fence()
assert shared[0] == 42.0
win.Fence()
win.Free()
comm.Barrier()
print(f"win: rank {rank} ok", flush=True)
