"""A master hands out tasks (Python objects) to the workers as they ask, from any source, and collects results with
isend/irecv; workers stop on a sentinel."""
import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
TASK, RESULT, STOP = 1, 2, 3

if rank == 0:
    tasks = [{"id": i, "numbers": list(range(i))} for i in range(25)]
    results = {}
    status = MPI.Status()
    active = size - 1
    while active > 0:
        msg = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
        worker = status.Get_source()
        if status.Get_tag() == RESULT:
            results[msg["id"]] = msg["sum"]
        if tasks:
            comm.send(tasks.pop(), dest=worker, tag=TASK)
        else:
            comm.send(None, dest=worker, tag=STOP)
            active -= 1
    assert results == {i: sum(range(i)) for i in range(25)} or size == 1, results
else:
    comm.send(None, dest=0, tag=0)  # ready
    status = MPI.Status()
    while True:
        task = comm.recv(source=0, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == STOP:
            break
        req = comm.isend({"id": task["id"], "sum": sum(task["numbers"])}, dest=0, tag=RESULT)
        req.wait()

# A ring of non-blocking buffer messages, waited for together (after a barrier: the master's receives above take any
# tag, and would take a ring message sent to it early).
import numpy as np  # noqa: E402

comm.Barrier()

out = np.full(1000, rank, dtype="i")
inc = np.empty(1000, dtype="i")
reqs = [comm.Irecv([inc, MPI.INT], source=(rank - 1) % size, tag=9),
        comm.Isend([out, MPI.INT], dest=(rank + 1) % size, tag=9)]
MPI.Request.Waitall(reqs)
assert (inc == (rank - 1) % size).all()
print(f"workers: rank {rank} ok")
