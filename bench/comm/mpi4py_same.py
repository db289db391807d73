"""One Python program, written against mpi4py's API, timed over mpi4py (Open MPI) and over tiertrain.comm with only the
import changed (issue 48): point-to-point latency and bandwidth (ping-pong, a window of non-blocking sends,
bidirectional Sendrecv) and the collectives (Barrier, Bcast, Gather, Scatter, Allgather, Alltoall, Allreduce) on
numpy arrays, from 8 bytes to 64 MiB.

    mpirun -n 2 python3 bench/comm/mpi4py_same.py --impl mpi4py --json m.json
    tiertrain launch -n 2 -- python3 bench/comm/mpi4py_same.py --impl tiertrain --json t.json
    python3 bench/comm/mpi4py_same.py --compare m.json t.json      # the table: tiertrain's time as a fraction of mpi4py's

Each case: warm-up calls, a Barrier, then `iters` calls timed with Wtime; the time is the slowest rank's mean per
call (Allreduce MAX). Sizes are a message's bytes (Bcast, Allreduce: the buffer; Gather, Scatter, Allgather, Alltoall:
one rank's block). Ping-pong and the window run between ranks 0 and 1, the others wait.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

CASES = ["pingpong", "window", "bidir", "barrier", "bcast", "gather", "scatter", "allgather", "alltoall", "allreduce"]
WINDOW = 64


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def run(MPI, case: str, size: int, iters: int, warm: int) -> float:
    comm = MPI.COMM_WORLD
    n, me = comm.Get_size(), comm.Get_rank()
    b = np.ones(size, np.uint8)
    r = np.zeros(size, np.uint8)
    big = np.zeros(size * n, np.uint8)
    flt = np.ones(max(1, size // 4), np.float32)
    fout = np.zeros_like(flt)
    ack = np.zeros(1, np.uint8)

    def once():
        if case == "pingpong":
            if me == 0:
                comm.Send(b, dest=1, tag=1)
                comm.Recv(r, source=1, tag=1)
            elif me == 1:
                comm.Recv(r, source=0, tag=1)
                comm.Send(b, dest=0, tag=1)
        elif case == "window":
            if me == 0:
                MPI.Request.Waitall([comm.Isend(b, dest=1, tag=2) for _ in range(WINDOW)])
                comm.Recv(ack, source=1, tag=3)
            elif me == 1:
                bufs = [np.empty(size, np.uint8) for _ in range(WINDOW)] if size <= 1 << 20 else [r] * WINDOW
                MPI.Request.Waitall([comm.Irecv(x, source=0, tag=2) for x in bufs])
                comm.Send(ack, dest=0, tag=3)
        elif case == "bidir":
            peer = me ^ 1
            if peer < n:
                comm.Sendrecv(b, dest=peer, sendtag=4, recvbuf=r, source=peer, recvtag=4)
        elif case == "barrier":
            comm.Barrier()
        elif case == "bcast":
            comm.Bcast(b, root=0)
        elif case == "gather":
            comm.Gather(b, big if me == 0 else None, root=0)
        elif case == "scatter":
            comm.Scatter(big if me == 0 else None, r, root=0)
        elif case == "allgather":
            comm.Allgather(b, big)
        elif case == "alltoall":
            comm.Alltoall(big, np.zeros_like(big))
        elif case == "allreduce":
            comm.Allreduce(flt, fout, op=MPI.SUM)

    for _ in range(warm):
        once()
    comm.Barrier()
    t0 = MPI.Wtime()
    for _ in range(iters):
        once()
    mine = (MPI.Wtime() - t0) / iters
    return comm.allreduce(mine, op=MPI.MAX)


def measure(args) -> None:
    if args.impl == "mpi4py":
        from mpi4py import MPI
    else:
        import tiertrain.comm as MPI
    comm = MPI.COMM_WORLD
    rows = []
    for case in args.cases.split(","):
        for size in ([0] if case == "barrier" else sizes(args.min_bytes, args.max_bytes, args.factor)):
            if case in ("alltoall", "gather", "scatter", "allgather") and size * comm.Get_size() > args.max_bytes * 4:
                continue
            per = max(size, 256) * (WINDOW if case == "window" else 1)
            iters = max(5, min(args.iters, int(args.bytes_per_case / per)))
            t = run(MPI, case, size, iters, max(2, iters // 10))
            moved = size * (WINDOW if case == "window" else 2 if case in ("pingpong", "bidir") else 1)
            rows.append({"case": case, "bytes": size, "iters": iters, "seconds": t,
                         "latency_us": t * 1e6 / (2 if case == "pingpong" else 1),
                         "gb_per_s": moved / t / 1e9 if size else 0.0})
            if comm.Get_rank() == 0:
                print(f"{args.impl:9s} {case:9s} {size:>10d} B  {t * 1e6:12.2f} us  {rows[-1]['gb_per_s']:8.3f} GB/s",
                      flush=True)
    if comm.Get_rank() == 0 and args.json:
        json.dump({"impl": args.impl, "ranks": comm.Get_size(), "rows": rows}, open(args.json, "w"), indent=1)


def compare(m_path: str, t_path: str) -> None:
    m, t = json.load(open(m_path)), json.load(open(t_path))
    mt = {(r["case"], r["bytes"]): r for r in m["rows"]}
    print(f"| case | bytes | mpi4py us | tiertrain us | tiertrain speed (mpi4py = 1) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    worst = None
    for r in t["rows"]:
        k = (r["case"], r["bytes"])
        if k not in mt:
            continue
        ratio = mt[k]["seconds"] / r["seconds"]
        worst = ratio if worst is None else min(worst, ratio)
        print(f"| {r['case']} | {r['bytes']} | {mt[k]['seconds'] * 1e6:.2f} | {r['seconds'] * 1e6:.2f} | {ratio:.2f}x |")
    print(f"\nslowest case: {worst:.2f}x mpi4py's speed ({t['ranks']} ranks)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=["mpi4py", "tiertrain"])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=8)
    ap.add_argument("--iters", type=int, default=2000, help="at most this many timed calls a case")
    ap.add_argument("--bytes-per-case", type=float, default=2e9, help="fewer calls for large sizes: about this "
                    "many bytes a case")
    ap.add_argument("--json")
    ap.add_argument("--compare", nargs=2, metavar=("MPI4PY_JSON", "TIERTRAIN_JSON"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if args.impl is None:
        sys.exit("--impl mpi4py or tiertrain (or --compare A B)")
    measure(args)


if __name__ == "__main__":
    main()
