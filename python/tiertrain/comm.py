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

Point-to-point as mpi4py's: Send/Recv/Sendrecv/Isend/Irecv/Probe/Iprobe on buffers, and send/recv/isend/irecv/
sendrecv/probe/iprobe on any picklable object, with ANY_SOURCE, ANY_TAG and Status:

    if comm.rank == 0:
        comm.send({"step": 3}, dest=1, tag=7)
    elif comm.rank == 1:
        st = tc.Status()
        obj = comm.recv(source=tc.ANY_SOURCE, tag=7, status=st)   # st.Get_source() == 0

Errors raise CommError subclasses: CommTimeoutError (a rank did not arrive within TIERTRAIN_COMM_TIMEOUT),
CommMismatchError (ranks called with different sizes, types or ops; a receive buffer too short for its message),
CommAbortedError (a rank died or gave up).
"""

import time as _time

import numpy as _np

from ._comm import (ANY_SOURCE, ANY_TAG, AVG, BAND, BOR, BXOR, IN_PLACE, LAND, LOR, LXOR, MAX, MIN,  # noqa: F401
                    PROC_NULL, PROD, SUM, TAG_UB, UNDEFINED, Comm, CommAbortedError, CommError, CommMismatchError,
                    CommTimeoutError, Op, Request, _set_p2p_general, world)

__all__ = ["world", "Comm", "Request", "Status", "Op", "SUM", "PROD", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR",
           "LAND", "LOR", "LXOR", "IN_PLACE", "UNDEFINED",
           "ANY_SOURCE", "ANY_TAG", "TAG_UB", "CommError", "CommTimeoutError", "CommMismatchError",
           "CommAbortedError"]


SUCCESS = 0
# PROC_NULL (-2, from _comm): a peer that is no one: sends to it and receives from it are done at once, moving nothing.

# Note [datatypes]
# mpi4py's datatypes for buffer specs ([buf, MPI.DOUBLE], [buf, count, MPI.CHAR]), Status.Get_count and their own
# questions (DOUBLE.Get_size()). Each is a Datatype holding a numpy dtype, which numpy reads through its `dtype`
# attribute wherever a dtype is taken (numpy.dtype(MPI.DOUBLE) is float64); the buffer's own elements are what
# travels, the datatype and count of a spec pick how much of it. Create_contiguous(n) is n elements in a row (a numpy
# subarray type). Types with gaps (Create_vector, Create_hvector, Create_indexed, Create_hindexed,
# Create_indexed_block, Create_subarray, Create_resized, and Create_contiguous of those) keep MPI's type map as the
# offsets of their elements (`_map`, in elements of the base type, one instance of the type) with its lower bound and
# extent: element k of a spec's count starts k extents on, as in MPI. A send packs the elements the map names into a
# contiguous copy, which travels; a receive takes the message into a contiguous array and copies it to the map's
# places when it is done (Recv, Sendrecv, Irecv at its Wait or Test, Recv_init); a collective reads such a send
# buffer, but refuses it as a receive buffer, naming the alternative. The map may reach past the view's own end
# (MPI's address arithmetic: a column type over the row a[0, j:]) but never past the numpy array that owns the
# memory: checked, an error otherwise. Create_struct (mixed element types) is refused.
ORDER_C, ORDER_F = 0, 1


class Datatype:
    """An MPI datatype (mpi4py's MPI.Datatype basics) over a numpy dtype; with gaps, over a type map."""

    def __init__(self, dtype, name=None, _map=None, _lb=0, _extent=None):
        self.dtype = _np.dtype(dtype)  # with gaps: the base elements' dtype
        self._name = name or str(self.dtype)
        self._map = None if _map is None else _np.ascontiguousarray(_map, dtype=_np.int64)
        self._lb = int(_lb)
        self._extent = None if _extent is None else int(_extent)

    def _elements(self):
        """(base dtype, map, lower bound, extent) in base elements, for any type."""
        if self._map is not None:
            return self.dtype, self._map, self._lb, self._extent
        n = int(_np.prod(self.dtype.shape)) if self.dtype.shape else 1
        return self.dtype.base, _np.arange(n, dtype=_np.int64), 0, n

    @staticmethod
    def _made(base, m, lb, extent, name):
        """A type from a map; a plain run of elements from 0 is a contiguous (numpy) type."""
        m = _np.asarray(m, dtype=_np.int64).reshape(-1)
        if lb == 0 and extent == m.size and _np.array_equal(m, _np.arange(m.size)):
            return Datatype(base if m.size == 1 else _np.dtype((base, (int(m.size),))), name)
        return Datatype(base, name, m, lb, extent)

    def Get_size(self):
        """Bytes of data in one element of the type (its gaps not counted)."""
        if self._map is None:
            return self.dtype.itemsize
        return int(self._map.size) * self.dtype.itemsize

    def Get_extent(self):
        """(lower bound, extent) in bytes: how far the next element of a count starts."""
        if self._map is None:
            return 0, self.dtype.itemsize
        return self._lb * self.dtype.itemsize, self._extent * self.dtype.itemsize

    def Get_true_extent(self):
        """(lower bound, extent) in bytes of the data alone."""
        if self._map is None or self._map.size == 0:
            return self.Get_extent()
        lo, hi = int(self._map.min()), int(self._map.max())
        return lo * self.dtype.itemsize, (hi - lo + 1) * self.dtype.itemsize

    def Get_name(self):
        return self._name

    def _units(self, nbytes, call, what):
        isz = self._elements()[0].itemsize
        if int(nbytes) % isz:
            raise ValueError(f"Datatype.{call}: {what} {nbytes} bytes is not a whole number of {isz}-byte elements")
        return int(nbytes) // isz

    def _placed(self, starts, call, name):
        """The type of copies of this one, copy i at starts[i] base elements (MPI's bounds)."""
        base, m, lb, ext = self._elements()
        starts = _np.asarray(starts, dtype=_np.int64).reshape(-1)
        if starts.size == 0:
            return Datatype(base, name, _np.zeros(0, _np.int64), 0, 0)
        new = (starts[:, None] + m[None, :]).reshape(-1)
        low = int(starts.min()) + lb
        high = int(starts.max()) + lb + ext
        return Datatype._made(base, new, low, high - low, name)

    def Create_contiguous(self, count):
        """`count` elements of this type in a row, as one element of the new type."""
        if int(count) < 0:
            raise ValueError(f"Create_contiguous: count {count} is negative")
        if self._map is None:
            return Datatype(_np.dtype((self.dtype, (int(count),))), f"contiguous({count}, {self._name})")
        ext = self._elements()[3]
        return self._placed(_np.arange(int(count)) * ext, "Create_contiguous", f"contiguous({count}, {self._name})")

    def Create_vector(self, count, blocklength, stride):
        """`count` blocks of `blocklength` elements, block i starting i * `stride` elements on (a matrix column:
        DOUBLE.Create_vector(rows, 1, columns))."""
        if int(count) < 0 or int(blocklength) < 0:
            raise ValueError(f"Create_vector: count {count} and blocklength {blocklength} must be >= 0")
        ext = self._elements()[3]
        k = (_np.arange(int(count))[:, None] * int(stride) + _np.arange(int(blocklength))[None, :]).reshape(-1)
        return self._placed(k * ext, "Create_vector", f"vector({count}, {blocklength}, {stride}, {self._name})")

    def Create_hvector(self, count, blocklength, stride):
        """Create_vector with the stride in bytes."""
        if int(count) < 0 or int(blocklength) < 0:
            raise ValueError(f"Create_hvector: count {count} and blocklength {blocklength} must be >= 0")
        ext = self._elements()[3]
        step = self._units(stride, "Create_hvector", "stride")
        k = (_np.arange(int(count))[:, None] * step + _np.arange(int(blocklength))[None, :] * ext).reshape(-1)
        return self._placed(k, "Create_hvector", f"hvector({count}, {blocklength}, {stride}, {self._name})")

    def _indexed(self, blocklengths, displacements, scale, call):
        blocklengths, displacements = list(blocklengths), list(displacements)
        if len(blocklengths) != len(displacements):
            raise ValueError(f"{call}: {len(blocklengths)} blocklengths but {len(displacements)} displacements")
        ext = self._elements()[3]
        starts = []
        for b, d in zip(blocklengths, displacements):
            if int(b) < 0:
                raise ValueError(f"{call}: blocklength {b} is negative")
            starts.extend(scale(d) + j * ext for j in range(int(b)))
        return self._placed(starts, call, f"{call.lower()}({self._name})")

    def Create_indexed(self, blocklengths, displacements):
        """Blocks of blocklengths[i] elements at displacements[i] elements."""
        ext = self._elements()[3]
        return self._indexed(blocklengths, displacements, lambda d: int(d) * ext, "Create_indexed")

    def Create_hindexed(self, blocklengths, displacements):
        """Create_indexed with the displacements in bytes."""
        return self._indexed(blocklengths, displacements,
                             lambda d: self._units(d, "Create_hindexed", "displacement"), "Create_hindexed")

    def Create_indexed_block(self, blocklength, displacements):
        """Create_indexed with one blocklength."""
        return self.Create_indexed([blocklength] * len(list(displacements)), displacements)

    def Create_subarray(self, sizes, subsizes, starts, order=ORDER_C):
        """The block subsizes at starts of an array of shape sizes (C order, or ORDER_F)."""
        sizes, subsizes, starts = [int(x) for x in sizes], [int(x) for x in subsizes], [int(x) for x in starts]
        if not len(sizes) == len(subsizes) == len(starts) or any(
                s < 0 or st < 0 or st + s > n for n, s, st in zip(sizes, subsizes, starts)):
            raise ValueError(f"Create_subarray: subsizes {subsizes} at starts {starts} do not lie in sizes {sizes}")
        f = "F" if order == ORDER_F else "C"
        grids = _np.meshgrid(*[_np.arange(st, st + s) for s, st in zip(subsizes, starts)], indexing="ij")
        idx = _np.ravel_multi_index([g.reshape(-1, order=f) for g in grids], sizes, order=f) if grids else \
            _np.zeros(1, _np.int64)
        ext = self._elements()[3]
        t = self._placed(idx * ext, "Create_subarray", f"subarray({sizes}, {subsizes}, {starts}, {self._name})")
        base, m, _, _ = t._elements()
        return Datatype._made(base, m, 0, int(_np.prod(sizes)) * ext, t._name)

    def Create_resized(self, lb, extent):
        """The same data with lower bound `lb` and extent `extent` (bytes): where the next element of a count starts
        (a column type resized to one element scatters columns)."""
        base, m, _, _ = self._elements()
        return Datatype._made(base, m, self._units(lb, "Create_resized", "lb"),
                              self._units(extent, "Create_resized", "extent"), f"resized({self._name})")

    @staticmethod
    def Create_struct(*args, **kwargs):  # (mpi4py's is a class method: Datatype.Create_struct(blocklengths, ...))
        raise NotImplementedError(
            "Datatype.Create_struct: tiertrain.comm moves elements of one type (Note [datatypes]): send a numpy "
            "structured array as bytes (its .view(numpy.uint8)), or one message a field")

    def Commit(self):
        return self

    def Free(self):
        return None

    def Dup(self):
        return Datatype(self.dtype, self._name, self._map, self._lb, self._extent)

    def _key(self):
        return (self.dtype, None if self._map is None else self._map.tobytes(), self._lb, self._extent)

    def __eq__(self, other):
        return isinstance(other, Datatype) and other._key() == self._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"<tiertrain.comm.Datatype {self._name}>"


BYTE = Datatype("u1", "MPI_BYTE")
CHAR = Datatype("u1", "MPI_CHAR")
UNSIGNED_CHAR = Datatype("u1", "MPI_UNSIGNED_CHAR")
SIGNED_CHAR = Datatype("i1", "MPI_SIGNED_CHAR")
SHORT = Datatype("i2", "MPI_SHORT")
UNSIGNED_SHORT = Datatype("u2", "MPI_UNSIGNED_SHORT")
INT = Datatype("i4", "MPI_INT")
INT32_T = Datatype("i4", "MPI_INT32_T")
UNSIGNED = Datatype("u4", "MPI_UNSIGNED")
LONG = Datatype("i8", "MPI_LONG")
LONG_LONG = Datatype("i8", "MPI_LONG_LONG")
INT64_T = Datatype("i8", "MPI_INT64_T")
UNSIGNED_LONG = Datatype("u8", "MPI_UNSIGNED_LONG")
FLOAT = Datatype("f4", "MPI_FLOAT")
DOUBLE = Datatype("f8", "MPI_DOUBLE")
BOOL = C_BOOL = Datatype("?", "MPI_C_BOOL")
__all__ += ["ORDER_C", "ORDER_F"]
__all__ += ["Datatype", "UNSIGNED_CHAR", "UNSIGNED_SHORT", "UNSIGNED", "UNSIGNED_LONG", "BOOL", "C_BOOL"]
__all__ += ["SUCCESS", "PROC_NULL", "BYTE", "CHAR", "SIGNED_CHAR", "SHORT", "INT", "INT32_T", "LONG", "LONG_LONG",
            "INT64_T", "FLOAT", "DOUBLE", "Get_processor_name"]


def Get_processor_name():
    """This host's name (mpi4py's MPI.Get_processor_name)."""
    import socket

    return socket.gethostname()


def _spec_parts(buf):
    """(object, count or None, datatype or None) of a buffer or an mpi4py buffer spec."""
    if not isinstance(buf, (list, tuple)):
        return buf, None, None
    if len(buf) == 2:
        obj, second = buf
        count, datatype = (second, None) if isinstance(second, (int, _np.integer)) else (None, second)
    elif len(buf) == 3:
        obj, count, datatype = buf
    else:
        raise TypeError(f"a buffer spec is [buf, datatype], [buf, count] or [buf, count, datatype], not {buf!r}")
    return obj, count, datatype


def _gapped(datatype):
    return isinstance(datatype, Datatype) and datatype._map is not None


def _reach(obj, base):
    """The memory from obj's first byte to the end of the numpy array (or buffer) that owns it, as elements of
    `base`: how far MPI's address arithmetic may go from a view (Note [datatypes])."""
    if not isinstance(obj, _np.ndarray):
        a = _np.frombuffer(obj, dtype=_np.uint8)
        return a[: a.size // base.itemsize * base.itemsize].view(base)
    root = obj
    while isinstance(root.base, _np.ndarray):
        root = root.base
    if not (root.flags.c_contiguous or root.flags.f_contiguous):
        raise ValueError("a datatype with gaps over an array whose memory has gaps of its own (use "
                         "numpy.ascontiguousarray)")
    start = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    mem = root.ravel(order="K").view(_np.uint8)[start:]  # (memory order: C or Fortran, MPI addresses bytes)
    return mem[: mem.size // base.itemsize * base.itemsize].view(base)


def _gapped_index(obj, count, datatype, what):
    """(flat view of obj's reach, indices of the elements a spec with a gapped datatype names)."""
    base, m, lb, ext = datatype._elements()
    flat = _reach(obj, base)
    if count is None:  # [buf, datatype]: as many whole extents as the buffer holds
        own = obj.nbytes // base.itemsize if isinstance(obj, _np.ndarray) else flat.size
        count = max(0, (own - lb) // ext) if ext > 0 else 0
    idx = (_np.arange(int(count), dtype=_np.int64)[:, None] * ext + m[None, :]).reshape(-1)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= flat.size):
        raise ValueError(f"{what}: {count} x {datatype.Get_name()} reaches element {int(idx.max())} of a buffer of "
                         f"{flat.size} (Note [datatypes]: never past the array that owns the memory)")
    return flat, idx


def _spec(buf, writable=False, blocks=1):
    """The buffer of an mpi4py buffer spec: buf, [buf, datatype], [buf, count] or [buf, count, datatype]; with a
    count, the first `count` elements (of datatype, or of the buffer's own type), times `blocks` for a collective's
    buffer of one block a rank (mpi4py's count is a block's there). A datatype with gaps gives a packed copy of what
    it names (a send side: Note [datatypes]); as a receive buffer here it is refused."""
    if type(buf) is _np.ndarray:  # (the common case, first)
        return buf
    obj, count, datatype = _spec_parts(buf)
    if count is not None:
        count = int(count) * int(blocks)
    if _gapped(datatype):
        if writable:
            raise NotImplementedError(
                f"a datatype with gaps ({datatype.Get_name()}) as a collective's receive buffer: receive into a "
                f"contiguous array and copy it into place (view[...] = received); Recv, Irecv and Sendrecv take it "
                f"(Note [datatypes])")
        flat, idx = _gapped_index(obj, count, datatype, "send buffer")
        return flat[idx]
    if count is None:
        return obj
    dt = _np.dtype(datatype) if datatype is not None else _np.dtype(memoryview(obj).format)
    raw = _np.frombuffer(obj, dtype=_np.uint8)  # (the buffer's bytes need not be whole elements of dt beyond count)
    if int(count) * dt.itemsize > raw.size:
        raise ValueError(f"the buffer spec's count {count} is more than the buffer's {raw.size // dt.itemsize} "
                         f"elements")
    return raw[:int(count) * dt.itemsize].view(dt.base if dt.subdtype is not None else dt)


def _recv_spec(buf, what):
    """(what a receive writes into, and a function that puts it in place afterwards, or None): a datatype with gaps
    receives into a contiguous array, copied to the map's places when done (Note [datatypes])."""
    if type(buf) is _np.ndarray:  # (the common case, first)
        return buf, None
    obj, count, datatype = _spec_parts(buf)
    if not _gapped(datatype):
        return _spec(buf), None
    flat, idx = _gapped_index(obj, count, datatype, what)
    if not flat.flags.writeable:
        raise ValueError(f"{what}: the receive buffer is read-only")
    got = _np.empty(idx.size, flat.dtype)

    def finish():
        flat[idx] = got

    return got, finish


class Status:
    """What a receive or probe found (mpi4py's Status): pass one as `status=` to Recv, Sendrecv, Probe, Iprobe,
    Request.Wait or the lower-case recv; it gets the sender, the tag and the length."""

    def __init__(self):
        self.source = ANY_SOURCE
        self.tag = ANY_TAG
        self.count = 0  # bytes
        self.error = 0

    def Get_source(self):
        return self.source

    def Get_tag(self):
        return self.tag

    def Get_error(self):
        return self.error

    def Get_count(self, datatype=None):
        """The message's length in elements of `datatype` (a numpy dtype or anything numpy.dtype takes), or in
        bytes without one."""
        if datatype is None:
            return self.count
        import numpy as np

        size = datatype.Get_size() if isinstance(datatype, Datatype) else np.dtype(datatype).itemsize
        return self.count // size if size else 0

    Get_elements = Get_count

    def __repr__(self):
        return f"Status(source={self.source}, tag={self.tag}, count={self.count})"


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
    table = {SUM: operator.add, PROD: operator.mul, MIN: min, MAX: max,
             BAND: operator.and_, BOR: operator.or_, BXOR: operator.xor,  # (mpi4py's: Python's operators)
             LAND: lambda a, b: bool(a) and bool(b), LOR: lambda a, b: bool(a) or bool(b),
             LXOR: lambda a, b: bool(a) != bool(b)}
    if op not in table:
        raise ValueError(f"object reductions take SUM, PROD, MIN, MAX, the bitwise and logical ops or a function of "
                         f"two objects, not {op!r}")
    return table[op]


def MAXLOC(a, b):
    """mpi4py's MAXLOC for the object layer, on (value, index) pairs (comm.allreduce((x, comm.rank), op=MAXLOC)):
    the larger value, the lower index among equal values. (The buffer methods take no pair types.)"""
    return a if a[0] > b[0] or (a[0] == b[0] and a[1] <= b[1]) else b


def MINLOC(a, b):
    """mpi4py's MINLOC for the object layer: the smaller value, the lower index among equal values."""
    return a if a[0] < b[0] or (a[0] == b[0] and a[1] <= b[1]) else b


__all__ += ["MAXLOC", "MINLOC"]


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


# Point-to-point on buffers (Note [python point-to-point] in _comm.cc): mpi4py's buffer specs and PROC_NULL here, the
# rest in C++.

def _status_null(status):
    if status is not None:
        status.source, status.tag, status.count = PROC_NULL, ANY_TAG, 0


def _Send(self, buf, dest, tag=0):
    """Sends `buf` (or an mpi4py buffer spec) to rank `dest` (MPI's standard send: returns once `buf` may be reused;
    messages under 32 KiB are buffered at once)."""
    if dest != PROC_NULL:
        self._p2p_send(buf if type(buf) is _np.ndarray else _spec(buf), dest, tag)  # (an array: no call to look)


def _Recv(self, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    """Receives a message from `source` (or ANY_SOURCE) with `tag` (or ANY_TAG) into `buf`: at most its length (a
    longer message raises CommMismatchError and is dropped). `status` gets the source, tag and length."""
    if type(buf) is _np.ndarray and source != PROC_NULL:  # (the common case: no call to look at the spec)
        return self._p2p_recv(buf, source, tag, status)
    if source == PROC_NULL:
        return _status_null(status)
    into, finish = _recv_spec(buf, "Recv")
    self._p2p_recv(into, source, tag, status)
    if finish is not None:
        finish()


def _Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
    """Send and Recv at once (neither waits for the other)."""
    if recvbuf is None:
        raise TypeError("Sendrecv needs a recvbuf")
    if dest == PROC_NULL and source == PROC_NULL:
        return _status_null(status)
    if dest == PROC_NULL:
        return _Recv(self, recvbuf, source, recvtag, status)
    if source == PROC_NULL:
        _Send(self, sendbuf, dest, sendtag)
        return _status_null(status)
    into, finish = _recv_spec(recvbuf, "Sendrecv")
    self._p2p_sendrecv(sendbuf if type(sendbuf) is _np.ndarray else _spec(sendbuf), dest, sendtag, into, source,
                       recvtag, status)
    if finish is not None:
        finish()


def _Isend(self, buf, dest, tag=0):
    """Send, started: a Request (Wait, Test). `buf` must not change until it is done."""
    if dest == PROC_NULL:
        return Comm._null_request(PROC_NULL)
    return self._p2p_isend(buf if type(buf) is _np.ndarray else _spec(buf), dest, tag)


def _Irecv(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
    """Recv, started: a Request; Wait(status) fills `status`. Leave `buf` alone until it is done."""
    if type(buf) is _np.ndarray and source != PROC_NULL:  # (the common case)
        return self._p2p_irecv(buf, source, tag)
    if source == PROC_NULL:
        return Comm._null_request(PROC_NULL)
    into, finish = _recv_spec(buf, "Irecv")
    request = self._p2p_irecv(into, source, tag)
    return request if finish is None else ObjRequest(request, finish)


def _Probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    """Waits until a message that Recv(source, tag) would take has arrived, without taking it."""
    if source == PROC_NULL:
        return _status_null(status)
    self._Probe(source, tag, status)


def _Iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    """Whether a message that Recv(source, tag) would take has arrived (not taken)."""
    if source == PROC_NULL:
        _status_null(status)
        return True
    return self._Iprobe(source, tag, status)


# Comm.Send, Recv, Isend, Irecv and Sendrecv are _comm's fast calls, which take exact numpy arrays to and from peers
# that are someone themselves and hand every other case to these (Note [point-to-point fast calls] in _comm.cc).
_set_p2p_general(_Send, _Recv, _Isend, _Irecv, _Sendrecv)
Comm.Probe = _Probe
Comm.Iprobe = _Iprobe


# Point-to-point objects (Note [python point-to-point] in _comm.cc): pickles sent as bytes, received whatever their
# length.

class ObjRequest:
    """The Request of the lower-case isend and irecv (mpi4py's): wait() returns the object received (None for a
    send); test() returns (done, object)."""

    def __init__(self, request, finish=None):
        self._request = request
        self._done = False
        self._obj = None
        self._finish = finish  # Note [datatypes]: an Irecv's copy into place, instead of an object

    def wait(self, status=None):
        if not self._done:
            self._request.Wait(status)
            if self._finish is not None:
                self._finish()
            else:
                data = self._request._result()
                self._obj = None if data is None else __import__("pickle").loads(data)
            self._done = True
        return self._obj

    def test(self, status=None):
        if self._done or self._request.Test(status):
            return True, self.wait()
        return False, None

    # The upper-case names too, so that Request.Waitall-style code takes either.
    def Wait(self, status=None):
        self.wait(status)

    def Test(self, status=None):
        return self.test(status)[0]

    # (waitall, waitany, testall and the upper-case list operations: Note [request sets], below.)


# Note [request sets]: mpi4py's operations on lists of requests (Request.Waitall, Waitany, Waitsome, Testall,
# Testany, Testsome, and the lower-case waitall, waitany, testall of the object layer), over Request.Wait and Test.
# A request waited for is "null" (it compares equal to REQUEST_NULL) and is skipped, as MPI skips null handles;
# Waitany and Waitsome poll the others, sleeping a little longer each round (at most 1 ms), until one is done. A list
# `statuses` gets one Status a request (appended where it is short); the first error is raised once the call is
# done with the rest.

def _checked(requests, call):
    """The list of requests, every item checked to be a Request before any is waited for."""
    requests = list(requests)
    for r in requests:
        if not isinstance(r, (Request, ObjRequest, Prequest)):
            raise TypeError(f"Request.{call}: every item must be a Request, got {type(r).__name__}")
    return requests


def _live(r):
    """Not yet waited for (a waited request is null: REQUEST_NULL's equal; an inactive persistent one is skipped)."""
    if isinstance(r, Prequest):
        return r._active is not None
    return not r._done if isinstance(r, ObjRequest) else not r._waited


def _statuses_for(statuses, n):
    if statuses is None:
        return None
    while len(statuses) < n:
        statuses.append(Status())
    return statuses


def _null_status(status):
    if status is not None:
        status.source, status.tag, status.count = ANY_SOURCE, ANY_TAG, 0


def _fill(statuses, found):
    """statuses (a list, or None) gets the Status of each (index, Status) of `found`, in order."""
    statuses = _statuses_for(statuses, len(found))
    if statuses is not None:
        for k, (_, st) in enumerate(found):
            statuses[k].source, statuses[k].tag, statuses[k].count = st.source, st.tag, st.count


def _ready(r):
    """Done, looked at without completing it (Testall completes none unless all are done)."""
    if isinstance(r, Prequest):
        return r._active is None or _ready(r._active)
    return (r._request if isinstance(r, ObjRequest) else r)._ready


def _Waitall(requests, statuses=None):
    """Waits for every request (mpi4py's Request.Waitall); `statuses`, a list, gets each one's Status."""
    if statuses is None and type(requests) is list and Request._wait_plain(requests):
        return  # (every item a plain Request: waited for in one call)
    requests = _checked(requests, "Waitall")
    statuses = _statuses_for(statuses, len(requests))
    first = None
    for i, r in enumerate(requests):
        st = None if statuses is None else statuses[i]
        try:
            # (A plain Request without a status is waited for at once: Wait returns at once when it was waited.)
            if (st is None and type(r) is Request) or _live(r):
                r.Wait(st)
            else:
                _null_status(st)
        except CommError as e:
            first = first or e
    if first is not None:
        raise first
    return True


def _poll(requests, first_only):
    """Tests the live requests in turn, round after round, until some are done: [(index, Status)] of the first one
    done (first_only) or of all those done in that round; None if none is live. (A request tested done is waited
    for: the ones after the first are not tested when only the first is wanted.)"""
    delay = 0.0
    while True:
        live = [i for i, r in enumerate(requests) if _live(r)]
        if not live:
            return None
        found = []
        for i in live:
            st = Status()
            if requests[i].Test(st):
                found.append((i, st))
                if first_only:
                    return found
        if found:
            return found
        _time.sleep(delay)
        delay = min(1e-3, delay * 2 + 1e-6)


def _Waitany(requests, status=None):
    """Waits until one request is done; its index (UNDEFINED if none is live, as MPI's)."""
    requests = _checked(requests, "Waitany")
    found = _poll(requests, True)
    if found is None:
        _null_status(status)
        return UNDEFINED
    i, st = found[0]
    if status is not None:
        status.source, status.tag, status.count = st.source, st.tag, st.count
    return i


def _Waitsome(requests, statuses=None):
    """Waits until at least one request is done; the indices of those done (None if none is live)."""
    requests = _checked(requests, "Waitsome")
    found = _poll(requests, False)
    if found is None:
        return None
    _fill(statuses, found)
    return [i for i, _ in found]


def _Testall(requests, statuses=None):
    """Whether every request is done (and if so, all are waited for, their statuses given)."""
    requests = _checked(requests, "Testall")
    if not all(_ready(r) for r in requests if _live(r)):
        return False
    return _Waitall(requests, statuses)


def _Testany(requests, status=None):
    """(index, flag): a request done now, if any (index UNDEFINED and flag True if none is live)."""
    requests = _checked(requests, "Testany")
    live = False
    for i, r in enumerate(requests):
        if not _live(r):
            continue
        live = True
        if r.Test(status):
            return i, True
    if not live:
        _null_status(status)
        return UNDEFINED, True
    return UNDEFINED, False


def _Testsome(requests, statuses=None):
    """The indices of the requests done now ([] if none, None if none is live)."""
    requests = _checked(requests, "Testsome")
    done, any_live = [], False
    for i, r in enumerate(requests):
        if not _live(r):
            continue
        any_live = True
        st = Status()
        if r.Test(st):
            done.append((i, st))
    if not any_live:
        return None
    _fill(statuses, done)
    return [i for i, _ in done]


def _waitall_objects(requests, statuses=None):
    """The object layer's: waits for every request; the objects received, in order (None for sends)."""
    requests = list(requests)
    _Waitall(requests, statuses)
    return [r.wait() if isinstance(r, ObjRequest) else None for r in requests]


def _waitany_objects(requests, status=None):
    """(index, object) of a request done."""
    requests = list(requests)
    i = _Waitany(requests, status)
    if i == UNDEFINED:
        return UNDEFINED, None
    r = requests[i]
    return i, r.wait() if isinstance(r, ObjRequest) else None


def _testall_objects(requests, statuses=None):
    """(flag, objects or None)."""
    requests = list(requests)
    if not _Testall(requests, statuses):
        return False, None
    return True, [r.wait() if isinstance(r, ObjRequest) else None for r in requests]


# Note [send modes and persistent requests]
# MPI's other send modes, with what a program can observe of them: Ssend and Rsend (and Issend, Irsend) send as Send
# does (a correct program with them is correct with Send, which may return sooner); Bsend (and Ibsend) completes at
# once, as MPI's does: it starts an Isend of a copy of the buffer, which the communicator keeps until it is done or
# Detach_buffer waits for it (Attach_buffer's buffer itself is not needed: the copies are the attached buffer).
# Persistent requests (Send_init, Recv_init, Bsend_init, Ssend_init; Prequest.Start, Startall) start the same
# Isend or Irecv of the buffer as it is at each Start; Wait and Test act on the one started; a persistent request
# waited for is inactive, not null, and starts again.
BSEND_OVERHEAD = 0
_bsends = {}  # id(comm) -> the Requests of its buffered sends not yet known done


def _Bsend(self, buf, dest, tag=0):
    """Buffered send: returns at once, the message on its way from a copy of `buf`."""
    if dest == PROC_NULL:
        return
    mine = _bsends.setdefault(id(self), [])
    mine[:] = [r for r in mine if not r.Test()]  # (the done ones let go)
    copy = _np.array(_flat(_spec(buf), None, "Bsend buf"), copy=True)
    mine.append(self._p2p_isend(copy, dest, tag))


def _Ibsend(self, buf, dest, tag=0):
    """Bsend, as a Request that is done at once."""
    _Bsend(self, buf, dest, tag)
    return Comm._null_request(PROC_NULL)


_attached = None


def Attach_buffer(buf):
    """MPI's buffer for Bsend: kept, not used (the buffered sends keep copies of their own; Note [send modes and
    persistent requests]); Detach_buffer gives it back."""
    global _attached
    _attached = buf


def Detach_buffer():
    """Waits for every buffered send to be done (as MPI's does before it returns the buffer), then gives back the
    buffer Attach_buffer took (None without one)."""
    global _attached
    for reqs in _bsends.values():
        Request.Waitall(reqs)
        reqs.clear()
    buf, _attached = _attached, None
    return buf


class Prequest:
    """A persistent request (mpi4py's Prequest): Start() begins the operation on the buffer as it is now; Wait and
    Test act on the one started; once waited for it is inactive and may Start again."""

    def __init__(self, start):
        self._start = start
        self._active = None

    def Start(self):
        if self._active is not None:
            raise RuntimeError("Prequest.Start: the request is active (Wait for it first)")
        self._active = self._start()

    @staticmethod
    def Startall(requests):
        for r in requests:
            r.Start()

    def Wait(self, status=None):
        if self._active is None:
            return _null_status(status)
        try:
            self._active.Wait(status)
        finally:
            self._active = None

    def Test(self, status=None):
        if self._active is None:
            _null_status(status)
            return True
        if self._active.Test(status):
            self._active = None
            return True
        return False

    def Free(self):
        if self._active is not None:
            self.Wait()


def _Send_init(self, buf, dest, tag=0):
    return Prequest(lambda: _Isend(self, buf, dest, tag))


def _Bsend_init(self, buf, dest, tag=0):
    return Prequest(lambda: _Ibsend(self, buf, dest, tag))


def _Recv_init(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
    return Prequest(lambda: _Irecv(self, buf, source, tag))


Comm.Ssend = Comm.Rsend = _Send
Comm.Issend = Comm.Irsend = _Isend
Comm.Bsend = _Bsend
Comm.Ibsend = _Ibsend
Comm.Send_init = Comm.Ssend_init = Comm.Rsend_init = _Send_init
Comm.Bsend_init = _Bsend_init
Comm.Recv_init = _Recv_init
__all__ += ["BSEND_OVERHEAD", "Attach_buffer", "Detach_buffer", "Prequest"]

REQUEST_NULL = Comm._null_request(ANY_SOURCE)
REQUEST_NULL.Wait()  # (a request waited for is null)
Request.Waitall = staticmethod(_Waitall)
Request.Waitany = staticmethod(_Waitany)
Request.Waitsome = staticmethod(_Waitsome)
Request.Testall = staticmethod(_Testall)
Request.Testany = staticmethod(_Testany)
Request.Testsome = staticmethod(_Testsome)
# (mpi4py's Prequest is a Request: its class has the set calls too, as MPI.Prequest.Waitall(reqs))
for _name in ("Waitall", "Waitany", "Waitsome", "Testall", "Testany", "Testsome"):
    setattr(Prequest, _name, getattr(Request, _name))
del _name
Request.waitall = ObjRequest.waitall = staticmethod(_waitall_objects)
Request.waitany = ObjRequest.waitany = staticmethod(_waitany_objects)
Request.testall = ObjRequest.testall = staticmethod(_testall_objects)
for _name in ("Waitall", "Waitany", "Waitsome", "Testall", "Testany", "Testsome"):
    setattr(ObjRequest, _name, getattr(Request, _name))
__all__ += ["REQUEST_NULL"]


def _send(self, obj, dest, tag=0):
    """obj (pickled) to rank `dest`."""
    if dest != PROC_NULL:
        self._send_obj(_dumps(obj), dest, tag)


def _recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    """The next object from `source` with `tag` (either may be ANY_*); `buf` is accepted for mpi4py's signature and
    not needed."""
    import pickle

    if source == PROC_NULL:
        return _status_null(status)
    return pickle.loads(self._recv_obj(source, tag, status))


def _isend(self, obj, dest, tag=0):
    """send, started: an ObjRequest (wait() returns None)."""
    if dest == PROC_NULL:
        return ObjRequest(Comm._null_request(PROC_NULL))
    return ObjRequest(self._isend_obj(_dumps(obj), dest, tag))


def _irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
    """recv, started: an ObjRequest whose wait() returns the object."""
    if source == PROC_NULL:
        return ObjRequest(Comm._null_request(PROC_NULL))
    return ObjRequest(self._irecv_obj(source, tag))


def _sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
    """send and recv at once (neither waits for the other); the object received."""
    r = _irecv(self, None, source, recvtag)
    _send(self, sendobj, dest, sendtag)
    return r.wait(status)


def _probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    """Waits for a message that recv(source, tag) would take (not taken); True, as mpi4py's."""
    self.Probe(source, tag, status)
    return True


def _iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
    """Whether a message that recv(source, tag) would take has arrived (not taken)."""
    return self.Iprobe(source, tag, status)


# Note [v-forms]: Gatherv, Scatterv, Allgatherv and Alltoallv with mpi4py's buffer specs ([buf, counts],
# [buf, (counts, displs)], [buf, counts, displs], each with an optional datatype last; counts and displacements in
# elements). They run over the fixed-size collectives: every block padded to the largest (which the ranks agree on
# first where only some know it), moved, then copied to its displacement. Right for any counts, at the cost of the
# largest block a rank; the communicators have no variable-size collective of their own yet. (Alltoallv of one
# block size back to back both ways is Alltoall itself.)

def _flat(obj, datatype, what):
    """A flat numpy view of a buffer (no copy), as `datatype` if given. A buffer without the buffer protocol (a DLPack
    tensor, a GPU tensor over nccl) is refused, naming the call and what to use instead."""
    if not isinstance(obj, _np.ndarray):
        try:
            memoryview(obj).release()
        except TypeError:
            raise TypeError(f"{what}: the v-forms and buffered sends take numpy arrays and host buffers, not "
                            f"{type(obj).__name__}; for tensors (GPU ones over nccl), pad each rank's block to the "
                            f"largest and call Gather, Scatter, Allgather or Alltoall, or Send and Recv") from None
    a = obj if isinstance(obj, _np.ndarray) else _np.frombuffer(obj, dtype=_np.uint8 if datatype is None else datatype)
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        raise ValueError(f"{what}: the buffer is not contiguous (use numpy.ascontiguousarray)")
    a = a.ravel(order="K")  # (a view: a Fortran-ordered array's elements in memory order, as MPI sees them)
    if datatype is not None and a.dtype != _np.dtype(datatype):
        a = a.view(_np.dtype(datatype))
    return a


def _vspec(spec, size, what):
    """(flat array, counts, displacements) of an mpi4py v-spec."""
    if not isinstance(spec, (list, tuple)) or not 2 <= len(spec) <= 4:
        raise TypeError(f"{what}: expected [buf, counts], [buf, (counts, displs)] or [buf, counts, displs], each "
                        f"with an optional datatype last, got {type(spec).__name__}")
    items = list(spec)
    datatype = None
    if len(items) >= 3 and not isinstance(items[-1], (list, tuple, _np.ndarray, int, _np.integer)) and \
            items[-1] is not None:
        datatype = items.pop()
    buf, counts, displs = items[0], items[1], items[2] if len(items) > 2 else None
    if isinstance(counts, tuple) and len(counts) == 2 and displs is None and \
            not isinstance(counts[0], (int, _np.integer)):
        counts, displs = counts
    counts = [int(c) for c in counts]
    if len(counts) != size:
        raise ValueError(f"{what}: {len(counts)} counts for {size} ranks")
    if displs is None:
        displs = [sum(counts[:r]) for r in range(size)]
    displs = [int(d) for d in displs]
    a = _flat(buf, datatype, what)
    for r in range(size):
        if counts[r] < 0 or displs[r] < 0 or displs[r] + counts[r] > a.size:
            raise ValueError(f"{what}: rank {r}'s block [{displs[r]}, {displs[r] + counts[r]}) is outside the "
                             f"buffer's {a.size} elements")
    return a, counts, displs


def _largest(comm, mine):
    """The largest of every rank's `mine` (a count)."""
    x = _np.array([mine], _np.int64)
    comm.Allreduce(IN_PLACE, x, op=MAX)
    return int(x[0])


def _Gatherv(self, sendbuf, recvbuf, root=0):
    """Gather with blocks of any size at any displacements of the root's recvbuf (Note [v-forms])."""
    n, me = self.size, self.rank
    if me == root:
        out, counts, displs = _vspec(recvbuf, n, "Gatherv recvbuf")
        mine = out[displs[me]:displs[me] + counts[me]] if sendbuf is IN_PLACE else \
            _flat(_spec(sendbuf), None, "Gatherv sendbuf")
        dtype = out.dtype
    else:
        mine = _flat(_spec(sendbuf), None, "Gatherv sendbuf")
        dtype = mine.dtype
    width = _largest(self, mine.size)
    block = _np.zeros(width, dtype)
    block[:mine.size] = mine
    everyone = _np.empty(width * n, dtype) if me == root else None
    self.Gather(block, everyone, root=root)
    if me == root:
        for r in range(n):
            out[displs[r]:displs[r] + counts[r]] = everyone[r * width:r * width + counts[r]]


def _Scatterv(self, sendbuf, recvbuf, root=0):
    """Scatter of blocks of any size at any displacements of the root's sendbuf (Note [v-forms])."""
    n, me = self.size, self.rank
    width = _np.zeros(1, _np.int64)
    if me == root:
        src, counts, displs = _vspec(sendbuf, n, "Scatterv sendbuf")
        width[0] = max(counts) if counts else 0
    self.Bcast(width, root=root)
    width = int(width[0])
    out = None if (me == root and recvbuf is IN_PLACE) else _flat(_spec(recvbuf), None, "Scatterv recvbuf")
    dtype = src.dtype if me == root else out.dtype
    packed = None
    if me == root:
        packed = _np.zeros(width * n, dtype)
        for r in range(n):
            packed[r * width:r * width + counts[r]] = src[displs[r]:displs[r] + counts[r]]
    block = _np.empty(width, dtype)
    self.Scatter(packed, block, root=root)
    if out is not None:
        if out.size > width:
            raise ValueError(f"Scatterv recvbuf: {out.size} elements, more than the largest block's {width}")
        out[:] = block[:out.size]


def _Allgatherv(self, sendbuf, recvbuf):
    """Allgather with blocks of any size at any displacements (Note [v-forms])."""
    n, me = self.size, self.rank
    out, counts, displs = _vspec(recvbuf, n, "Allgatherv recvbuf")
    mine = out[displs[me]:displs[me] + counts[me]].copy() if sendbuf is IN_PLACE else \
        _flat(_spec(sendbuf), None, "Allgatherv sendbuf")
    if mine.size != counts[me]:
        raise ValueError(f"Allgatherv sendbuf: {mine.size} elements, but counts[{me}] is {counts[me]}")
    width = max(counts) if counts else 0
    block = _np.zeros(width, out.dtype)
    block[:mine.size] = mine
    everyone = _np.empty(width * n, out.dtype)
    self.Allgather(block, everyone)
    for r in range(n):
        out[displs[r]:displs[r] + counts[r]] = everyone[r * width:r * width + counts[r]]


def _Alltoallv(self, sendbuf, recvbuf):
    """Alltoall with blocks of any size at any displacements, each way (Note [v-forms]). Where every rank's blocks
    are one size, back to back both ways (OSU's alltoallv), it is Alltoall on the buffers themselves."""
    n = self.size
    src, scounts, sdispls = _vspec(sendbuf, n, "Alltoallv sendbuf")
    out, rcounts, rdispls = _vspec(recvbuf, n, "Alltoallv recvbuf")
    c = scounts[0] if scounts else 0
    plain = all(x == c for x in scounts + rcounts) and sdispls == rdispls == [r * c for r in range(n)] and \
        src.dtype == out.dtype
    agreed = _np.array([max(scounts) if scounts else 0, -c, 0 if plain else 1], _np.int64)
    self.Allreduce(IN_PLACE, agreed, op=MAX)  # (every rank takes the same path)
    if agreed[2] == 0 and agreed[0] == -agreed[1]:
        self.Alltoall(src[:n * c], out[:n * c])
        return
    width = int(agreed[0])
    packed = _np.zeros(width * n, src.dtype)
    for r in range(n):
        packed[r * width:r * width + scounts[r]] = src[sdispls[r]:sdispls[r] + scounts[r]]
    got = _np.empty(width * n, src.dtype)
    self.Alltoall(packed, got)
    for r in range(n):
        out[rdispls[r]:rdispls[r] + rcounts[r]] = got[r * width:r * width + rcounts[r]]


Comm.Gatherv = _Gatherv
Comm.Scatterv = _Scatterv
Comm.Allgatherv = _Allgatherv
Comm.Alltoallv = _Alltoallv

Comm.send = _send
Comm.recv = _recv
Comm.isend = _isend
Comm.irecv = _irecv
Comm.sendrecv = _sendrecv
Comm.probe = _probe
Comm.iprobe = _iprobe
__all__.append("ObjRequest")

Comm.bcast = _bcast
Comm.allgather = _allgather
Comm.gather = _gather
Comm.scatter = _scatter
Comm.alltoall = _alltoall
Comm.allreduce = _allreduce
Comm.reduce = _reduce
Comm.barrier = _barrier

# Timing and threads as mpi4py names them (issue 48): timing loops call MPI.Wtime(), threaded programs ask the level.
THREAD_SINGLE, THREAD_FUNNELED, THREAD_SERIALIZED, THREAD_MULTIPLE = 0, 1, 2, 3


def Wtime():
    """Seconds from an arbitrary point of this process, as MPI_Wtime: a monotonic clock for timing (time.perf_counter)."""
    return _time.perf_counter()


def Wtick():
    """The resolution of Wtime in seconds, as MPI_Wtick."""
    return _time.get_clock_info("perf_counter").resolution


def Query_thread():
    """THREAD_MULTIPLE, as MPI_Query_thread reports it: any thread may call; each communicator runs one call at a time
    (a lock taken without the GIL), and, as in MPI, the order of the calls across ranks is the program's to keep."""
    return THREAD_MULTIPLE


__all__ += ["Wtime", "Wtick", "Query_thread", "THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED",
            "THREAD_MULTIPLE"]

# Note [mpi4py names]: names mpi4py programs use often (the counts: docs/GUIDE.md, the compatibility table) that
# cost little here: the null handles, the life-cycle queries, Alloc_mem, _typedict, the object layer's scan and
# exscan and synchronous sends, and Cartesian communicators (Create_cart over Dup, as MPI's with reorder false).
# What is not built (dynamic processes, MPI-IO, graph topologies, ...) is refused by name: Note [names not built];
# one-sided windows: Note [windows].
COMM_NULL = None  # what Split gives a rank of color UNDEFINED (and Create_cart a rank beyond its grid)
INFO_NULL = None  # the calls that take an Info here ignore it
_finalized = False


def Init():
    """Nothing to do: the module is ready on import (mpi4py initialises on import too)."""


def Init_thread(required=THREAD_MULTIPLE):
    """The thread level given: THREAD_MULTIPLE (Query_thread)."""
    return THREAD_MULTIPLE


def Is_initialized():
    return True


def Is_finalized():
    return _finalized


def Finalize():
    """Marks the module finalized (Is_finalized); the communicators stay until the process ends."""
    global _finalized
    _finalized = True


def Alloc_mem(size, info=None):
    """`size` bytes for messages (mpi4py's Alloc_mem): a memoryview of bytes (on huge pages: tc.zeros), which takes
    bytes by slice (mem[:] = struct.pack(...)), tests false when empty and gives numpy.frombuffer its memory."""
    return memoryview(zeros(int(size), _np.uint8))


def Free_mem(mem):
    """Nothing to do: the memory goes with its last reference."""


_typedict = {_np.dtype(t).char: d for t, d in [
    ("b", SIGNED_CHAR), ("B", UNSIGNED_CHAR), ("h", SHORT), ("H", UNSIGNED_SHORT), ("i", INT), ("I", UNSIGNED),
    ("l", LONG), ("L", UNSIGNED_LONG), ("q", LONG_LONG), ("Q", UNSIGNED_LONG), ("f", FLOAT), ("d", DOUBLE),
    ("?", BOOL)]}


def _scan(self, obj, op=SUM):
    """The objects of ranks 0..this one combined with `op` in rank order (mpi4py's scan)."""
    import functools

    return functools.reduce(_object_op(op), _allgather(self, obj)[:self.rank + 1])


def _exscan(self, obj, op=SUM):
    """The objects of the ranks before this one combined with `op` in rank order; None on rank 0 (mpi4py's exscan)."""
    import functools

    before = _allgather(self, obj)[:self.rank]
    return functools.reduce(_object_op(op), before) if before else None


def Compute_dims(nnodes, dims):
    """A balanced grid of `nnodes` ranks (MPI_Dims_create): `dims` an int (that many dimensions) or a list whose
    zeros are filled, largest first."""
    dims = [0] * int(dims) if isinstance(dims, (int, _np.integer)) else [int(d) for d in dims]
    fixed = 1
    for d in dims:
        if d < 0:
            raise ValueError(f"Compute_dims: dimension {d} is negative")
        fixed *= d if d else 1
    free = [i for i, d in enumerate(dims) if d == 0]
    if nnodes % fixed:
        raise ValueError(f"Compute_dims: {nnodes} ranks do not divide over the given dimensions {dims}")
    left = nnodes // fixed
    if not free:
        if left != 1:
            raise ValueError(f"Compute_dims: the dimensions {dims} hold {fixed} ranks, not {nnodes}")
        return dims
    factors, n, f = [], left, 2
    while f * f <= n:
        while n % f == 0:
            factors.append(f)
            n //= f
        f += 1
    if n > 1:
        factors.append(n)
    sizes = [1] * len(free)
    for f in sorted(factors, reverse=True):  # each prime factor to the smallest dimension so far
        sizes[sizes.index(min(sizes))] *= f
    for i, v in zip(free, sorted(sizes, reverse=True)):
        dims[i] = v
    return dims


# Note [neighbourhood collectives]
# A Cartesian grid's neighbours are, dimension by dimension, the source and then the destination of a shift by 1
# (MPI's order; PROC_NULL past a non-periodic edge). Neighbor_alltoall sends block 2d to dimension d's source and
# block 2d + 1 to its destination, and receives block 2d from the source and 2d + 1 from the destination;
# Neighbor_allgather sends its one block to both. Each dimension is two Sendrecvs with tags of their own (a grid of 1
# or 2 along a periodic dimension has one rank as source and destination); a PROC_NULL neighbour's block is left as it
# was (the object forms: None). The v- and w-forms are refused by name: Sendrecv with each Shift does them.
_NEIGHBOR_TAG = TAG_UB - 64


class Topocomm:
    """What a communicator with a topology adds (mpi4py's Topocomm): the neighbourhood collectives of its grid."""

    def _neighbours(self):
        out = []
        for d in range(len(self.dims)):
            out += list(self.Shift(d, 1))
        return out

    def _pairs(self):
        """(to, from, block sent, block received, tag) of each Sendrecv: a dimension's two directions."""
        nb = self._neighbours()
        for d in range(len(nb) // 2):
            src, dst = nb[2 * d], nb[2 * d + 1]
            yield src, dst, 2 * d, 2 * d + 1, _NEIGHBOR_TAG + 2 * d
            yield dst, src, 2 * d + 1, 2 * d, _NEIGHBOR_TAG + 2 * d + 1

    def _exchange(self, send_block, recv_block):
        """For each neighbour j: send_block(j) to it and recv_block(j) from it, by Sendrecv pairs."""
        for to, frm, out_j, in_j, tag in self._pairs():
            self._comm.Sendrecv(send_block(out_j), dest=to, sendtag=tag, recvbuf=recv_block(in_j), source=frm,
                                recvtag=tag)

    def _blocks(self, buf, count, what, writable):
        a = _flat(_spec(buf, writable=writable), None, what)
        if a.size % count:
            raise ValueError(f"{what}: {a.size} elements are not {count} equal blocks (one a neighbour)")
        return a.reshape(count, -1)

    def Neighbor_alltoall(self, sendbuf, recvbuf):
        """Block j of sendbuf to neighbour j, block j of recvbuf from it (Note [neighbourhood collectives])."""
        k = 2 * len(self.dims)
        out = self._blocks(sendbuf, k, "Neighbor_alltoall sendbuf", False)
        got = self._blocks(recvbuf, k, "Neighbor_alltoall recvbuf", True)
        self._exchange(lambda j: _np.ascontiguousarray(out[j]), lambda j: got[j])

    def Neighbor_allgather(self, sendbuf, recvbuf):
        """sendbuf to every neighbour; block j of recvbuf from neighbour j."""
        mine = _np.ascontiguousarray(_flat(_spec(sendbuf), None, "Neighbor_allgather sendbuf"))
        got = self._blocks(recvbuf, 2 * len(self.dims), "Neighbor_allgather recvbuf", True)
        self._exchange(lambda j: mine, lambda j: got[j])

    def neighbor_alltoall(self, sendobj):
        """The object form: sendobj[j] to neighbour j; a list of what each neighbour sent (None from PROC_NULL)."""
        k = 2 * len(self.dims)
        if len(sendobj) != k:
            raise ValueError(f"neighbor_alltoall: {len(sendobj)} objects for {k} neighbours")
        return self._objects(lambda j: sendobj[j])

    def neighbor_allgather(self, sendobj):
        return self._objects(lambda j: sendobj)

    def _objects(self, send_obj):
        """The object forms: sendrecv gives None from PROC_NULL, as MPI leaves that block."""
        got = [None] * (2 * len(self.dims))
        for to, frm, out_j, in_j, tag in self._pairs():
            got[in_j] = self._comm.sendrecv(send_obj(out_j), dest=to, sendtag=tag, source=frm, recvtag=tag)
        return got

    @property
    def degrees(self):
        return 2 * len(self.dims), 2 * len(self.dims)

    @property
    def indegree(self):
        return 2 * len(self.dims)

    outdegree = indegree

    @property
    def inoutedges(self):
        nb = self._neighbours()
        return nb, nb


class Cartcomm(Topocomm):
    """A communicator with ranks on a Cartesian grid (mpi4py's Cartcomm, from Comm.Create_cart): row-major ranks,
    Get_coords, Get_cart_rank, Shift (PROC_NULL past a non-periodic edge), Sub, the neighbourhood collectives (Note
    [neighbourhood collectives]); every Comm call goes to the communicator beneath."""

    def __init__(self, comm, dims, periods):
        self._comm, self.dims, self.periods = comm, list(dims), list(periods)

    def __getattr__(self, name):
        return getattr(self._comm, name)

    @property
    def ndim(self):
        return len(self.dims)

    @property
    def coords(self):
        return self.Get_coords(self._comm.rank)

    @property
    def topo(self):
        return self.Get_topo()

    def Get_dim(self):
        return len(self.dims)

    def Get_topo(self):
        return self.dims, self.periods, self.coords

    def Get_coords(self, rank):
        if not 0 <= rank < self._comm.size:
            raise ValueError(f"Get_coords: rank {rank} is not in this grid of {self._comm.size}")
        return [int(c) for c in _np.unravel_index(rank, self.dims)]

    def Get_cart_rank(self, coords):
        c = []
        for x, n, p in zip(coords, self.dims, self.periods):
            if not 0 <= x < n:
                if not p:
                    raise ValueError(f"Get_cart_rank: coordinates {list(coords)} are off the grid {self.dims}")
                x %= n
            c.append(x)
        return int(_np.ravel_multi_index(c, self.dims))

    def Shift(self, direction, disp):
        """(source, dest): the ranks `disp` steps back and forward along `direction`, PROC_NULL off the edge."""
        me = self.coords

        def at(step):
            c = list(me)
            c[direction] += step
            if not 0 <= c[direction] < self.dims[direction] and not self.periods[direction]:
                return PROC_NULL
            return self.Get_cart_rank(c)

        return at(-disp), at(disp)

    def Sub(self, remain_dims):
        """The grid's slices that keep the dimensions remain_dims marks (a collective Split)."""
        me = self.coords
        color = int(_np.ravel_multi_index([c for c, k in zip(me, remain_dims) if not k] or [0],
                                          [n for n, k in zip(self.dims, remain_dims) if not k] or [1]))
        sub = self._comm.Split(color, self._comm.rank)
        return Cartcomm(sub, [n for n, k in zip(self.dims, remain_dims) if k],
                        [p for p, k in zip(self.periods, remain_dims) if k])

    def Free(self):
        return None


def _Create_cart(self, dims, periods=None, reorder=False):
    """A Cartcomm over the first prod(dims) ranks, in rank order (reorder is taken as false); the ranks beyond the
    grid get COMM_NULL. Collective."""
    dims = [int(d) for d in dims]
    n = int(_np.prod(dims)) if dims else 1
    if n > self.size:
        raise ValueError(f"Create_cart: a grid of {dims} needs {n} ranks, this communicator has {self.size}")
    periods = [bool(p) for p in (periods if periods is not None else [False] * len(dims))]
    if len(periods) != len(dims):
        raise ValueError(f"Create_cart: {len(periods)} periods for {len(dims)} dimensions")
    sub = self.Split(0 if self.rank < n else UNDEFINED, self.rank)
    return COMM_NULL if sub is None else Cartcomm(sub, dims, periods)


def _Abort(self, errorcode=1):
    """Ends this process at once with exit code `errorcode` (mpi4py's Abort; 1 for 0: an abort is never a success),
    and `tiertrain launch` then stops the other ranks."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(errorcode) if int(errorcode) != 0 else 1)


def get_vendor():
    """("tiertrain", its version as a tuple), as mpi4py's MPI.get_vendor names the MPI library."""
    from . import __version__

    return "tiertrain", tuple(int(x) for x in __version__.split(".")[:3] if x.isdigit())


Comm.Abort = _Abort
Comm.scan = _scan
Comm.exscan = _exscan
Comm.ssend = _send
Comm.issend = _isend
Comm.Create_cart = _Create_cart
__all__ += ["get_vendor", "COMM_NULL", "INFO_NULL", "Init", "Init_thread", "Is_initialized", "Is_finalized", "Finalize", "Alloc_mem",
            "Free_mem", "Compute_dims", "Cartcomm", "Topocomm"]


# Note [names not built]
# The mpi4py families tiertrain.comm does not build (docs/GUIDE.md, the compatibility table) are refused where a
# program reaches them, with the call's name and what to use instead, never a bare AttributeError (issue 48): a module
# name (MPI.ROOT, MPI.Topocomm, MPI.Info) through the module's __getattr__, a communicator's method
# (comm.Spawn, comm.Neighbor_alltoall) through Comm's. NotBuiltError is an AttributeError, so hasattr() still says the
# name is absent (a program's feature test, bench/comm/mpi4py_names/here.py's count), and a NotImplementedError.
# Built instead, as cheap and true here: Comm.Get_parent() is COMM_NULL (no rank was spawned: `tiertrain launch`
# started them all), Is_inter() false, and Split_type(COMM_TYPE_SHARED) the ranks of one machine.
class NotBuiltError(AttributeError, NotImplementedError):
    """An mpi4py name of a family tiertrain.comm does not build; the message says what to use instead."""


_DATAREP = ("data representations of one's own are not built in tiertrain.comm's files (Note [files]): they write "
           "'native' bytes")
_DYNAMIC = ("dynamic processes are not built in tiertrain.comm: `tiertrain launch -n N -- python3 program.py` starts "
            "every rank (run the workers' part in the same program, chosen by rank)")
_INTER = ("intercommunicators are not built in tiertrain.comm; Split COMM_WORLD into the groups and exchange "
          "between them with Send/Recv on COMM_WORLD")
_GRAPH = ("graph topologies, and neighbourhood collectives off a Cartesian grid, are not built in tiertrain.comm; "
          "use Create_cart (its Neighbor_alltoall and Neighbor_allgather), or Cartcomm.Shift and a Sendrecv with each "
          "neighbour")
_INFO = "Info objects are not built in tiertrain.comm; pass INFO_NULL (the calls that take an Info ignore it)"
_NOT_BUILT = {}
for _names, _why in (
        (("Register_datarep",), _DATAREP),
        (("Open_port", "Close_port", "Publish_name", "Unpublish_name", "Lookup_name", "ARGV_NULL", "ARGVS_NULL",
          "ERRCODES_IGNORE", "ROOT"), _DYNAMIC),
        (("Intercomm",), _INTER),
        (("Graphcomm", "Distgraphcomm", "GRAPH", "DIST_GRAPH", "UNWEIGHTED", "WEIGHTS_EMPTY"), _GRAPH),
        (("Info",), _INFO)):
    for _n in _names:
        _NOT_BUILT[_n] = _why
_COMM_NOT_BUILT = {}
for _names, _why in (
        (("Spawn", "Spawn_multiple", "Accept", "Connect", "Join", "Disconnect"), _DYNAMIC),
        (("Create_intercomm", "Get_remote_size", "Get_remote_group", "Merge", "remote_size", "remote_group"), _INTER),
        (("Create_graph", "Create_dist_graph", "Create_dist_graph_adjacent", "Get_topology", "Get_neighbors",
          "Get_neighbors_count", "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall",
          "Neighbor_alltoallv", "Neighbor_alltoallw", "Ineighbor_allgather", "Ineighbor_allgatherv",
          "Ineighbor_alltoall", "Ineighbor_alltoallv", "Ineighbor_alltoallw", "neighbor_allgather",
          "neighbor_alltoall"), _GRAPH)):  # (a Cartcomm has the first four neighbourhood forms of its own)
    for _n in _names:
        _COMM_NOT_BUILT[_n] = _why
del _names, _why, _n


# Every name of mpi4py's MPI module and of its Comm and Intracomm (its MPI.pyi, 2026-12-07): one missing here that
# no family above names is refused with the compatibility table as its alternative.
_MPI4PY_NAMES = frozenset((
    "AINT ANY_SOURCE ANY_TAG APPNUM Add_error_class Add_error_code Add_error_string Aint_add Aint_diff "
    "Alloc_mem Attach_buffer BAND BFLOAT16_T BOOL BOR BOTTOM BSEND_OVERHEAD BUFFER_AUTOMATIC BXOR BYTE "
    "BottomType BufferAutomaticType CART CHAR CHARACTER COMBINER_CONTIGUOUS COMBINER_DARRAY COMBINER_DUP "
    "COMBINER_F90_COMPLEX COMBINER_F90_INTEGER COMBINER_F90_REAL COMBINER_HINDEXED COMBINER_HINDEXED_BLOCK "
    "COMBINER_HVECTOR COMBINER_INDEXED COMBINER_INDEXED_BLOCK COMBINER_NAMED COMBINER_RESIZED COMBINER_STRUCT "
    "COMBINER_SUBARRAY COMBINER_VALUE_INDEX COMBINER_VECTOR COMM_NULL COMM_SELF COMM_TYPE_HW_GUIDED "
    "COMM_TYPE_HW_UNGUIDED COMM_TYPE_RESOURCE_GUIDED COMM_TYPE_SHARED COMM_WORLD COMPLEX COMPLEX16 COMPLEX32 "
    "COMPLEX4 COMPLEX8 CONGRUENT COUNT CXX_BOOL CXX_DOUBLE_COMPLEX CXX_FLOAT_COMPLEX CXX_LONG_DOUBLE_COMPLEX "
    "C_BOOL C_COMPLEX C_DOUBLE_COMPLEX C_FLOAT_COMPLEX C_LONG_DOUBLE_COMPLEX Cartcomm Close_port Comm "
    "Compute_dims DATATYPE_NULL DISPLACEMENT_CURRENT DISP_CUR DISTRIBUTE_BLOCK DISTRIBUTE_CYCLIC "
    "DISTRIBUTE_DFLT_DARG DISTRIBUTE_NONE DIST_GRAPH DOUBLE DOUBLE_COMPLEX DOUBLE_INT DOUBLE_PRECISION "
    "Datatype Detach_buffer Distgraphcomm ERRHANDLER_NULL ERRORS_ABORT ERRORS_ARE_FATAL ERRORS_RETURN ERR_ABI "
    "ERR_ACCESS ERR_AMODE ERR_ARG ERR_ASSERT ERR_BAD_FILE ERR_BASE ERR_BUFFER ERR_COMM ERR_CONVERSION "
    "ERR_COUNT ERR_DIMS ERR_DISP ERR_DUP_DATAREP ERR_ERRHANDLER ERR_FILE ERR_FILE_EXISTS ERR_FILE_IN_USE "
    "ERR_GROUP ERR_INFO ERR_INFO_KEY ERR_INFO_NOKEY ERR_INFO_VALUE ERR_INTERN ERR_IN_STATUS ERR_IO ERR_KEYVAL "
    "ERR_LASTCODE ERR_LOCKTYPE ERR_NAME ERR_NOT_SAME ERR_NO_MEM ERR_NO_SPACE ERR_NO_SUCH_FILE ERR_OP "
    "ERR_OTHER ERR_PENDING ERR_PORT ERR_PROC_ABORTED ERR_PROC_FAILED ERR_PROC_FAILED_PENDING ERR_QUOTA "
    "ERR_RANK ERR_READ_ONLY ERR_REQUEST ERR_REVOKED ERR_RMA_ATTACH ERR_RMA_CONFLICT ERR_RMA_FLAVOR "
    "ERR_RMA_RANGE ERR_RMA_SHARED ERR_RMA_SYNC ERR_ROOT ERR_SERVICE ERR_SESSION ERR_SIZE ERR_SPAWN ERR_TAG "
    "ERR_TOPOLOGY ERR_TRUNCATE ERR_TYPE ERR_UNKNOWN ERR_UNSUPPORTED_DATAREP ERR_UNSUPPORTED_OPERATION "
    "ERR_VALUE_TOO_LARGE ERR_WIN Errhandler Exception FILE_NULL FLOAT FLOAT16_T FLOAT32_T FLOAT64_T FLOAT_INT "
    "F_BOOL F_COMPLEX F_DOUBLE F_DOUBLE_COMPLEX F_ERROR F_FLOAT F_FLOAT_COMPLEX F_INT F_SOURCE F_STATUS_SIZE "
    "F_TAG File Finalize Flush_buffer Free_mem GRAPH GROUP_EMPTY GROUP_NULL Get_abi_fortran_info Get_abi_info "
    "Get_abi_version Get_address Get_error_class Get_error_string Get_hw_resource_info Get_library_version "
    "Get_processor_name Get_version Graphcomm Grequest Group IDENT INFO_ENV INFO_NULL INT INT16_T INT32_T "
    "INT64_T INT8_T INTEGER INTEGER1 INTEGER16 INTEGER2 INTEGER4 INTEGER8 INT_INT IN_PLACE IO Iflush_buffer "
    "InPlaceType Info Init Init_thread Intercomm Intracomm Is_finalized Is_initialized Is_thread_main "
    "KEYVAL_INVALID LAND LASTUSEDCODE LOCK_EXCLUSIVE LOCK_SHARED LOGICAL LOGICAL1 LOGICAL16 LOGICAL2 LOGICAL4 "
    "LOGICAL8 LONG LONG_DOUBLE LONG_DOUBLE_INT LONG_INT LONG_LONG LOR LXOR Lookup_name MAX MAXLOC "
    "MAX_DATAREP_STRING MAX_ERROR_STRING MAX_INFO_KEY MAX_INFO_VAL MAX_LIBRARY_VERSION_STRING MAX_OBJECT_NAME "
    "MAX_PORT_NAME MAX_PROCESSOR_NAME MAX_PSET_NAME_LEN MAX_STRINGTAG_LEN MESSAGE_NO_PROC MESSAGE_NULL MIN "
    "MINLOC MODE_APPEND MODE_CREATE MODE_DELETE_ON_CLOSE MODE_EXCL MODE_NOCHECK MODE_NOPRECEDE MODE_NOPUT "
    "MODE_NOSTORE MODE_NOSUCCEED MODE_RDONLY MODE_RDWR MODE_SEQUENTIAL MODE_UNIQUE_OPEN MODE_WRONLY Message "
    "NO_OP OFFSET OP_NULL ORDER_C ORDER_F ORDER_FORTRAN Op Open_port PACKED PROC_NULL PROD Pcontrol Pickle "
    "Prequest Publish_name Query_thread REAL REAL16 REAL2 REAL4 REAL8 REPLACE REQUEST_NULL ROOT "
    "Register_datarep Remove_error_class Remove_error_code Remove_error_string Request SEEK_CUR SEEK_END "
    "SEEK_SET SESSION_NULL SHORT SHORT_INT SIGNED_CHAR SIGNED_INT SIGNED_LONG SIGNED_LONG_LONG SIGNED_SHORT "
    "SIMILAR SINT16_T SINT32_T SINT64_T SINT8_T SUBVERSION SUCCESS SUM Session Status TAG_UB THREAD_FUNNELED "
    "THREAD_MULTIPLE THREAD_SERIALIZED THREAD_SINGLE TWOINT TYPECLASS_COMPLEX TYPECLASS_INTEGER "
    "TYPECLASS_LOGICAL TYPECLASS_REAL Topocomm UINT16_T UINT32_T UINT64_T UINT8_T UNDEFINED UNEQUAL "
    "UNIVERSE_SIZE UNSIGNED UNSIGNED_CHAR UNSIGNED_INT UNSIGNED_LONG UNSIGNED_LONG_LONG UNSIGNED_SHORT "
    "UNWEIGHTED Unpublish_name VERSION WCHAR WEIGHTS_EMPTY WIN_BASE WIN_CREATE_FLAVOR WIN_DISP_UNIT "
    "WIN_FLAVOR WIN_FLAVOR_ALLOCATE WIN_FLAVOR_CREATE WIN_FLAVOR_DYNAMIC WIN_FLAVOR_SHARED WIN_MODEL WIN_NULL "
    "WIN_SEPARATE WIN_SIZE WIN_UNIFIED WTIME_IS_GLOBAL Win Wtick Wtime buffer get_vendor pickle "
).split())
_MPI4PY_COMM_NAMES = frozenset((
    "Abort Accept Ack_failed Agree Allgather Allgather_init Allgatherv Allgatherv_init Allreduce "
    "Allreduce_init Alltoall Alltoall_init Alltoallv Alltoallv_init Alltoallw Alltoallw_init Attach_buffer "
    "Barrier Barrier_init Bcast Bcast_init Bsend Bsend_init Call_errhandler Cart_map Clone Compare Connect "
    "Create Create_cart Create_dist_graph Create_dist_graph_adjacent Create_errhandler Create_from_group "
    "Create_graph Create_group Create_intercomm Create_keyval Delete_attr Detach_buffer Disconnect Dup "
    "Dup_with_info Exscan Exscan_init Flush_buffer Free Free_keyval Gather Gather_init Gatherv Gatherv_init "
    "Get_attr Get_errhandler Get_failed Get_group Get_info Get_name Get_parent Get_rank Get_size Get_topology "
    "Graph_map Iagree Iallgather Iallgatherv Iallreduce Ialltoall Ialltoallv Ialltoallw Ibarrier Ibcast "
    "Ibsend Idup Idup_with_info Iexscan Iflush_buffer Igather Igatherv Improbe Iprobe Irecv Ireduce "
    "Ireduce_scatter Ireduce_scatter_block Irsend Is_inter Is_intra Is_revoked Iscan Iscatter Iscatterv Isend "
    "Isendrecv Isendrecv_replace Ishrink Issend Join Mprobe Precv_init Probe Psend_init Recv Recv_init Reduce "
    "Reduce_init Reduce_scatter Reduce_scatter_block Reduce_scatter_block_init Reduce_scatter_init Revoke "
    "Rsend Rsend_init Scan Scan_init Scatter Scatter_init Scatterv Scatterv_init Send Send_init Sendrecv "
    "Sendrecv_replace Set_attr Set_errhandler Set_info Set_name Shrink Spawn Spawn_multiple Split Split_type "
    "Ssend Ssend_init allgather allreduce alltoall barrier bcast bsend exscan f2py free fromhandle fromint "
    "gather group handle ibsend improbe info iprobe irecv is_inter is_intra is_topo isend issend mprobe name "
    "probe py2f rank recv reduce scan scatter send sendrecv size ssend tohandle toint topology "
).split())
_GENERIC = "not built in tiertrain.comm (docs/GUIDE.md, mpi4py compatibility: what is built, and what to use)"


def _refusing_getattr(prefix, names, families=None):
    """A class's __getattr__ (Note [names not built]): a name of a family not built refused with its alternative, any
    other of mpi4py's `names` with the compatibility table's, the rest a plain AttributeError."""
    def getattr_(self, name):
        why = (families or {}).get(name) or (_GENERIC if name in names else None)
        if why is not None:
            raise NotBuiltError(f"{prefix}.{name}: {why}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    return getattr_


Comm.__getattr__ = _refusing_getattr("Comm", _MPI4PY_COMM_NAMES, _COMM_NOT_BUILT)
Comm.Get_parent = staticmethod(lambda: COMM_NULL)  # no rank was spawned (Note [names not built])
# mpi4py's Comm.Free: nothing to do, as for Datatype and Group: a communicator's segments and peers go with its last
# reference (programs free the communicators Split, Dup, Create and Create_cart made).
Comm.Free = lambda self: None
Comm.Is_inter = lambda self: False
Comm.Is_intra = lambda self: True
# Split_type's kinds: the ranks of one machine, or (MPI 4's hardware-guided kinds) refused.
COMM_TYPE_SHARED, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED, COMM_TYPE_RESOURCE_GUIDED = 1, 2, 3, 4


def _Split_type(self, split_type, key=0, info=INFO_NULL):
    """mpi4py's Split_type: with COMM_TYPE_SHARED the ranks on this rank's machine (by host name), ranked by `key`
    and then by rank here; UNDEFINED gives this rank COMM_NULL. Collective: every rank of the communicator calls it."""
    import socket

    if split_type == UNDEFINED:
        host = None
    elif split_type == COMM_TYPE_SHARED:
        host = socket.gethostname()
    else:
        raise NotImplementedError(
            f"Comm.Split_type({split_type}): tiertrain.comm splits by COMM_TYPE_SHARED (the ranks of one machine) "
            "or UNDEFINED; for other groupings give Split a color of your own")
    hosts = _allgather(self, host)  # (every rank takes part, UNDEFINED ones too)
    color = UNDEFINED if host is None else sorted({h for h in hosts if h is not None}).index(host)
    return self.Split(color, key)


Comm.Split_type = _Split_type


# Note [mpi4py names], continued: calls of mpi4py's Comm that cost little here, exact. Scan and Exscan of buffers
# combine every rank's buffer (an Allgather) in rank order with the op's numpy function, as MPI defines them (Exscan
# leaves rank 0's recvbuf alone); Reduce_scatter_block is Reduce_scatter (equal blocks here); Sendrecv_replace sends
# a copy of the buffer it receives into; Clone is Dup; bsend and ibsend are the eager object sends; a communicator's
# name and error handler are kept beside it (errors raise CommError whatever the handler: an uncaught one ends its
# rank, and `tiertrain launch` stops the others, as ERRORS_ARE_FATAL would).
def _prefix_op(op, what):
    table = {SUM: _np.add, PROD: _np.multiply, MIN: _np.minimum, MAX: _np.maximum, BAND: _np.bitwise_and,
             BOR: _np.bitwise_or, BXOR: _np.bitwise_xor, LAND: _np.logical_and, LOR: _np.logical_or,
             LXOR: _np.logical_xor}
    if op not in table:
        raise NotImplementedError(f"{what}: buffers combine with SUM, PROD, MIN, MAX and the bitwise and logical "
                                  f"ops, not {op!r}; the object forms (scan, exscan) take any function")
    return table[op]


def _prefix(self, sendbuf, recvbuf, op, inclusive, what):
    f = _prefix_op(op, what)
    out = _flat(_spec(recvbuf, writable=True), None, f"{what} recvbuf")
    mine = out.copy() if sendbuf is IN_PLACE else _flat(_spec(sendbuf), None, f"{what} sendbuf")
    if mine.size != out.size or mine.dtype != out.dtype:
        raise ValueError(f"{what}: sendbuf holds {mine.size} {mine.dtype}, recvbuf {out.size} {out.dtype}")
    every = _np.empty(mine.nbytes * self.size, _np.uint8)
    self.Allgather(_np.ascontiguousarray(mine).view(_np.uint8), every)
    parts = every.view(mine.dtype).reshape(self.size, mine.size)[:self.rank + (1 if inclusive else 0)]
    if len(parts) == 0:
        return
    acc = parts[0].copy()
    for p in parts[1:]:
        acc = f(acc, p).astype(mine.dtype, copy=False)
    out[:] = acc


def _Scan(self, sendbuf, recvbuf, op=SUM):
    """mpi4py's Scan: recvbuf = sendbuf of ranks 0..this one combined in rank order (IN_PLACE: recvbuf's)."""
    _prefix(self, sendbuf, recvbuf, op, True, "Scan")


def _Exscan(self, sendbuf, recvbuf, op=SUM):
    """mpi4py's Exscan: recvbuf = sendbuf of the ranks before this one combined in rank order; rank 0's untouched."""
    _prefix(self, sendbuf, recvbuf, op, False, "Exscan")


def _Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM):
    """mpi4py's Reduce_scatter_block: Reduce_scatter, whose blocks are equal here."""
    return self.Reduce_scatter(sendbuf, recvbuf, op=op)


def _Sendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
    """mpi4py's Sendrecv_replace: buf is sent and the message received takes its place."""
    out = _np.array(_spec(buf), copy=True)
    self.Sendrecv(out, dest, sendtag=sendtag, recvbuf=buf, source=source, recvtag=recvtag, status=status)


class Errhandler:
    """What a communicator does on an error (mpi4py's Errhandler): every handler here lets the call raise."""

    def __init__(self, name):
        self._name = name

    def Free(self):
        return None

    def __repr__(self):
        return f"<tiertrain.comm.Errhandler {self._name}>"


ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT = (Errhandler(n) for n in ("ERRORS_RETURN", "ERRORS_ARE_FATAL",
                                                                         "ERRORS_ABORT"))
ERRHANDLER_NULL = None
_comm_names = __import__("weakref").WeakKeyDictionary()  # a communicator's name and handler, kept beside it
_comm_handlers = __import__("weakref").WeakKeyDictionary()


def _Get_name(self):
    return _comm_names.get(self, "MPI_COMM_WORLD" if self is _world else "")


def _Set_name(self, name):
    _comm_names[self] = str(name)


def _Set_errhandler(self, errhandler):
    if not isinstance(errhandler, Errhandler):
        raise TypeError(f"Set_errhandler takes ERRORS_RETURN, ERRORS_ARE_FATAL or ERRORS_ABORT, not {errhandler!r}")
    _comm_handlers[self] = errhandler


def _Get_errhandler(self):
    return _comm_handlers.get(self, ERRORS_RETURN)


# The other classes' mpi4py names (its Request, Prequest, Status, Datatype, Op and Group; MPI.pyi, 2026-12-07): one
# missing here is refused as not built, never a bare AttributeError (Note [names not built]).
_MPI4PY_MEMBER_NAMES = frozenset((
    "Cancel Commit Compare Create Create_contiguous Create_darray Create_f90_complex Create_f90_integer "
    "Create_f90_real Create_from_session_pset Create_hindexed Create_hindexed_block Create_hvector "
    "Create_indexed Create_indexed_block Create_keyval Create_resized Create_struct Create_subarray "
    "Create_vector Delete_attr Difference Dup Excl Free Free_keyval Get_attr Get_contents Get_count "
    "Get_elements Get_envelope Get_error Get_extent Get_name Get_rank Get_size Get_source Get_status "
    "Get_status_all Get_status_any Get_status_some Get_tag Get_true_extent Get_value_index Incl Intersect "
    "Intersection Is_cancelled Is_commutative Match_size Pack Pack_external Pack_external_size Pack_size "
    "Parrived Pready Pready_list Pready_range Range_excl Range_incl Reduce_local Set_attr Set_cancelled "
    "Set_elements Set_error Set_name Set_source Set_tag Start Startall Test Testall Testany Testsome "
    "Translate_ranks Union Unpack Unpack_external Wait Waitall Waitany Waitsome cancel cancelled combiner "
    "contents count decode envelope error extent f2py free fromcode fromhandle fromint get_status "
    "get_status_all get_status_any get_status_some handle is_commutative is_named is_predefined lb name py2f "
    "rank size source tag test testall testany testsome tocode tohandle toint tomemory true_extent true_lb "
    "true_ub typechar typestr ub wait waitall waitany waitsome "
).split())


# Cheap members of those classes, true here: a request or op needs no freeing (it goes with its last reference),
# nothing is ever cancelled, the predefined ops commute; a datatype's size, extent and name as properties.
Request.Free = lambda self: None
Prequest.Free = lambda self: None
Status.Is_cancelled = lambda self: False
Status.cancelled = property(lambda self: False)
Op.Is_commutative = lambda self: True
Op.is_commutative = property(lambda self: True)
Op.is_predefined = property(lambda self: True)
Datatype.size = property(lambda self: self.Get_size())
Datatype.extent = property(lambda self: self.Get_extent()[1])
Datatype.lb = property(lambda self: self.Get_extent()[0])
Datatype.ub = property(lambda self: self.Get_extent()[0] + self.Get_extent()[1])
Datatype.name = property(lambda self: self.Get_name())


def _Op_Create(function, commute=False):
    raise NotBuiltError("Op.Create: user-defined reductions of buffers are not built in tiertrain.comm; the object "
                        "forms (allreduce, reduce, scan, exscan) take any function of two objects")


Op.Create = staticmethod(_Op_Create)

Comm.Scan = _Scan
Comm.Exscan = _Exscan
Comm.Reduce_scatter_block = _Reduce_scatter_block
Comm.Sendrecv_replace = _Sendrecv_replace
Comm.Clone = lambda self: self.Dup()
Comm.bsend = _send
Comm.ibsend = _isend
Comm.is_inter = property(lambda self: False)
Comm.is_intra = property(lambda self: True)
Comm.Get_name = _Get_name
Comm.Set_name = _Set_name
Comm.name = property(_Get_name, _Set_name)
Comm.Set_errhandler = _Set_errhandler
Comm.Get_errhandler = _Get_errhandler
VERSION, SUBVERSION = 3, 1  # the MPI standard whose calls tiertrain.comm follows (a part of them: docs/GUIDE.md)


def Get_version():
    return VERSION, SUBVERSION


def Get_library_version():
    from . import __version__

    return f"tiertrain.comm {__version__} (shared memory, MPI or NCCL)"


INT8_T, INT16_T = Datatype("i1", "MPI_INT8_T"), Datatype("i2", "MPI_INT16_T")
UINT8_T, UINT16_T = Datatype("u1", "MPI_UINT8_T"), Datatype("u2", "MPI_UINT16_T")
UINT32_T, UINT64_T = Datatype("u4", "MPI_UINT32_T"), Datatype("u8", "MPI_UINT64_T")
SIGNED_SHORT, UNSIGNED_LONG_LONG = Datatype("i2", "MPI_SIGNED_SHORT"), Datatype("u8", "MPI_UNSIGNED_LONG_LONG")
FLOAT32_T, FLOAT64_T = Datatype("f4", "MPI_FLOAT32_T"), Datatype("f8", "MPI_FLOAT64_T")
C_FLOAT_COMPLEX = C_COMPLEX = Datatype("c8", "MPI_C_FLOAT_COMPLEX")
C_DOUBLE_COMPLEX = Datatype("c16", "MPI_C_DOUBLE_COMPLEX")
AINT, OFFSET, COUNT = Datatype("i8", "MPI_AINT"), Datatype("i8", "MPI_OFFSET"), Datatype("i8", "MPI_COUNT")
__all__ += ["Errhandler", "ERRORS_RETURN", "ERRORS_ARE_FATAL", "ERRORS_ABORT", "ERRHANDLER_NULL", "VERSION",
            "SUBVERSION", "Get_version", "Get_library_version", "INT8_T", "INT16_T", "UINT8_T", "UINT16_T",
            "UINT32_T", "UINT64_T", "SIGNED_SHORT", "UNSIGNED_LONG_LONG", "FLOAT32_T", "FLOAT64_T",
            "C_FLOAT_COMPLEX", "C_COMPLEX", "C_DOUBLE_COMPLEX", "AINT", "OFFSET", "COUNT"]

# Note [groups]
# mpi4py's process groups, each of the communicator it came from: an ordered list of that communicator's ranks
# (`_ranks`) and this process's rank there (`_me`). Comm.Get_group gives all of them in rank order; Incl, Excl,
# Range_incl, Range_excl, Union, Intersection, Difference make others, Get_size, Get_rank, Translate_ranks and Compare
# read them, all locally. Comm.Create(group), called by every rank of the communicator, gives the group's members a
# communicator ranked in the group's order (a Split: color 0 for members, key their place in the group) and the
# others COMM_NULL. Groups of two communicators do not combine (refused by name), nor does Create take another
# communicator's group; Create_group (called by the members alone) is refused: Create, on every rank, does it.
IDENT, CONGRUENT, SIMILAR, UNEQUAL = 0, 1, 2, 3


class Group:
    """An ordered set of a communicator's ranks (Note [groups]): Comm.Get_group(), then Incl, Excl, Union, ..."""

    def __init__(self, parent, ranks, me):
        self._parent, self._ranks, self._me = parent, [int(r) for r in ranks], me

    def Get_size(self):
        return len(self._ranks)

    def Get_rank(self):
        """This process's place in the group; UNDEFINED when it is not a member."""
        return self._ranks.index(self._me) if self._me in self._ranks else UNDEFINED

    size = property(Get_size)
    rank = property(Get_rank)

    def _places(self, ranks, call):
        out = [int(r) for r in ranks]
        for r in out:
            if not 0 <= r < len(self._ranks):
                raise ValueError(f"Group.{call}: rank {r} is not in this group of {len(self._ranks)}")
        if len(set(out)) != len(out):
            raise ValueError(f"Group.{call}: ranks {out} name one rank twice")
        return out

    def Incl(self, ranks):
        """The group of these ranks of this one, in the order given."""
        return Group(self._parent, [self._ranks[r] for r in self._places(ranks, "Incl")], self._me)

    def Excl(self, ranks):
        """This group without these ranks, the others in order."""
        drop = set(self._places(ranks, "Excl"))
        return Group(self._parent, [x for i, x in enumerate(self._ranks) if i not in drop], self._me)

    @staticmethod
    def _ranges(ranges, call):
        out = []
        for first, last, stride in ranges:
            if stride == 0:
                raise ValueError(f"Group.{call}: a stride of 0")
            out += list(range(int(first), int(last) + (1 if stride > 0 else -1), int(stride)))
        return out

    def Range_incl(self, ranks):
        """Incl of the (first, last, stride) triplets' ranks, last included."""
        return self.Incl(self._ranges(ranks, "Range_incl"))

    def Range_excl(self, ranks):
        return self.Excl(self._ranges(ranks, "Range_excl"))

    def _same(self, other, call):
        if self._parent is not None and other._parent is not None and self._parent is not other._parent:
            raise NotImplementedError(f"Group.{call}: the groups are of two communicators; tiertrain.comm combines "
                                      "groups of one (take both from the same Comm.Get_group())")
        return self._parent if self._parent is not None else other._parent

    @classmethod
    def Union(cls, group1, group2):
        """group1's ranks, then group2's that group1 lacks."""
        parent = group1._same(group2, "Union")
        return cls(parent, group1._ranks + [x for x in group2._ranks if x not in group1._ranks],
                   group1._me if group1._me is not None else group2._me)

    @classmethod
    def Intersection(cls, group1, group2):
        """group1's ranks that group2 has, in group1's order."""
        parent = group1._same(group2, "Intersection")
        return cls(parent, [x for x in group1._ranks if x in group2._ranks],
                   group1._me if group1._me is not None else group2._me)

    Intersect = Intersection  # (mpi4py's older name)

    @classmethod
    def Difference(cls, group1, group2):
        """group1's ranks that group2 lacks."""
        parent = group1._same(group2, "Difference")
        return cls(parent, [x for x in group1._ranks if x not in group2._ranks],
                   group1._me if group1._me is not None else group2._me)

    @classmethod
    def Translate_ranks(cls, group1, ranks1, group2=None):
        """The ranks in group2 (None: in the communicator the groups came from) of group1's ranks ranks1;
        UNDEFINED for one group2 lacks."""
        places = group1._places(ranks1, "Translate_ranks")
        if group2 is None:
            return [group1._ranks[r] for r in places]
        group1._same(group2, "Translate_ranks")
        return [group2._ranks.index(group1._ranks[r]) if group1._ranks[r] in group2._ranks else UNDEFINED
                for r in places]

    @classmethod
    def Compare(cls, group1, group2):
        """IDENT (the same ranks in the same order), SIMILAR (the same ranks) or UNEQUAL."""
        if group1._ranks == group2._ranks:
            return IDENT
        return SIMILAR if sorted(group1._ranks) == sorted(group2._ranks) else UNEQUAL

    def Dup(self):
        return Group(self._parent, self._ranks, self._me)

    def Free(self):
        return None

    def __repr__(self):
        return f"<tiertrain.comm.Group of {len(self._ranks)} ranks {self._ranks}>"


GROUP_NULL = None
GROUP_EMPTY = Group(None, [], None)


def _Get_group(self):
    """This communicator's ranks as a Group, in rank order (Note [groups])."""
    return Group(self, range(self.size), self.rank)


def _Create(self, group):
    """The group's members get a communicator ranked in the group's order, the others COMM_NULL. Collective: every
    rank of this communicator calls it with the same group."""
    if group._parent is not None and group._parent is not self:
        raise NotImplementedError("Comm.Create: the group is another communicator's; tiertrain.comm creates from a "
                                  "group of this one (its Get_group(), then Incl, Excl, ...)")
    mine = self.rank in group._ranks
    return self.Split(0 if mine else UNDEFINED, group._ranks.index(self.rank) if mine else 0)


def _Create_group(self, group, tag=0):
    raise NotImplementedError("Comm.Create_group: called by the group's members alone, which tiertrain.comm cannot "
                              "serve; call Comm.Create(group) on every rank of the communicator (non-members get "
                              "COMM_NULL)")


Comm.Get_group = _Get_group
Comm.group = property(_Get_group)
Comm.Create = _Create
Comm.Create_group = _Create_group
__all__ += ["Group", "GROUP_NULL", "GROUP_EMPTY", "IDENT", "CONGRUENT", "SIMILAR", "UNEQUAL"]
for _cls, _label in ((Request, "Request"), (Prequest, "Prequest"), (Status, "Status"), (Datatype, "Datatype"),
                     (Op, "Op"), (Group, "Group")):
    _cls.__getattr__ = _refusing_getattr(_label, _MPI4PY_MEMBER_NAMES)
del _cls, _label
__all__ += ["NotBuiltError", "COMM_TYPE_SHARED", "COMM_TYPE_HW_GUIDED", "COMM_TYPE_HW_UNGUIDED",
            "COMM_TYPE_RESOURCE_GUIDED"]

# Note [windows]
# mpi4py's one-sided windows, for ranks on one machine. Each rank's window is memory of its own process: the buffer
# given (Win.Create), one allocated (Win.Allocate), or its part of one file in /dev/shm that every rank maps
# (Win.Allocate_shared, whose parts Shared_query gives). At creation the ranks exchange where each window is (pid,
# address, size, disp_unit: an allgather) and check that they can reach each other's. Put, Get and the accumulates
# move the bytes at once, before they return: to or from a peer's window with process_vm_writev or process_vm_readv
# (the single copies of Note [single copy], which need the ranks on one machine and allowed to attach to each other:
# checked at creation, refused by name otherwise), to or from a mapped shared part with a plain copy. So the
# synchronizations only order the ranks: Fence is a Barrier; Flush, Flush_all, Flush_local, Flush_local_all and Sync
# have nothing to wait for; Lock and Unlock take a POSIX record lock on the target's byte of the window's lock file
# (exclusive or shared), which other origins' Locks wait for, and Lock_all a shared one on every byte. An accumulate
# (Accumulate, Get_accumulate, Fetch_and_op, Compare_and_swap) reads, combines and writes the target's elements
# holding another byte of the target's exclusively, so that accumulates to one place from several origins are atomic
# element by element, as MPI requires. Datatypes with gaps name the elements on either side (Note [datatypes]): the
# origin's are packed (or unpacked into place after a Get), the target's are copied run by run; the target's elements
# are of the origin's type. Not built (refused by name): dynamic windows, the post-start-complete-wait
# epochs (Fence or Lock order the same accesses here) and the request-based operations (Rput, Rget, ...).
LOCK_EXCLUSIVE, LOCK_SHARED = 1, 2
MODE_NOCHECK, MODE_NOSTORE, MODE_NOPUT, MODE_NOPRECEDE, MODE_NOSUCCEED = 1, 2, 4, 8, 16  # (hints: taken, not needed)
WIN_NULL = None
WIN_SEPARATE, WIN_UNIFIED = 1, 2
WIN_FLAVOR_CREATE, WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED = 1, 2, 3, 4


class _RmaOp:
    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"<tiertrain.comm.{self._name}>"


REPLACE, NO_OP = _RmaOp("REPLACE"), _RmaOp("NO_OP")
_win_count = 0
_cma_calls = None


def _cma():
    """process_vm_readv and process_vm_writev through ctypes (Linux), and their iovec."""
    global _cma_calls
    if _cma_calls is None:
        import ctypes

        class IoVec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

        libc = ctypes.CDLL(None, use_errno=True)
        calls = []
        for name in ("process_vm_readv", "process_vm_writev"):
            f = getattr(libc, name)
            f.restype = ctypes.c_ssize_t
            f.argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_ulong, ctypes.POINTER(IoVec), ctypes.c_ulong,
                          ctypes.c_ulong]
            calls.append(f)
        _cma_calls = (calls[0], calls[1], IoVec, ctypes)
    return _cma_calls


def _cma_copy(write, pid, local, remote, n):
    """n bytes between local (an address here) and remote (one in process pid), in one or more calls."""
    readv, writev, IoVec, ctypes = _cma()
    done = 0
    while done < n:
        lo, re_ = IoVec(local + done, n - done), IoVec(remote + done, n - done)
        got = (writev if write else readv)(pid, ctypes.byref(lo), 1, ctypes.byref(re_), 1, 0)
        if got <= 0:
            import os

            err = ctypes.get_errno()
            raise OSError(err, f"{'process_vm_writev' if write else 'process_vm_readv'} with rank pid {pid}: "
                               f"{os.strerror(err) if err else 'nothing copied'}")
        done += got


def _allow_peers():
    """Lets processes of this user read and write this one's memory where Yama's ptrace_scope 1 would allow only its
    parent (prctl PR_SET_PTRACER_ANY, as the shm backend does for its single copies: Note [single copy])."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(0x59616d61, ctypes.c_ulong(-1 & 0xFFFFFFFFFFFFFFFF), 0, 0, 0)
    except (AttributeError, OSError):
        pass


def _address(a):
    return a.__array_interface__["data"][0] if a.size else 0


class _Bottom:
    def __repr__(self):
        return "<tiertrain.comm.BOTTOM>"


BOTTOM = _Bottom()  # Win.Create's "no memory here" (absolute addresses in buffer specs are not taken)


class Win:
    """A one-sided window over ranks of one machine (mpi4py's Win; Note [windows]): Win.Create(memory, disp_unit,
    info, comm), Win.Allocate(size, ...), Win.Allocate_shared(size, ...); Put, Get, Accumulate, Get_accumulate,
    Fetch_and_op, Compare_and_swap; Fence, Lock, Unlock, Lock_all, Unlock_all, Flush*; Shared_query; Free."""

    @classmethod
    def Create(cls, memory, disp_unit=1, info=INFO_NULL, comm=None):
        """A window over `memory` (a contiguous writable buffer, or None for no memory here). Collective."""
        mem = _np.zeros(0, _np.uint8) if memory is None or memory is BOTTOM else _flat(
            _spec(memory, writable=True), None, "Win.Create memory")
        if mem.size and not mem.flags.writeable:
            raise ValueError("Win.Create: the memory is read-only")
        return cls._made(cls._comm_of(comm), mem.view(_np.uint8), disp_unit, WIN_FLAVOR_CREATE)

    @classmethod
    def Allocate(cls, size, disp_unit=1, info=INFO_NULL, comm=None):
        """A window over `size` new bytes here (zeros; tomemory() gives them). Collective."""
        return cls._made(cls._comm_of(comm), _np.zeros(int(size), _np.uint8), disp_unit, WIN_FLAVOR_ALLOCATE)

    @classmethod
    def Allocate_shared(cls, size, disp_unit=1, info=INFO_NULL, comm=None):
        """A window over `size` bytes here, in one file that every rank maps: Shared_query(r) gives rank r's part
        to read and write directly. Collective."""
        import mmap
        import os

        comm = cls._comm_of(comm)
        sizes = comm.allgather((int(size), int(disp_unit)))
        offsets, total = [], 0
        for n, _ in sizes:
            offsets.append(total)
            total += (n + 63) // 64 * 64
        path = cls._shared_path(comm)
        if comm.rank == 0:
            with open(path, "wb") as f:
                f.truncate(max(total, 1))
        comm.Barrier()
        with open(path, "r+b") as f:
            mapped = mmap.mmap(f.fileno(), max(total, 1))
        comm.Barrier()
        if comm.rank == 0:
            os.unlink(path)  # (mapped everywhere: the file goes with the last mapping)
        parts = [_np.frombuffer(mapped, _np.uint8, count=n, offset=o) for (n, _), o in zip(sizes, offsets)]
        w = cls._made(comm, parts[comm.rank], disp_unit, WIN_FLAVOR_SHARED)
        w._mapped, w._parts = mapped, parts
        return w

    @classmethod
    def Create_dynamic(cls, info=INFO_NULL, comm=None):
        raise NotBuiltError("Win.Create_dynamic: dynamic windows are not built in tiertrain.comm; Win.Create over "
                            "a buffer of the largest size needed, or Win.Allocate")

    @staticmethod
    def _comm_of(comm):
        return comm if comm is not None else __getattr__("COMM_SELF")

    @staticmethod
    def _shared_path(comm):
        import os

        global _win_count
        _win_count += 1
        job = os.environ.get("TIERTRAIN_COMM_ID", "")
        return comm.bcast(f"/dev/shm/tiertrain-win-{job}-{os.getpid()}-{_win_count}" if comm.rank == 0 else None,
                          root=0)

    @classmethod
    def _made(cls, comm, mem, disp_unit, flavor):
        import os
        import socket

        w = cls.__new__(cls)
        w._comm, w._mem, w._unit, w._flavor = comm, mem, int(disp_unit), flavor
        w._mapped = w._parts = w._lockf = None
        w._held = set()
        w._threads = __import__("threading").Lock()
        probe = _np.array([comm.rank + 1], _np.int64)
        w._peers = comm.allgather((os.getpid(), _address(mem), mem.size, w._unit, socket.gethostname(),
                                   _address(probe)))
        if len({p[4] for p in w._peers}) > 1:
            raise NotImplementedError("Win: the ranks are on several machines; tiertrain.comm's windows reach ranks "
                                      "of one machine (use Send/Recv or a collective across machines)")
        ok = True
        if comm.size > 1 and flavor != WIN_FLAVOR_SHARED:  # can this rank read the next one's memory?
            _allow_peers()
            comm.Barrier()  # (every rank allows it before any tries)
            nxt = (comm.rank + 1) % comm.size
            got = _np.zeros(1, _np.int64)
            try:
                _cma_copy(False, w._peers[nxt][0], _address(got), w._peers[nxt][5], 8)
                ok = int(got[0]) == nxt + 1
            except OSError:
                ok = False
        if not all(comm.allgather(ok)):  # (every rank took part: the probes are done)
            raise NotImplementedError("Win: these ranks may not read and write each other's memory (ptrace "
                                      "restrictions: kernel.yama.ptrace_scope, or containers apart); use Send/Recv "
                                      "or a collective instead")
        path = cls._shared_path(comm)
        if comm.rank == 0:
            open(path, "wb").close()
        comm.Barrier()
        w._lockf = open(path, "r+b")
        comm.Barrier()
        if comm.rank == 0:
            os.unlink(path)  # (open everywhere; record locks need the open file, not its name)
        return w

    # --- the target's place ---
    def _where(self, target_rank, target, nbytes, itemsize, what):
        """The byte runs [(offset, bytes), ...] of target_rank's window an access of `nbytes` touches: target None (at
        0), a displacement, or (disp[, count[, datatype]]) with count of datatype (default: the origin's elements),
        a datatype with gaps naming its elements' places (Note [datatypes])."""
        if not 0 <= target_rank < self._comm.size:
            raise ValueError(f"{what}: target rank {target_rank} is not in this window's {self._comm.size} ranks")
        disp, count, datatype = 0, None, None
        if isinstance(target, (int, _np.integer)):
            disp = int(target)
        elif target is not None:
            t = list(target) + [None, None]
            disp, count, datatype = int(t[0]), t[1], t[2]
        size, unit = self._peers[target_rank][2], self._peers[target_rank][3]
        at = disp * unit
        if _gapped(datatype):
            base, m, _, ext = datatype._elements()
            k = 1 if count is None else int(count)
            idx = (_np.arange(k, dtype=_np.int64)[:, None] * ext + m[None, :]).reshape(-1)
            starts = at + idx * base.itemsize
            brk = _np.flatnonzero(_np.diff(starts) != base.itemsize) + 1
            runs = [(int(g[0]), int(g.size) * base.itemsize) for g in _np.split(starts, brk) if g.size]
        else:
            item = _np.dtype(datatype).itemsize if datatype is not None else itemsize
            n = nbytes if count is None else int(count) * item
            runs = [(at, n)]
        total = sum(n for _, n in runs)
        if total != nbytes:
            raise ValueError(f"{what}: the target's elements are {total} bytes, the origin's {nbytes}")
        for o, n in runs:
            if o < 0 or o + n > size:
                raise ValueError(f"{what}: bytes {o}..{o + n} of rank {target_rank}'s window of {size} bytes")
        return runs

    def _move(self, write, target_rank, runs, local):
        """local (contiguous bytes, packed) to or from the target window's byte runs, in order."""
        if local.size == 0:
            return
        if target_rank == self._comm.rank or self._parts is not None:
            part = self._mem if target_rank == self._comm.rank else self._parts[target_rank]
            done = 0
            for o, n in runs:
                if write:
                    part[o:o + n] = local[done:done + n]
                else:
                    local[done:done + n] = part[o:o + n]
                done += n
            return
        pid, base = self._peers[target_rank][0], self._peers[target_rank][1]
        done = 0
        for o, n in runs:  # (one call a run: the runs of a datatype with gaps are few in the programs seen)
            _cma_copy(write, pid, _address(local) + done, base + o, n)
            done += n

    def _origin(self, buf, what):
        """An origin's elements, packed (a datatype with gaps: a copy of what it names)."""
        return _np.ascontiguousarray(_flat(_spec(buf), None, what))

    def _result(self, buf, what):
        """(contiguous array a result is received into, and what puts it in place afterwards or None)."""
        got, finish = _recv_spec(buf, what)
        got = _flat(got, None, what)
        if not got.flags.writeable:
            raise ValueError(f"{what}: the buffer is read-only")
        return got, finish

    class _Atomic:
        def __init__(self, win, rank):
            self.win, self.rank = win, rank

        def __enter__(self):
            import fcntl

            self.win._threads.acquire()  # (record locks are a process's: its threads take turns here first)
            fcntl.lockf(self.win._lockf, fcntl.LOCK_EX, 1, self.win._comm.size + self.rank)

        def __exit__(self, *exc):
            import fcntl

            fcntl.lockf(self.win._lockf, fcntl.LOCK_UN, 1, self.win._comm.size + self.rank)
            self.win._threads.release()

    @staticmethod
    def _combine(op, cur, new, what):
        if op is REPLACE:
            return new
        return _prefix_op(op, what)(cur, new).astype(cur.dtype, copy=False)

    # --- one-sided operations ---
    def Put(self, origin, target_rank, target=None):
        """origin's elements into target_rank's window (at once)."""
        src = self._origin(origin, "Win.Put")
        runs = self._where(target_rank, target, src.nbytes, src.itemsize, "Win.Put")
        self._move(True, target_rank, runs, src.view(_np.uint8))

    def Get(self, origin, target_rank, target=None):
        """target_rank's window's elements into origin (at once)."""
        dst, finish = self._result(origin, "Win.Get")
        runs = self._where(target_rank, target, dst.nbytes, dst.itemsize, "Win.Get")
        self._move(False, target_rank, runs, dst.view(_np.uint8))
        if finish is not None:
            finish()

    def Accumulate(self, origin, target_rank, target=None, op=SUM):
        """The target's elements combined with origin's by op (REPLACE: replaced), atomically element by element."""
        self.Get_accumulate(origin, None, target_rank, target, op, "Win.Accumulate")

    def Get_accumulate(self, origin, result, target_rank, target=None, op=SUM, what="Win.Get_accumulate"):
        """result = the target's elements before; the target's = them combined with origin's by op (NO_OP: kept)."""
        out, finish = self._result(result, what) if result is not None else (None, None)
        src = self._origin(origin, what) if op is not NO_OP else out
        runs = self._where(target_rank, target, src.nbytes, src.itemsize, what)
        cur = _np.empty(src.nbytes, _np.uint8)
        with Win._Atomic(self, target_rank):
            self._move(False, target_rank, runs, cur)
            if out is not None:
                if out.nbytes != cur.size:
                    raise ValueError(f"{what}: result holds {out.nbytes} bytes, the access {cur.size}")
                out.view(_np.uint8)[:] = cur
            if op is not NO_OP:
                new = _np.ascontiguousarray(self._combine(op, cur.view(src.dtype), src, what))
                self._move(True, target_rank, runs, new.view(_np.uint8))
        if finish is not None:
            finish()

    def Fetch_and_op(self, origin, result, target_rank, target_disp=0, op=SUM):
        """One element: result = the target's; the target's combined with origin's by op."""
        self.Get_accumulate(origin, result, target_rank, int(target_disp), op, "Win.Fetch_and_op")

    def Compare_and_swap(self, origin, compare, result, target_rank, target_disp=0):
        """One element: result = the target's; the target's = origin's where it equalled compare's."""
        what = "Win.Compare_and_swap"
        src, cmp_ = self._origin(origin, what), self._origin(compare, what)
        out, finish = self._result(result, what)
        runs = self._where(target_rank, int(target_disp), src.nbytes, src.itemsize, what)
        cur = _np.empty(src.nbytes, _np.uint8)
        with Win._Atomic(self, target_rank):
            self._move(False, target_rank, runs, cur)
            out.view(_np.uint8)[:] = cur
            if _np.array_equal(cur.view(src.dtype), cmp_):
                self._move(True, target_rank, runs, src.view(_np.uint8))
        if finish is not None:
            finish()

    # --- synchronization ---
    def Fence(self, assertion=0):
        """Every rank's accesses before it done before any after it (a Barrier: the accesses are done at once)."""
        self._comm.Barrier()

    def Lock(self, rank, lock_type=LOCK_EXCLUSIVE, assertion=0):
        """An access epoch to rank's window: exclusive, or shared with other shared ones."""
        import fcntl

        fcntl.lockf(self._lockf, fcntl.LOCK_EX if lock_type == LOCK_EXCLUSIVE else fcntl.LOCK_SH, 1, int(rank))
        self._held.add(int(rank))

    def Unlock(self, rank):
        import fcntl

        fcntl.lockf(self._lockf, fcntl.LOCK_UN, 1, int(rank))
        self._held.discard(int(rank))

    def Lock_all(self, assertion=0):
        import fcntl

        fcntl.lockf(self._lockf, fcntl.LOCK_SH, self._comm.size, 0)

    def Unlock_all(self):
        import fcntl

        fcntl.lockf(self._lockf, fcntl.LOCK_UN, self._comm.size, 0)

    def Flush(self, rank):
        """Nothing to wait for: every access is done when its call returns."""

    Flush_local = Flush

    def Flush_all(self):
        """Nothing to wait for."""

    Flush_local_all = Flush_all

    def Sync(self):
        """Nothing to wait for."""

    # --- the window itself ---
    def tomemory(self):
        """This rank's window memory."""
        return memoryview(self._mem)

    def __buffer__(self, flags):
        """The window's memory through the buffer protocol, as mpi4py's Win gives it (numpy.frombuffer(win)): from
        Python 3.12 (PEP 688); before it, numpy.frombuffer(win.tomemory())."""
        return memoryview(self._mem)

    memory = property(tomemory)

    def Shared_query(self, rank):
        """(rank's part of a window of Allocate_shared, to read and write directly, its disp_unit)."""
        if self._parts is None:
            raise ValueError("Win.Shared_query: the window was not made by Win.Allocate_shared")
        return memoryview(self._parts[rank]), self._peers[rank][3]

    def Get_group(self):
        return self._comm.Get_group()

    group = property(Get_group)
    model = WIN_UNIFIED
    flavor = property(lambda self: self._flavor)

    def Free(self):
        """Collective: every rank is done with every window before it goes."""
        self._comm.Barrier()
        if self._lockf is not None:
            self._lockf.close()
            self._lockf = None
        self._parts = None
        self._mem = _np.zeros(0, _np.uint8)

    __getattr__ = _refusing_getattr("Win", frozenset(), {
        **dict.fromkeys(("Post", "Start", "Complete", "Wait", "Test"),
                        "post-start-complete-wait epochs are not built in tiertrain.comm; Fence or Lock and Unlock "
                        "order the same accesses"),
        **dict.fromkeys(("Rput", "Rget", "Raccumulate", "Rget_accumulate", "Attach", "Detach"),
                        "not built in tiertrain.comm; Put, Get and Accumulate are done when they return (dynamic "
                        "windows: Win.Create over a buffer of the largest size needed)")})


__all__ += ["Win", "BOTTOM", "LOCK_EXCLUSIVE", "LOCK_SHARED", "MODE_NOCHECK", "MODE_NOSTORE", "MODE_NOPUT", "MODE_NOPRECEDE",
            "MODE_NOSUCCEED", "WIN_NULL", "WIN_SEPARATE", "WIN_UNIFIED", "WIN_FLAVOR_CREATE", "WIN_FLAVOR_ALLOCATE",
            "WIN_FLAVOR_DYNAMIC", "WIN_FLAVOR_SHARED", "REPLACE", "NO_OP"]


# Note [files]
# mpi4py's MPI-IO for files every rank can open by name (one machine, or a shared file system): each rank holds its
# own descriptor of the file and reads and writes with pread/pwrite at byte places it computes, so no call waits for
# another rank but the collective ones that must: Open (rank 0 creates the file, or fails MODE_EXCL on an existing
# one; every rank's open checked by all, so that a failure raises everywhere), Close (a barrier; MODE_DELETE_ON_CLOSE
# removes it after), Set_view, Set_size, Preallocate, Sync (fsync, then a barrier), and the shared pointer's
# Write_ordered and Read_ordered, whose ranks' places come from an allgather of their sizes in rank order. A view is
# a displacement and an element type (a contiguous filetype of it); offsets and pointers count elements of it. The
# _all forms are the independent ones (no rank needs another's data here). Not built (refused by name): filetypes
# with gaps, non-native data representations, the non-collective shared pointer (Write_shared, Read_shared,
# Seek_shared) and the split collectives (Write_all_begin, ...), and the request-based forms (Iwrite_at, ...).
MODE_CREATE, MODE_RDONLY, MODE_WRONLY, MODE_RDWR = 1, 2, 4, 8
MODE_DELETE_ON_CLOSE, MODE_UNIQUE_OPEN, MODE_EXCL, MODE_APPEND, MODE_SEQUENTIAL = 16, 32, 64, 128, 256
SEEK_SET, SEEK_CUR, SEEK_END = 600, 602, 604
DISPLACEMENT_CURRENT = -54278278
FILE_NULL = None


class File:
    """A file every rank of a communicator opens (mpi4py's MPI.File; Note [files])."""

    @classmethod
    def Open(cls, comm, filename, amode=MODE_RDONLY, info=INFO_NULL):
        """Every rank of comm opens `filename` (collective): amode MODE_RDONLY, MODE_WRONLY or MODE_RDWR, with
        MODE_CREATE, MODE_EXCL, MODE_APPEND, MODE_DELETE_ON_CLOSE."""
        import os

        path = os.fspath(filename)
        access = amode & (MODE_RDONLY | MODE_WRONLY | MODE_RDWR)
        if access not in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR):
            raise ValueError(f"File.Open: amode {amode} takes one of MODE_RDONLY, MODE_WRONLY and MODE_RDWR")
        if access == MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
            raise ValueError("File.Open: MODE_CREATE and MODE_EXCL need MODE_WRONLY or MODE_RDWR")
        flags = {MODE_RDONLY: os.O_RDONLY, MODE_WRONLY: os.O_WRONLY, MODE_RDWR: os.O_RDWR}[access]
        error = None
        if comm.rank == 0 and amode & MODE_CREATE:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_EXCL if amode & MODE_EXCL else 0), 0o644))
            except OSError as e:
                error = f"rank 0 could not create {path!r}: {e.strerror}"
        error = comm.bcast(error, root=0)
        fd = None
        if error is None:
            try:
                fd = os.open(path, flags)
            except OSError as e:
                error = f"could not open {path!r}: {e.strerror}"
        errors = [e for e in comm.allgather(error) if e is not None]
        if errors:
            if fd is not None:
                os.close(fd)
            raise FileNotFoundError(f"File.Open: {errors[0]}") if "No such file" in errors[0] else \
                OSError(f"File.Open: {errors[0]}")
        f = cls.__new__(cls)
        f._comm, f._path, f._fd, f._amode = comm, path, fd, amode
        f._disp, f._etype, f._handler = 0, BYTE, ERRORS_RETURN
        f._pointer = os.fstat(fd).st_size if amode & MODE_APPEND else 0
        f._shared = f._pointer
        return f

    @classmethod
    def Delete(cls, filename, info=INFO_NULL):
        """Removes the file (call it on one rank)."""
        import os

        os.unlink(os.fspath(filename))

    def _open(self, what):
        if self._fd is None:
            raise ValueError(f"File.{what}: the file is closed")
        return self._fd

    def Close(self):
        """Collective: every rank's accesses are done before it returns."""
        import os

        fd = self._open("Close")
        os.close(fd)
        self._fd = None
        self._comm.Barrier()
        if self._amode & MODE_DELETE_ON_CLOSE and self._comm.rank == 0:
            os.unlink(self._path)
        self._comm.Barrier()

    # --- views and places ---
    def Set_view(self, disp=0, etype=None, filetype=None, datarep="native", info=INFO_NULL):
        """Offsets count elements of etype from byte disp (collective); filetype: etype or a contiguous run of it."""
        etype = BYTE if etype is None else etype
        for t, name in ((etype, "etype"), (filetype, "filetype")):
            if t is not None and _gapped(t):
                raise NotImplementedError(f"File.Set_view: a {name} with gaps ({t.Get_name()}); tiertrain.comm's "
                                          "views are contiguous: give each rank its own displacement instead")
        if datarep != "native":
            raise NotImplementedError(f"File.Set_view: datarep {datarep!r}; tiertrain.comm writes 'native' bytes")
        self._disp = self._pointer_bytes() if disp == DISPLACEMENT_CURRENT else int(disp)
        self._etype, self._pointer, self._shared = etype, 0, 0  # (MPI: both pointers back to zero)

    def Get_view(self):
        return self._disp, self._etype, self._etype

    def _unit(self):
        return _np.dtype(self._etype).itemsize

    def _pointer_bytes(self):
        return self._disp + self._pointer * self._unit()

    def _data(self, buf, what, writable):
        a = _flat(_spec(buf, writable=writable), None, what)
        if writable and not a.flags.writeable:
            raise ValueError(f"{what}: the buffer is read-only")
        if a.nbytes % self._unit():
            raise ValueError(f"{what}: {a.nbytes} bytes are not whole elements of the view's {self._etype.Get_name()}")
        return a

    def _write(self, at, buf, what):
        import os

        fd = self._open(what)
        data = _np.ascontiguousarray(self._data(buf, what, False)).view(_np.uint8)
        done = 0
        while done < data.size:
            done += os.pwrite(fd, memoryview(data[done:]), at + done)
        return data.size

    def _read(self, at, buf, what, status):
        import os

        fd = self._open(what)
        out = self._data(buf, what, True).view(_np.uint8)
        done = 0
        while done < out.size:
            got = os.preadv(fd, [memoryview(out[done:])], at + done)
            if got == 0:
                break  # the end of the file: MPI's count says how much came
            done += got
        if status is not None:
            status.source, status.tag, status.count = self._comm.rank, ANY_TAG, done
        return done

    # --- explicit offsets ---
    def Write_at(self, offset, buf, status=None):
        self._write(self._disp + int(offset) * self._unit(), buf, "File.Write_at")

    def Read_at(self, offset, buf, status=None):
        self._read(self._disp + int(offset) * self._unit(), buf, "File.Read_at", status)

    Write_at_all, Read_at_all = Write_at, Read_at

    # --- the individual pointer ---
    def Write(self, buf, status=None):
        n = self._write(self._pointer_bytes(), buf, "File.Write")
        self._pointer += n // self._unit()

    def Read(self, buf, status=None):
        n = self._read(self._pointer_bytes(), buf, "File.Read", status)
        self._pointer += n // self._unit()

    Write_all, Read_all = Write, Read

    def Seek(self, offset, whence=SEEK_SET):
        if whence == SEEK_SET:
            self._pointer = int(offset)
        elif whence == SEEK_CUR:
            self._pointer += int(offset)
        elif whence == SEEK_END:
            self._pointer = (self.Get_size() - self._disp) // self._unit() + int(offset)
        else:
            raise ValueError(f"File.Seek: whence {whence} is not SEEK_SET, SEEK_CUR or SEEK_END")

    def Get_position(self):
        return self._pointer

    def Get_byte_offset(self, offset):
        return self._disp + int(offset) * self._unit()

    # --- the shared pointer, collectively ---
    def _ordered(self, buf, write):
        what = "File.Write_ordered" if write else "File.Read_ordered"
        nbytes = self._data(buf, what, not write).nbytes
        sizes = self._comm.allgather(nbytes)
        at = self._disp + self._shared * self._unit() + sum(sizes[:self._comm.rank])
        if write:
            self._write(at, buf, what)
        else:
            self._read(at, buf, what, None)
        self._shared += sum(sizes) // self._unit()

    def Write_ordered(self, buf, status=None):
        """Every rank's buf, in rank order, at the shared pointer (collective)."""
        self._ordered(buf, True)

    def Read_ordered(self, buf, status=None):
        self._ordered(buf, False)

    def Get_position_shared(self):
        return self._shared

    # --- the file ---
    def Get_size(self):
        import os

        return os.fstat(self._open("Get_size")).st_size

    def Set_size(self, size):
        """Collective: the file cut or extended to `size` bytes, once every rank is here."""
        import os

        self._comm.Barrier()
        if self._comm.rank == 0:
            os.ftruncate(self._open("Set_size"), int(size))
        self._comm.Barrier()

    def Preallocate(self, size):
        if self.Get_size() < int(size):
            self.Set_size(size)
        else:
            self._comm.Barrier()

    def Sync(self):
        """Collective: this rank's writes on the disk, then every rank's visible to all."""
        import os

        os.fsync(self._open("Sync"))
        self._comm.Barrier()

    def Get_amode(self):
        return self._amode

    def Get_group(self):
        return self._comm.Get_group()

    def Set_atomicity(self, flag):
        """Every access is one pread or pwrite, done when its call returns: atomic enough either way."""

    def Get_atomicity(self):
        return False

    def Set_errhandler(self, errhandler):
        self._handler = errhandler

    def Get_errhandler(self):
        return self._handler

    amode = property(Get_amode)
    size = property(Get_size)
    group = property(Get_group)

    __getattr__ = _refusing_getattr("File", frozenset(), dict.fromkeys((
        "Iread Iread_all Iread_at Iread_at_all Iread_shared Iwrite Iwrite_all Iwrite_at Iwrite_at_all Iwrite_shared "
        "Read_all_begin Read_all_end Read_at_all_begin Read_at_all_end Read_ordered_begin Read_ordered_end "
        "Read_shared Seek_shared Write_all_begin Write_all_end Write_at_all_begin Write_at_all_end "
        "Write_ordered_begin Write_ordered_end Write_shared Get_type_extent Get_info Set_info").split(),
        "not built in tiertrain.comm (Note [files]: the non-collective shared pointer, split collectives and "
        "request-based forms); the explicit offsets (Write_at, Read_at) or the individual pointer (Write, Read) do "
        "the same"))
__all__ += ["File", "MODE_CREATE", "MODE_RDONLY", "MODE_WRONLY", "MODE_RDWR", "MODE_DELETE_ON_CLOSE",
            "MODE_UNIQUE_OPEN", "MODE_EXCL", "MODE_APPEND", "MODE_SEQUENTIAL", "SEEK_SET", "SEEK_CUR", "SEEK_END",
            "DISPLACEMENT_CURRENT", "FILE_NULL"]


_world = None
_self = None


_MADE = __import__("threading").Lock()


def __getattr__(name):
    """COMM_WORLD and COMM_SELF, as mpi4py names them: made on first use and kept (once, whichever thread asks
    first: two threads making the world at once would both join the job)."""
    global _world, _self
    if name in ("COMM_WORLD", "COMM_SELF"):
        with _MADE:
            if name == "COMM_WORLD":
                if _world is None:
                    _world = world()
                return _world
            if _self is None:  # (Note [mpi4py names])
                from ._comm import self_comm

                _self = self_comm()
            return _self
    why = _NOT_BUILT.get(name) or (_GENERIC if name in _MPI4PY_NAMES else None)  # Note [names not built]
    if why is not None:
        raise NotBuiltError(f"MPI.{name}: {why}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ += ["COMM_WORLD", "COMM_SELF"]
Intracomm = Comm  # (mpi4py's class of COMM_WORLD and its splits: MPI.Intracomm.Create_cart(comm, dims))
__all__.append("Intracomm")
