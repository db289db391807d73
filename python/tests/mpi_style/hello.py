"""Every rank says who it is; rank 0 collects the greetings in rank order."""
import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()
name = MPI.Get_processor_name()

greeting = f"Hello, World! I am process {rank} of {size} on {name}."
print(greeting, flush=True)
everyone = comm.gather(greeting, root=0)
if rank == 0:
    assert everyone == [f"Hello, World! I am process {r} of {size} on {name}." for r in range(size)]
print(f"hello: rank {rank} ok")
