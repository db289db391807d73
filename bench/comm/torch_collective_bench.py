"""PyTorch's NCCL collectives (torch.distributed, backend "nccl"), timed as comm-bench --stream and nccl-tests time
them (the iterations queued, one synchronize), float32, out of place for allgather and reduce_scatter and in place
for allreduce and broadcast (PyTorch's signatures): the side-by-side reference of bench/comm/nccl_gpu.sh. Run one process
per GPU:  tiertrain launch -n 2 -- python3 bench/comm/torch_collective_bench.py -C allreduce -b 8 -e 1G -f 4 --json F"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comm_bench_common import add_sweep_args, bus_factor, float_counts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-C", "--collective", default="allreduce",
                    choices=["allreduce", "broadcast", "allgather", "reduce_scatter"])
    add_sweep_args(ap)
    a = ap.parse_args()
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=dev)
    rows = []
    if rank == 0:
        print(f"# torch {torch.__version__} NCCL {torch.cuda.nccl.version()}: {a.collective}, float, {n} ranks, "
              f"{a.iters} iterations after {a.warmup} warm-up, queued, one synchronize")
    for count in float_counts(a, a.collective, n):
        per = count // n
        x = torch.ones(count, device=dev)
        y = torch.empty(count, device=dev)

        def call() -> None:
            if a.collective == "allreduce":
                dist.all_reduce(x)
            elif a.collective == "broadcast":
                dist.broadcast(x, src=0)
            elif a.collective == "allgather":
                dist.all_gather_into_tensor(y, x[:per])
            else:
                dist.reduce_scatter_tensor(y[:per], x)

        for _ in range(a.warmup):
            call()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            call()
        torch.cuda.synchronize()
        t = torch.tensor([(time.perf_counter() - t0) / a.iters], dtype=torch.float64, device=dev)
        dist.all_reduce(t)
        t = t.item() / n
        alg = count * 4 / t / 1e9
        bus = alg * bus_factor(a.collective, n)
        rows.append({"collective": a.collective, "ranks": n, "backend": "torch", "size": count * 4, "count": count,
                     "type": "float", "in_place": a.collective in ("allreduce", "broadcast"), "time_us": t * 1e6,
                     "algbw_gbs": alg, "busbw_gbs": bus})
        if rank == 0:
            print(f"{count * 4:12d} {count:13d} {t * 1e6:9.2f} {alg:8.2f} {bus:8.2f}", flush=True)
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
