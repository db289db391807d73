"""What the Python collective benchmarks (mpi4py_bench.py, py_comm_bench.py) share with each other and with
`tiertrain comm-bench`: the size flags (-b -e -f, K/M/G suffixes), the iteration flags (-n -w), the sweep of sizes,
nccl-tests' bus-bandwidth factors, and comm-bench's timing."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Callable, Iterator


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def add_sweep_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="64M")
    ap.add_argument("-f", "--stepfactor", type=float, default=2.0)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--warmup-ms", type=float, default=0.0,
                    help="then more untimed calls, as many on every rank, until this many ms have passed")
    ap.add_argument("--json", default="")
    ap.add_argument("--huge", action="store_true",
                    help="buffers from tiertrain.comm.zeros (on huge pages) instead of numpy's, for either library")


def buffers(huge: bool):
    """(ones, zeros): the benchmarks' float32 buffer makers, from numpy or (--huge) tiertrain.comm.zeros."""
    import numpy as np

    if not huge:
        return (lambda n: np.ones(n, np.float32)), (lambda n: np.zeros(n, np.float32))
    from tiertrain.comm import zeros

    def ones(n):
        a = zeros(n, np.float32)
        a.fill(1)
        return a
    return ones, (lambda n: zeros(n, np.float32))


# Collectives whose size is the gathered (or scattered) buffer: a multiple of the ranks.
SPLIT = ("allgather", "gather", "scatter", "reduce_scatter", "alltoall")


def bus_factor(collective: str, n: int) -> float:
    return {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}.get(collective, (n - 1) / n)


def float_counts(a: argparse.Namespace, collective: str, n: int) -> Iterator[int]:
    """The float32 element counts of the sweep, as comm-bench takes them."""
    size = float(parse_size(a.minbytes))
    while size <= parse_size(a.maxbytes) * 1.0000001:
        count = int(size) // 4
        if collective in SPLIT:
            count = count // n * n
        if count > 0:
            yield count
        size *= a.stepfactor


def mean_time_per_call(call: Callable[[], None], warmup: int, iters: int, barrier: Callable[[], None],
                       mean_over_ranks: Callable[[float], float], warmup_ms: float = 0.0,
                       max_over_ranks: Callable[[float], float] | None = None) -> float:
    """Seconds per call as `tiertrain comm-bench` times them: warmup calls (and with warmup_ms, more until that many ms
    have passed, as many on every rank: max_over_ranks agrees on the number), a barrier, then iters back-to-back
    calls; each rank's mean time per call, averaged over the ranks by mean_over_ranks."""
    w0 = time.perf_counter()
    for _ in range(warmup):
        call()
    if warmup_ms > 0 and max_over_ranks is not None:
        took = (time.perf_counter() - w0) * 1e3
        # A float on every rank (the ranks must agree on the dtype of the reduction).
        more = 0.0 if took >= warmup_ms else float(math.ceil((warmup_ms - took) / max(took / max(warmup, 1), 1e-3)))
        agreed = int(min(max_over_ranks(more), 1e6))
        if os.environ.get("TT_BENCH_TRACE"):  # where a first size's time goes: the warm-up on each rank
            first = (time.perf_counter() - w0) * 1e3
            print(f"warm-up: {warmup} calls took {took:.2f} ms, {agreed} more (this rank wanted {more:.0f})",
                  file=sys.stderr, flush=True)
        for _ in range(agreed):
            call()
        if os.environ.get("TT_BENCH_TRACE"):
            print(f"warm-up: all {warmup + agreed} calls {(time.perf_counter() - w0) * 1e3:.2f} ms "
                  f"(at the agreement {first:.2f})", file=sys.stderr, flush=True)
    barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        call()
    return mean_over_ranks((time.perf_counter() - t0) / iters)


def write_results(out: str, lines: list[str], summary: list[dict]) -> None:
    """A summary script's table (results.md, also printed) and rows (results.json) in the folder it read."""
    import json
    import os

    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(text)
