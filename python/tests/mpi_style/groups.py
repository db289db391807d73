"""Groups and node-local communicators: Get_group, Incl, Excl, Range_incl, Union, Intersection, Difference,
Translate_ranks and Compare, Comm.Create of a reordered group and of a part, Split_type(COMM_TYPE_SHARED) on one
machine, and Get_parent outside a spawn; every result checked against what MPI defines."""
import numpy as np

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()

# The world's group, reversed, and its odd ranks.
world = comm.Get_group()
assert world.Get_size() == size and world.Get_rank() == rank
rev = world.Incl(list(range(size - 1, -1, -1)))
assert rev.Get_rank() == size - 1 - rank
odd = world.Excl(list(range(0, size, 2)))
assert odd.Get_size() == size // 2
assert odd.Get_rank() == (rank // 2 if rank % 2 else MPI.UNDEFINED)
even = world.Range_incl([(0, size - 1, 2)])
assert even.Get_size() == (size + 1) // 2
both = MPI.Group.Union(even, odd)
assert MPI.Group.Compare(both, world) == (MPI.IDENT if size <= 2 else MPI.SIMILAR)
assert MPI.Group.Intersection(even, odd).Get_size() == 0
assert MPI.Group.Difference(world, odd).Get_size() == even.Get_size()
assert list(MPI.Group.Translate_ranks(rev, [0], world)) == [size - 1]
assert list(MPI.Group.Translate_ranks(odd, list(range(odd.Get_size())), even)) == [MPI.UNDEFINED] * odd.Get_size()

# Communicators of groups: every rank calls Create; non-members get COMM_NULL.
back = comm.Create(rev)
assert back.Get_rank() == size - 1 - rank
x = np.array([rank], dtype=np.int64)
order = np.zeros(size, dtype=np.int64)
back.Allgather(x, order)
assert list(order) == list(range(size - 1, -1, -1))
part = comm.Create(odd)
if rank % 2:
    assert part.Get_rank() == rank // 2 and part.allreduce(1) == size // 2
    part.Free()
else:
    assert part == MPI.COMM_NULL
back.Free()
for g in (world, rev, odd, even, both):
    g.Free()

# The ranks of this machine (all of them here), ranked by key; no parent: nothing was spawned.
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=-rank)
assert node.Get_size() == size and node.Get_rank() == size - 1 - rank
node.Free()
assert MPI.Comm.Get_parent() == MPI.COMM_NULL
comm.Barrier()
print(f"groups: rank {rank} ok", flush=True)
