"""GPU training benchmark of the reference GPT (tools/torch_gpt.py) in PyTorch, the side-by-side for tiertrain's
CUDA backend: same model, same random-token batches, AdamW with clipping.

Modes: ``bf16`` (autocast bf16, fused AdamW, SDPA flash attention: the configuration PyTorch users run) and ``fp32``
(no autocast, TF32 off, SDPA math on fp32: the like-for-like reference for tiertrain's fp32 mode). ``--compile``
wraps the model in torch.compile (``--compile-mode max-autotune-no-cudagraphs`` for Inductor's autotuned kernels).
The model's vocabulary is padded up to a multiple of 128 (50257 -> 50304, as nanoGPT and llm.c do, and as tiertrain
pads its own; ``--vocab-multiple 1`` for none); tokens are drawn from the data vocabulary ``--vocab``, and FLOPs and
the configuration name count the data vocabulary for both programs. Step times are CUDA-event timed, median over the timed steps; tokens/s = B*T /
median; MFU against 989 TFLOP/s (H100/H200 dense bf16) or 67 TFLOP/s (fp32 non-tensor-core) with the usual
6*N*tokens + attention FLOP count. Prints one line and writes JSON with ``--json-out``.

``--ddp`` (under ``torchrun --nproc_per_node N``): data parallel as PyTorch users run it, DistributedDataParallel
over NCCL (``gradient_as_bucket_view``; compiled with ``--compile``, where Dynamo splits the graph at the buckets),
``--batch`` sequences a rank, each rank its own random tokens; rank 0 times the steps and reports tokens/s of all
ranks (``--batch`` x N x T / median), MFU over the N GPUs, its own peak memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
import torch_gpt  # noqa: E402


def flops_per_step(L: int, C: int, V: int, T: int, B: int, n_params: int) -> float:
    """Training FLOPs of one step, as llm.c and nanoGPT count them: 6 N per token for the weights (N without the
    position embedding; the tied LM head counted once) plus 12 L T C per token for attention (no causal discount)."""
    n = n_params - T * C
    return (6 * n + 12 * L * T * C) * B * T


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--mode", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--vocab-multiple", type=int, default=128,
                   help="pad the model's vocabulary (embedding, LM head) up to a multiple of this")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--compile-mode", default="default", choices=["default", "max-autotune-no-cudagraphs"])
    p.add_argument("--profile-out", help="after timing, profile 3 steps and write the top CUDA kernels here")
    p.add_argument("--save-on-cpu", action="store_true",
                   help="keep saved activations in pinned host memory (torch.autograd.graph.save_on_cpu)")
    p.add_argument("--memory-budget-gib", type=float, default=0,
                   help="cap the caching allocator at this many GiB (set_per_process_memory_fraction)")
    p.add_argument("--json-out")
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel over the ranks torchrun started")
    args = p.parse_args()

    torch.manual_seed(0)
    ranks, rank = 1, 0
    if args.ddp:
        import torch.distributed as dist
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        ranks, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device())
    if args.memory_budget_gib > 0:
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.memory_budget_gib * 2**30 / total), torch.cuda.current_device())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    v_model = -(-args.vocab // args.vocab_multiple) * args.vocab_multiple
    cfg = torch_gpt.GPTConfig(V=v_model, L=args.layers, C=args.dim, H=args.heads, T=args.seq)
    model = torch_gpt.GPT(cfg, use_sdpa=True).to(dev)
    torch_gpt.init_params(model)
    # Parameters of the unpadded model (the padding rows of the embedding are not the model's), as tiertrain counts.
    n_params = sum(q.numel() for q in model.parameters()) - (v_model - args.vocab) * args.dim
    opt = torch_gpt.make_optimizer(model, 6e-4, fused=True)
    fwd = model
    if args.ddp:
        from torch.nn.parallel import DistributedDataParallel
        fwd = DistributedDataParallel(model, device_ids=[dev.index], gradient_as_bucket_view=True)
    compiled_from = fwd
    if args.compile:
        fwd = (torch.compile(compiled_from) if args.compile_mode == "default"
               else torch.compile(compiled_from, mode=args.compile_mode))

    def step(tokens, targets):
        opt.zero_grad(set_to_none=True)
        with contextlib.ExitStack() as stack:
            if args.save_on_cpu:
                stack.enter_context(torch.autograd.graph.save_on_cpu(pin_memory=True))
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.mode == "bf16"):
                _, loss = fwd(tokens, targets)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), torch_gpt.GRAD_CLIP)
        opt.step()
        return loss

    gen = torch.Generator(device=dev).manual_seed(1 + rank)
    times, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    for i in range(args.steps):
        seq = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev, generator=gen)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step(seq[:, :-1], seq[:, 1:])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        losses.append(loss.item())
    if args.profile_out:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                seq = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev, generator=gen)
                step(seq[:, :-1], seq[:, 1:])
            torch.cuda.synchronize()
        with open(args.profile_out, "w") as f:
            f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=45, max_name_column_width=90))
    timed = times[args.warmup_steps:]
    ms = statistics.median(timed)
    tps = ranks * args.batch * args.seq / (ms / 1e3)
    peak_flops = (989e12 if args.mode == "bf16" else 67e12) * ranks
    mfu = (flops_per_step(args.layers, args.dim, args.vocab, args.seq, ranks * args.batch, n_params) / (ms / 1e3)
           / peak_flops)
    impl = f"torch-{args.mode}" + ("-ddp" if args.ddp else "") + ("-compile" if args.compile else "-eager")
    impl += "-max-autotune" if args.compile and args.compile_mode != "default" else ""
    impl += "-save_on_cpu" if args.save_on_cpu else ""
    result = {"impl": impl, "memory_budget_gib": args.memory_budget_gib or None,
              "torch_version": torch.__version__, "device": torch.cuda.get_device_name(),
              "config": {"L": args.layers, "C": args.dim, "H": args.heads, "T": args.seq, "B": ranks * args.batch,
                         "V": args.vocab, "V_model": v_model}, "ranks": ranks, "batch_per_rank": args.batch, "params": n_params, "median_ms_per_step": ms, "tokens_per_s": tps,
              "mfu": mfu, "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "first_loss": losses[0],
              "last_loss": losses[-1]}
    if args.ddp:
        import torch.distributed as dist
        dist.destroy_process_group()
        if rank != 0:
            return
    print(json.dumps(result))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
