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

from ._comm import (AVG, IN_PLACE, MAX, MIN, PROD, SUM, UNDEFINED, Comm, CommAbortedError,  # noqa: F401
                    CommError, CommMismatchError, CommTimeoutError, Op, Request, world)

__all__ = ["world", "Comm", "Request", "Op", "SUM", "PROD", "MIN", "MAX", "AVG", "IN_PLACE", "UNDEFINED",
           "CommError", "CommTimeoutError", "CommMismatchError", "CommAbortedError"]


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


# --- mpi4py's lower-case forms: any picklable Python object ----------------------------------------------------------
# Built on the buffer collectives above: each object is pickled to bytes, the sizes are exchanged first, then the
# bytes (padded to the largest) in one collective of the same kind, so the errors are the same (a rank that passes a
# different root raises CommMismatchError everywhere; TIERTRAIN_COMM_TIMEOUT bounds every wait). Reductions combine
# the objects in rank order with the op (SUM: +, PROD: *, MIN: min, MAX: max, or any function of two objects), so
# every rank gets the same result.

def _dumps(obj):
    import pickle

    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _loads(words, nbytes):
    """The object whose pickle is the first `nbytes` bytes of the int64 array `words`."""
    import pickle

    return pickle.loads(words.view("u1")[:nbytes].tobytes())


def _words(nbytes):
    """int64 words that hold `nbytes` bytes (the collectives move 4- and 8-byte elements)."""
    return (int(nbytes) + 7) // 8


def _padded(pieces, width):
    """The byte strings `pieces`, each in `width` int64 words, one after the other (a new, writable array)."""
    import numpy as np

    out = np.zeros(width * len(pieces), dtype=np.int64)
    raw = out.view("u1")
    for i, p in enumerate(pieces):
        raw[i * width * 8:i * width * 8 + len(p)] = np.frombuffer(p, dtype=np.uint8)
    return out


def _object_op(op):
    import operator

    if callable(op) and not isinstance(op, Op):
        return op
    table = {SUM: operator.add, PROD: operator.mul, MIN: min, MAX: max}
    if op not in table:
        raise ValueError(f"object reductions take SUM, PROD, MIN, MAX or a function of two objects, not {op!r}")
    return table[op]


def _every_size(self, n):
    import numpy as np

    sizes = np.empty(self.size, dtype=np.int64)
    self.Allgather(np.array([n], dtype=np.int64), sizes)
    return sizes


def _bcast(self, obj, root=0):
    """obj from `root` on every rank (a copy, unpickled, on the others)."""
    import numpy as np

    n = np.zeros(1, dtype=np.int64)
    data = b""
    if self.rank == root:
        data = _dumps(obj)
        n[0] = len(data)
    self.Bcast(n, root=root)
    buf = _padded([data], _words(n[0]))
    self.Bcast(buf, root=root)
    return obj if self.rank == root else _loads(buf, n[0])


def _allgather(self, obj):
    """Every rank's object, in rank order, on every rank."""
    import numpy as np

    data = _dumps(obj)
    sizes = _every_size(self, len(data))
    width = _words(sizes.max())
    recv = np.empty(width * self.size, dtype=np.int64)
    self.Allgather(_padded([data], width), recv)
    return [_loads(recv[i * width:(i + 1) * width], sizes[i]) for i in range(self.size)]


def _gather(self, obj, root=0):
    """Every rank's object, in rank order, on `root` (None on the others)."""
    import numpy as np

    data = _dumps(obj)
    sizes = _every_size(self, len(data))
    width = _words(sizes.max())
    recv = np.empty(width * self.size, dtype=np.int64) if self.rank == root else None
    self.Gather(_padded([data], width), recv, root=root)
    if self.rank != root:
        return None
    return [_loads(recv[i * width:(i + 1) * width], sizes[i]) for i in range(self.size)]


def _scatter(self, objs, root=0):
    """Item r of `root`'s sequence of size() objects on rank r."""
    import numpy as np

    sizes = np.zeros(self.size, dtype=np.int64)
    pieces = None
    if self.rank == root:
        items = list(objs)
        if len(items) != self.size:
            raise ValueError(f"scatter: the root gives {len(items)} objects for {self.size} ranks")
        pieces = [_dumps(x) for x in items]
        sizes[:] = [len(p) for p in pieces]
    self.Bcast(sizes, root=root)
    width = _words(sizes.max())
    send = _padded(pieces, width) if self.rank == root else None
    recv = np.empty(width, dtype=np.int64)
    self.Scatter(send, recv, root=root)
    return _loads(recv, sizes[self.rank])


def _alltoall(self, objs):
    """Item j of each rank's sequence of size() objects goes to rank j; returns what each rank sent here, in rank
    order."""
    import numpy as np

    items = list(objs)
    if len(items) != self.size:
        raise ValueError(f"alltoall: {len(items)} objects for {self.size} ranks")
    pieces = [_dumps(x) for x in items]
    sizes = np.empty(self.size * self.size, dtype=np.int64)  # row i: rank i's sizes to every rank
    self.Allgather(np.array([len(p) for p in pieces], dtype=np.int64), sizes)
    sizes = sizes.reshape(self.size, self.size)
    width = _words(sizes.max())
    recv = np.empty(width * self.size, dtype=np.int64)
    self.Alltoall(_padded(pieces, width), recv)
    return [_loads(recv[i * width:(i + 1) * width], sizes[i, self.rank]) for i in range(self.size)]


def _allreduce(self, obj, op=SUM):
    """The objects of every rank combined with `op` in rank order, on every rank."""
    import functools

    fn = _object_op(op)
    return functools.reduce(fn, _allgather(self, obj))


def _reduce(self, obj, op=SUM, root=0):
    """The objects of every rank combined with `op` in rank order, on `root` (None on the others)."""
    import functools

    fn = _object_op(op)
    objs = _gather(self, obj, root=root)
    return None if objs is None else functools.reduce(fn, objs)


def _barrier(self):
    """Barrier(), under mpi4py's lower-case name."""
    self.Barrier()


Comm.bcast = _bcast
Comm.allgather = _allgather
Comm.gather = _gather
Comm.scatter = _scatter
Comm.alltoall = _alltoall
Comm.allreduce = _allreduce
Comm.reduce = _reduce
Comm.barrier = _barrier

_world = None


def __getattr__(name):
    """COMM_WORLD, as mpi4py names it: world() made on first use and kept."""
    global _world
    if name == "COMM_WORLD":
        if _world is None:
            _world = world()
        return _world
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__.append("COMM_WORLD")
