"""Two ranks exchange a message of bytes and one of doubles, with buffer specs and a Status."""
import array

import tiertrain.comm as MPI  # was: from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_size() < 2:
    raise SystemExit("needs 2 ranks")
rank = comm.Get_rank()
status = MPI.Status()

text = b"a message of bytes"
msg = array.array("B", b"\0" * 32)
if rank == 0:
    msg[: len(text)] = array.array("B", text)
    comm.Send([msg, len(text) + 1, MPI.CHAR], 1, 17)
elif rank == 1:
    comm.Recv([msg, 32, MPI.CHAR], 0, 17, status)
    assert bytes(msg[: len(text)]) == text and msg[len(text)] == 0
    assert status.source == 0 and status.tag == 17 and status.error == MPI.SUCCESS
    assert status.Get_count(MPI.CHAR) == len(text) + 1

sendbuf = array.array("d", [0.0] * 16)
recvbuf = array.array("d", [0.0] * 16)
if rank == 0:
    sendbuf[:] = array.array("d", [i * 0.5 for i in range(16)])
    comm.Send([sendbuf, MPI.DOUBLE], 1, 0)
    comm.Recv([recvbuf, MPI.DOUBLE], 1, 0, status)
    assert recvbuf == sendbuf and status.Get_count(MPI.DOUBLE) == 16
elif rank == 1:
    comm.Recv([recvbuf, MPI.DOUBLE], 0, 0, status)
    sendbuf[:] = recvbuf
    comm.Send([sendbuf, MPI.DOUBLE], 0, 0)
print(f"exchange: rank {rank} ok")
