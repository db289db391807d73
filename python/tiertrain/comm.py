"""Collectives between the processes of a job, in mpi4py's style, on numpy arrays (or any buffer) and CPU DLPack
tensors, without copies:

    import numpy as np, tiertrain.comm as tc
    comm = tc.world()                      # started by `tiertrain launch -n N -- python3 script.py`
    x = np.ones(1024, np.float32)
    comm.Allreduce(tc.IN_PLACE, x, op=tc.SUM)
    comm.Bcast(x, root=0)

Errors raise CommError subclasses: CommTimeoutError (a rank did not arrive within TIERTRAIN_COMM_TIMEOUT),
CommMismatchError (ranks called with different sizes, types or ops), CommAbortedError (a rank died or gave up).
"""

from ._comm import (AVG, IN_PLACE, MAX, MIN, PROD, SUM, Comm, CommAbortedError, CommError,  # noqa: F401
                    CommMismatchError, CommTimeoutError, Op, world)

__all__ = ["world", "Comm", "Op", "SUM", "PROD", "MIN", "MAX", "AVG", "IN_PLACE", "CommError", "CommTimeoutError",
           "CommMismatchError", "CommAbortedError"]
