"""What the Python collective benchmarks (mpi4py_bench.py, py_comm_bench.py) share with each other and with
`tiertrain comm-bench`: the size flags (-b -e -f, K/M/G suffixes), the iteration flags (-n -w --warmup-ms
--first-warmup-ms --min-ms), the sweep of sizes, nccl-tests' bus-bandwidth factors, and comm-bench's timing."""

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
    ap.add_argument("--first-warmup-ms", type=float, default=0.0,
                    help="--warmup-ms for the first size of the run (0: the same); a process's first few hundred ms "
                         "of collectives can be slower than the rest on a virtual machine")
    ap.add_argument("--min-ms", type=float, default=0.0,
                    help="time at least as many calls as take this many ms (by the warm-up's pace), not fewer than -n")
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


def warm_up(call: Callable[[], None], warmup: int, warmup_ms: float,
            max_over_ranks: Callable[[float], float] | None) -> float:
    """comm-bench's warm-up: `warmup` calls, then (warmup_ms > 0) rounds of more calls, as many on every rank
    (max_over_ranks agrees on each round's count; a first round of one call where there is no pace yet), until every
    rank has spent warmup_ms in them. Returns this rank's seconds per call over all the rounds (over the `warmup`
    calls if there was none; 0 without calls). Whether a round runs depends only on the agreed count."""
    trace = bool(os.environ.get("TIERTRAIN_BENCH_TRACE"))
    w0 = time.perf_counter()
    for _ in range(warmup):
        call()
    pace = (time.perf_counter() - w0) / warmup if warmup > 0 else 0.0
    round_secs, round_calls, rounds = 0.0, 0, 0
    while warmup_ms > 0 and max_over_ranks is not None and rounds < 20:
        left = warmup_ms / 1e3 - (time.perf_counter() - w0)
        # A float on every rank (the ranks must agree on the dtype of the reduction); at most 1e6 a round.
        want = 0.0 if left <= 0 else 1.0 if pace <= 0 else float(min(max(math.ceil(left / pace), 1), 1e6))
        agreed = int(max_over_ranks(want))
        if agreed == 0:
            break
        r0 = time.perf_counter()
        for _ in range(agreed):
            call()
        round_secs += time.perf_counter() - r0
        round_calls += agreed
        pace = round_secs / round_calls
        rounds += 1
    if trace and warmup + round_calls > 0:  # one write a line: the ranks share stderr
        sys.stderr.write(f"warm-up: {warmup + round_calls} calls in {(time.perf_counter() - w0) * 1e3:.2f} ms over "
                         f"{rounds} round(s), {pace * 1e6:.4f} us a call\n")
        sys.stderr.flush()
    return pace


def timed_iters(iters: int, min_ms: float, per_call: float, max_over_ranks: Callable[[float], float] | None) -> int:
    """How many calls to time: iters, or (min_ms > 0) as many as take min_ms at per_call seconds a call on every
    rank (each rank's count from its own pace, the largest agreed by max_over_ranks, which every rank calls alike: the
    count of the fastest rank), at most 1e6."""
    if min_ms <= 0 or max_over_ranks is None:
        return iters
    want = float(min(max(iters, math.ceil(min_ms / 1e3 / per_call)), 1e6)) if per_call > 0 else float(iters)
    return int(max_over_ranks(want))


def mean_time_per_call(call: Callable[[], None], warmup: int, iters: int, barrier: Callable[[], None],
                       mean_over_ranks: Callable[[float], float], warmup_ms: float = 0.0,
                       max_over_ranks: Callable[[float], float] | None = None,
                       min_ms: float = 0.0) -> tuple[float, int]:
    """Seconds per call as `tiertrain comm-bench` times them, and the number of calls timed: the warm-up (warm_up),
    a barrier, then iters back-to-back calls (more with min_ms: timed_iters); each rank's mean time per call,
    averaged over the ranks by mean_over_ranks."""
    per = warm_up(call, warmup, warmup_ms, max_over_ranks)
    n = timed_iters(iters, min_ms, per, max_over_ranks)
    barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return mean_over_ranks((time.perf_counter() - t0) / n), n


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
