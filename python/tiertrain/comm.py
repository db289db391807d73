"""Collectives between the processes of a job, in mpi4py's style, on numpy arrays (or any buffer) and CPU DLPack
tensors, without copies:

    import numpy as np, tiertrain.comm as tc
    comm = tc.world()                      # started by `tiertrain launch -n N -- python3 script.py`
    x = np.ones(1024, np.float32)
    comm.Allreduce(tc.IN_PLACE, x, op=tc.SUM)
    comm.Bcast(x, root=0)
    y = comm.zeros(1 << 20)                # in the job's shared memory: the fastest buffers for collectives
    req = comm.Iallreduce(tc.IN_PLACE, y)  # started; compute meanwhile, leaving y alone
    req.Wait()                             # (also req.Test(), tc.Request.Waitall([...]))

Errors raise CommError subclasses: CommTimeoutError (a rank did not arrive within TIERTRAIN_COMM_TIMEOUT),
CommMismatchError (ranks called with different sizes, types or ops), CommAbortedError (a rank died or gave up).
"""

from ._comm import (AVG, IN_PLACE, MAX, MIN, PROD, SUM, Comm, CommAbortedError, CommError,  # noqa: F401
                    CommMismatchError, CommTimeoutError, Op, Request, world)

__all__ = ["world", "Comm", "Request", "Op", "SUM", "PROD", "MIN", "MAX", "AVG", "IN_PLACE", "CommError",
           "CommTimeoutError", "CommMismatchError", "CommAbortedError"]


def zeros(shape, dtype="float32"):
    """A new numpy array of zeros on transparent huge pages where the kernel gives them (2 MiB-aligned,
    madvise(MADV_HUGEPAGE), written at once so that its pages are there), like numpy.zeros otherwise.

    Give it as the root's receive buffer of a Gather, or send buffer of a Scatter: the ranks then copy their pieces
    straight into (out of) it from 32 KiB pieces up, where on 4 KiB pages that pays only from 256 KiB
    (TIERTRAIN_COMM_CMA_HUGE_BYTES, TIERTRAIN_COMM_CMA_BYTES). numpy puts arrays of 4 MiB and more on huge pages by
    itself; this is for smaller ones. Each array takes at least 2 MiB."""
    import mmap

    import numpy as np

    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    huge = 2 << 20
    # Room for a 2 MiB boundary, and whole huge pages after it.
    length = (nbytes + huge - 1) // huge * huge + huge
    m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(m, dtype=np.uint8)
    start = -raw.ctypes.data % huge
    whole = (length - start) // huge * huge  # the huge pages that fit after the boundary
    if hasattr(mmap, "MADV_HUGEPAGE") and whole > 0:
        try:
            m.madvise(mmap.MADV_HUGEPAGE, start, whole)
        except OSError:  # a hint: without it the array is still right, on 4 KiB pages
            pass
    a = raw[start:start + nbytes].view(dt).reshape(shape)
    a.fill(0)  # the pages now, while the advice holds (pages never written count as not huge)
    return a


__all__.append("zeros")


def _comm_zeros(self, shape, dtype="float32"):
    """A new numpy array of zeros in this communicator's shared memory (with the shm backend, its pool: the other
    ranks read and write it where it is, so that Allreduce, Bcast and Allgather on it copy nothing through the
    segments, and Gather and Scatter pieces go straight into and out of a root's). The best buffers for this communicator's collectives; the communicator lives as long as the array.
    Host communicators only."""
    import operator

    import numpy as np

    dt = np.dtype(dtype)
    try:
        shape = (operator.index(shape),)
    except TypeError:
        shape = tuple(operator.index(d) for d in shape)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(self._alloc(count * dt.itemsize), dtype=dt, count=count).reshape(shape)


Comm.zeros = _comm_zeros
