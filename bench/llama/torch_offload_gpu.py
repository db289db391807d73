"""Single-GPU *offload* training baselines in PyTorch for a Llama-family model larger than comfortably fits the GPU
(issue 46: a 7-8B Llama trained with full AdamW on one 80 GB GPU), the side-by-side for tiertrain's host-offload modes.

The model is the clean Llama of bench/llama/torch_llama_gpu.py (imported from it, not copied), with the same random
token batches, AdamW hyper-parameters (lr 3e-4, betas 0.9/0.95, weight decay 0.1 on the 2-D weights only), loss, FLOP
count, CUDA-event timing and JSON keys. Defaults are the Llama-3-8B shape: dim 4096, 32 layers, 32 query heads over 8
KV heads, SwiGLU 14336, vocab 128256, untied LM head, RoPE theta 500000, at seq 2048, batch 1.

Modes (``--mode``):

``fsdp2-cpu-offload``
    PyTorch FSDP2 on a world of one process: ``fully_shard`` on every transformer block, then on the root model, each
    with ``CPUOffloadPolicy(pin_memory=True)`` and ``MixedPrecisionPolicy(param_dtype=bfloat16,
    reduce_dtype=float32)``. Under that policy the fp32 parameters, their gradients and the AdamW state live in pinned
    host memory; before a block runs, its fp32 parameters are copied host-to-device and cast to bf16 (the
    "all-gather" of one rank), its gradients are reduced in fp32 and copied device-to-host in the backward pass, and
    ``torch.optim.AdamW`` steps on the CPU. The settings follow FSDP2's documentation (torch 2.11: ``fully_shard``,
    ``CPUOffloadPolicy``, ``FSDPModule.set_requires_gradient_sync`` / ``set_reshard_after_backward``):

    - pinned memory, which "allows both more efficient H2D/D2H copies and for the copies to overlap with compute";
    - ``reshard_after_forward=False``: the unsharded bf16 parameters stay on the GPU after the forward pass, so the
      backward pass needs no second host-to-device copy (the bf16 copy of an 8B model, 16 GB, fits one GPU). FSDP2's
      default for non-root modules, ``True``, frees them and copies them in again; ``--fsdp-reshard`` asks for it;
    - gradient accumulation with ``set_requires_gradient_sync(False)`` on all but the last micro-batch ("gradient
      accumulation without communication": the unsharded gradients accumulate in fp32 on the GPU, instead of each
      micro-batch's being copied to the host and added there on the CPU, which FSDP2 does synchronously) and
      ``set_reshard_after_backward(False)`` on those micro-batches (no copy-in again for the next micro-batch);
    - the fused CPU AdamW (``fused=True``: the torch.optim documentation ranks fused > foreach > for-loop, and the
      CPU has the fused kernel; ``--cpu-adam foreach`` for the multi-tensor one);
    - a ``cuda:nccl,cpu:gloo`` process group: the gradients are CPU DTensors, and ``torch.nn.utils.clip_grad_norm_``
      (clipping at 1.0) reduces their norm over the CPU backend;
    - ``--activation-checkpointing`` wraps each block in non-reentrant ``torch.utils.checkpoint``, and ``--compile``
      then wraps it in ``torch.compile``, both before ``fully_shard`` (torchtitan's order: checkpointing, per-block
      compilation, FSDP), so the recomputation stays inside the block's FSDP unit (checkpointing around an FSDP
      block recomputes it without FSDP's pre-forward input cast, and a compiled block then fails the checkpoint's
      check of the recomputed tensors);
    - ``--prefetch N`` sets explicit prefetching of the next N blocks (``set_modules_to_forward_prefetch`` /
      ``set_modules_to_backward_prefetch``); 0, the default, leaves FSDP2's implicit prefetching.

    bf16 autocast stays around the forward pass so that the cross-entropy runs in fp32 as in the other modes (the
    matrix products are bf16 either way).

``torchao-cpu-offload-optimizer``
    The model on the GPU in its training dtype and ``torchao.optim.CPUOffloadOptimizer(params, torch.optim.AdamW,
    offload_gradients=..., fused=True, lr=..., betas=...)`` (torchao's optim README, "Optimizer CPU offload";
    ZeRO-Offload for one GPU): each parameter gets a pinned host copy and a pinned host gradient; a post-accumulate-
    grad hook copies each gradient to the host on a side stream as soon as the backward pass produces it
    (``--offload-gradients`` then frees the GPU gradient; torchao says that does not work with gradient
    accumulation, so it is refused with ``--grad-accum`` > 1); ``step()`` runs a fused CPU AdamW on each parameter as
    its gradient arrives and copies the updated parameter back while the next one steps. Parameters of fewer than
    4096 elements stay with a fused AdamW on the GPU (at dim 4096 the RMSNorm gains have exactly 4096 and go to the
    host too). Following the README's speed notes: the fused CPU AdamW; no whole-model ``torch.compile`` (it would
    keep the gradient copies from interleaving with the backward pass), so ``--compile`` compiles each block, wrapped
    with ``--activation-checkpointing`` as in the FSDP2 mode; more work per step (``--batch``, ``--grad-accum``).
    The README's fastest setting is full bf16 training (``--param-dtype bf16``: bf16 weights, gradients and AdamW
    state, no fp32 master copy); the default ``--param-dtype fp32`` keeps fp32 weights and AdamW state with bf16
    autocast, the numerics of the other modes. torchao documents gradient clipping as unsupported. To clip at 1.0 as
    the other modes do, this script adds a post-accumulate-grad hook (registered before torchao's, so it runs first)
    that sums each gradient's squared norm on the GPU on the last micro-batch, and gives every inner AdamW the
    clipping factor's inverse as ``grad_scale`` (the attribute ``torch.amp.GradScaler`` sets: the fused kernel
    divides the gradients by it as it reads them), so clipping costs no extra pass over the host gradients.
    ``--no-clip`` is torchao's plain documented setup.

``deepspeed-zero-offload``
    DeepSpeed's ZeRO-Offload on one GPU (``deepspeed.initialize`` in this process, a world of one): ZeRO stage 2 with
    ``offload_optimizer: {device: cpu, pin_memory: true}``, ``bf16: {enabled: true}``, ``overlap_comm`` and
    ``contiguous_gradients`` on, as DeepSpeed's ZeRO-Offload tutorial sets them, its ``AdamW`` (DeepSpeedCPUAdam
    in AdamW mode, built by DeepSpeed at first use), ``gradient_clipping`` 1.0 and ``gradient_accumulation_steps``
    (DeepSpeed adds each micro-batch's gradients into its fp32 host copy). The bf16 weights and gradient buckets stay
    on the GPU, the fp32 master, gradients and moments on the host (16 bytes a parameter). ``--compile`` and
    ``--activation-checkpointing`` wrap the blocks before ``deepspeed.initialize``, as in the modes above; the
    forward runs under bf16 autocast (the cross-entropy in fp32) and the RoPE tables stay fp32 (set again after
    DeepSpeed casts the module to bf16). ``--ds-bucket`` sets the reduce and all-gather bucket sizes (elements).
    Not used: the one-step-delayed update (DPU, ``delay_param_update``-style options), which changes the training.

``none``
    No offload, the control: torch_llama_gpu.py's clean bf16-autocast step (fused AdamW on the GPU, clipping,
    ``--compile`` of the whole model, ``--activation-checkpointing`` by base.Llama itself). ``--device cpu`` runs it
    (or the FSDP2 mode, without pinned memory, on a gloo process group) on the CPU for a smoke test.

Every mode builds the model on the ``meta`` device and materializes it only where the mode keeps it, so the host
never holds a second copy of the model: FSDP2 ``to_empty(device="cpu")`` after sharding (the weights drawn on the GPU
and copied into the host shards), torchao and none ``to_empty`` on the GPU (torchao then makes its own pinned host
copy). Weights are N(0, 0.02), biases zero, RMSNorm gains one; the RoPE tables come from torch_llama_gpu.py's model.

Reported per step (median over the steps after ``--warmup-steps``): CUDA-event ms (and wall-clock ms), tokens/s, MFU
against 989 TFLOP/s with torch_llama_gpu.py's FLOP count, ``torch.cuda.max_memory_allocated`` (``peak_gib``), the
process's peak resident host memory (``resource.getrusage`` ru_maxrss, ``host_peak_rss_gib``; pinned memory is
resident and should count), first and last loss. One JSON line is printed, and written with ``--json-out``.

Host memory: with fp32 weights both offload modes keep 16 bytes a parameter on the host (weights, gradients, two
AdamW moments), about 120 GiB for the 8B shape, nearly all of a 128 GiB host; ``--param-dtype bf16`` (torchao)
halves it.

  python3 bench/llama/torch_offload_gpu.py --mode fsdp2-cpu-offload --compile --activation-checkpointing
  python3 bench/llama/torch_offload_gpu.py --mode torchao-cpu-offload-optimizer --offload-gradients --compile \\
      --activation-checkpointing
  python3 bench/llama/torch_offload_gpu.py --mode none --device cpu --dim 64 --layers 2 --heads 4 --kv-heads 2 \\
      --ffn 128 --vocab 512 --seq 32 --batch 2 --steps 3 --warmup-steps 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama_gpu as base  # noqa: E402  (the clean Llama, FLOP count and constants)

MODES = ("fsdp2-cpu-offload", "torchao-cpu-offload-optimizer", "deepspeed-zero-offload", "none")
PEAK_BF16_FLOPS = 989e12


def adamw_groups(params: list[nn.Parameter]) -> list[dict]:
    """torch_llama_gpu.py's AdamW parameter groups: weight decay on the 2-D weights, none on gains and biases."""
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": base.WEIGHT_DECAY},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def local(p: torch.Tensor) -> torch.Tensor:
    """The tensor holding ``p``'s values here: a DTensor's local shard (all of it on a world of one), else ``p``."""
    return p.to_local() if hasattr(p, "to_local") else p


@torch.no_grad()
def init_weights(model: nn.Module, gen_device: torch.device) -> None:
    """Weights (embedding included) from N(0, INIT_STD), biases zero, RMSNorm gains one, as base.Llama does, written
    into each parameter's local tensor. The normal draws are made on ``gen_device`` (the GPU: the CPU's generator
    would take minutes for 8B values) and copied in."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            w = local(module.weight)
            if w.device == gen_device:
                w.normal_(0.0, base.INIT_STD)
            else:
                w.copy_(torch.empty(w.shape, dtype=w.dtype, device=gen_device).normal_(0.0, base.INIT_STD))
            if getattr(module, "bias", None) is not None:
                local(module.bias).zero_()
        elif isinstance(module, base.RMSNorm):
            local(module.weight).fill_(1.0)


def set_rope_tables(model: nn.Module, args, device: torch.device) -> None:
    """Give the (materialized) model its RoPE cos/sin buffers in fp32 on ``device``, taken from a base.Llama with no
    layers and a one-word vocabulary (the tables depend only on head_dim, seq, theta and scaling)."""
    ref = base.Llama(vocab=1, dim=args.dim, layers=0, heads=args.heads, kv_heads=args.kv_heads, ffn=1, seq=args.seq,
                     rope_theta=args.rope_theta, rope_scaling=args.rope_scaling, tied=False, fused_qkv=True,
                     qkv_bias=False)
    model.cos = ref.cos.to(device)
    model.sin = ref.sin.to(device)


class CheckpointedBlock(nn.Module):
    """A block run under torch.utils.checkpoint (non-reentrant): its activations are recomputed in the backward
    pass. Wrapping the block (rather than base.Llama's checkpoint call around it) keeps the recomputation inside the
    block's own FSDP unit and compiled region."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args):
        return checkpoint(self.block, *args, use_reentrant=False)


def wrap_blocks(model: base.Llama, activation_checkpointing: bool, compile_mode: str | None) -> None:
    """Wrap each transformer block: first in activation checkpointing, then in ``torch.compile`` (per-block
    compilation), the order torchtitan applies them before FSDP."""
    for i, block in enumerate(model.blocks):
        if activation_checkpointing:
            block = CheckpointedBlock(block)
        if compile_mode is not None:
            block = torch.compile(block, mode=compile_mode)
        model.blocks[i] = block


def host_peak_rss_gib() -> float:
    """Peak resident set size of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def init_single_process_group(cuda: bool) -> None:
    """A process group of one rank: torchrun's environment if set, else this process alone on a free local port."""
    import torch.distributed as dist
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        raise SystemExit("this is a single-GPU baseline: run it with one process (torchrun --nproc_per_node 1)")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")  # (DeepSpeed asks for it)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    # The CPU backend reduces the gradient norm of the CPU-resident gradients (clip_grad_norm_ on CPU DTensors).
    dist.init_process_group(backend="cuda:nccl,cpu:gloo" if cuda else "gloo")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=MODES, default="fsdp2-cpu-offload")
    base.add_model_args(p, layers=32, dim=4096, ffn=14336, batch=1, tied=False)  # Llama-3-8B (untied)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile: each block (offload modes), the whole model (none)")
    p.add_argument("--compile-mode", default="default", help="passed to torch.compile(mode=...)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each block in the backward pass (torch.utils.checkpoint, non-reentrant)")
    p.add_argument("--no-clip", action="store_true", help="no gradient clipping (default: clip the norm at 1.0)")
    p.add_argument("--param-dtype", choices=["fp32", "bf16"], default="fp32",
                   help="torchao and none: fp32 weights with bf16 autocast, or full bf16 weights/grads/AdamW state")
    p.add_argument("--offload-gradients", action="store_true",
                   help="torchao: free each GPU gradient once it is copied to the host (no --grad-accum)")
    p.add_argument("--cpu-adam", choices=["fused", "foreach"], default="fused",
                   help="fsdp2: the CPU AdamW implementation")
    p.add_argument("--fsdp-reshard", action="store_true",
                   help="fsdp2: reshard_after_forward=True (free the bf16 weights after forward, copy in again for "
                        "backward; and between micro-batches)")
    p.add_argument("--prefetch", type=int, default=0,
                   help="fsdp2: explicitly prefetch the next N blocks in forward and backward (0: implicit)")
    p.add_argument("--ds-bucket", type=float, default=5e8,
                   help="deepspeed: reduce_bucket_size and allgather_bucket_size (elements)")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   help="default cuda; cpu runs mode none (or fsdp2 without pinned memory) for a smoke test")
    p.add_argument("--json-out")
    args = p.parse_args()
    if args.dim % args.heads or args.heads % args.kv_heads or (args.dim // args.heads) % 2:
        p.error("--dim must split into --heads heads of even size, and --heads into --kv-heads groups")
    if args.steps <= args.warmup_steps:
        p.error("--steps must exceed --warmup-steps")
    if args.offload_gradients and args.mode != "torchao-cpu-offload-optimizer":
        p.error("--offload-gradients is the torchao mode's")
    if args.offload_gradients and args.grad_accum > 1:
        p.error("torchao's offload_gradients=True does not support gradient accumulation (--grad-accum 1)")
    if args.mode == "deepspeed-zero-offload" and args.param_dtype != "fp32":
        p.error("deepspeed keeps fp32 master weights on the host; its bf16 weights are the bf16 section's")
    if args.mode == "fsdp2-cpu-offload" and args.param_dtype != "fp32":
        p.error("fsdp2 keeps fp32 sharded weights; its bf16 compute is the MixedPrecisionPolicy")

    if args.device is None:
        args.device = "cuda"
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available (--device cpu runs --mode none at tiny shapes)")
    if not cuda and args.mode in ("torchao-cpu-offload-optimizer", "deepspeed-zero-offload"):
        raise SystemExit(f"{args.mode} needs CUDA")
    torch.manual_seed(0)
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    v_model = -(-args.vocab // args.vocab_multiple) * args.vocab_multiple
    shape = dict(vocab=v_model, dim=args.dim, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                 ffn=args.ffn, seq=args.seq, rope_theta=args.rope_theta, rope_scaling=args.rope_scaling,
                 tied=args.tied, fused_qkv=args.qkv == "fused", qkv_bias=args.qkv_bias,
                 # base.Llama checkpoints around each block itself in mode none; the offload modes wrap the blocks
                 activation_checkpointing=args.activation_checkpointing and args.mode == "none")
    with torch.device("meta"):
        model = base.Llama(**shape)
    n_params = (sum(q.numel() for q in model.parameters())
                - (v_model - args.vocab) * args.dim * (1 if args.tied else 2))
    n_flop = base.flop_params(model, args.vocab, v_model, args.dim, args.tied)
    accum = args.grad_accum
    clip = not args.no_clip
    extra: dict = {}

    if args.mode == "fsdp2-cpu-offload":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
        init_single_process_group(cuda)
        mesh = init_device_mesh(dev.type, (1,))
        wrap_blocks(model, args.activation_checkpointing, args.compile_mode if args.compile else None)
        fsdp = dict(mesh=mesh, reshard_after_forward=args.fsdp_reshard,
                    mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
                    offload_policy=CPUOffloadPolicy(pin_memory=cuda))  # pinning needs CUDA
        for block in model.blocks:
            fully_shard(block, **fsdp)
        fully_shard(model, **fsdp)
        if args.prefetch > 0:
            blocks = list(model.blocks)
            for i, block in enumerate(blocks):
                block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + args.prefetch])
                block.set_modules_to_backward_prefetch(blocks[max(0, i - args.prefetch):i][::-1])
        model.to_empty(device="cpu")  # the sharded fp32 weights on the host (FSDP2 pins them at its lazy init)
        if args.tied and model.head.weight is not model.embed.weight:
            raise RuntimeError("materializing the FSDP2 model untied the LM head from the embedding")
        init_weights(model, dev)
        set_rope_tables(model, args, dev)
        opt = torch.optim.AdamW(adamw_groups(list(model.parameters())), lr=base.LR, betas=base.BETAS,
                                **{args.cpu_adam: True})
        fwd = model

        def step(seqs):
            opt.zero_grad(set_to_none=True)
            total = torch.zeros((), device=dev)
            for i, micro in enumerate(seqs):
                last = i == accum - 1
                if accum > 1:
                    model.set_requires_gradient_sync(last)
                    if not args.fsdp_reshard:
                        model.set_reshard_after_backward(last)
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    loss = fwd(micro[:, :-1], micro[:, 1:])
                (loss / accum).backward()
                total += loss.detach()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), base.GRAD_CLIP)
            opt.step()
            return total / accum

        impl = "torch-fsdp2-cpuoffload-bf16mp" + ("-compile" if args.compile else "-eager")
        impl += f"-cpuadam_{args.cpu_adam}" + ("-reshard" if args.fsdp_reshard else "")
        impl += f"-prefetch{args.prefetch}" if args.prefetch else ""
        extra["offload"] = {"policy": "CPUOffloadPolicy", "pin_memory": cuda, "param_dtype": "bf16",
                            "reduce_dtype": "fp32", "reshard_after_forward": args.fsdp_reshard,
                            "cpu_adam": args.cpu_adam, "prefetch": args.prefetch,
                            "process_group": dist.get_backend()}
    elif args.mode == "deepspeed-zero-offload":
        import deepspeed
        init_single_process_group(cuda)
        wrap_blocks(model, args.activation_checkpointing, args.compile_mode if args.compile else None)
        model.to_empty(device=dev)  # fp32 on the GPU; DeepSpeed casts it to bf16 and keeps the fp32 master on the host
        if args.tied:
            model.head.weight = model.embed.weight
        init_weights(model, dev)
        config = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": accum,
                  "gradient_clipping": base.GRAD_CLIP if clip else 0.0, "bf16": {"enabled": True},
                  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                        "overlap_comm": True, "contiguous_gradients": True,
                                        "reduce_bucket_size": int(args.ds_bucket),
                                        "allgather_bucket_size": int(args.ds_bucket)},
                  "optimizer": {"type": "AdamW", "params": {"lr": base.LR, "betas": list(base.BETAS)}},
                  "steps_per_print": 10**9, "wall_clock_breakdown": False}
        engine, opt, _, _ = deepspeed.initialize(model=model, config=config,
                                                 model_parameters=adamw_groups(list(model.parameters())))
        set_rope_tables(engine.module, args, dev)  # fp32 again after DeepSpeed's cast to bf16

        def step(seqs):
            total = torch.zeros((), device=dev)
            for micro in seqs:
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    loss = engine(micro[:, :-1], micro[:, 1:])
                engine.backward(loss)  # scaled by 1 / gradient_accumulation_steps
                engine.step()  # the update at the last micro-batch
                total += loss.detach()
            return total / accum

        impl = "deepspeed-zero2-offload-bf16" + ("-compile" if args.compile else "-eager")
        extra["deepspeed_version"] = deepspeed.__version__
        extra["offload"] = {"zero_stage": 2, "offload_optimizer": "cpu", "pin_memory": True,
                            "optimizer": type(getattr(opt, "optimizer", opt)).__name__,
                            "bucket_elements": int(args.ds_bucket)}
    else:
        dtype = torch.bfloat16 if args.param_dtype == "bf16" else torch.float32
        model = model.to(dtype)  # still on meta: free
        model.to_empty(device=dev)
        if args.tied:  # to_empty makes a new parameter for each module that shares one: tie them again
            model.head.weight = model.embed.weight
        init_weights(model, dev)
        set_rope_tables(model, args, dev)  # fp32 tables whatever the weights' dtype
        if args.mode == "none":
            opt = base.make_optimizer(model, fused=cuda)
            fwd = torch.compile(model, mode=args.compile_mode) if args.compile else model
            impl = f"torch-clean-{'amp' if dtype == torch.float32 else 'bf16'}-nooffload"
        else:
            import torchao
            from torchao.optim import CPUOffloadOptimizer
            wrap_blocks(model, args.activation_checkpointing, args.compile_mode if args.compile else None)
            fwd = model
            params = list(model.parameters())
            sq_norm = torch.zeros((), device=dev, dtype=torch.float32)
            collect = [False]  # true on the last micro-batch: the gradients are then complete
            if clip:
                def add_sq_norm(param):
                    if collect[0] and param.grad is not None:
                        sq_norm.add_(torch.linalg.vector_norm(param.grad, dtype=torch.float32).square())
                for q in params:  # before torchao's hooks, which copy the gradient out (and may free it)
                    q.register_post_accumulate_grad_hook(add_sq_norm)
            opt = CPUOffloadOptimizer(adamw_groups(params), torch.optim.AdamW,
                                      offload_gradients=args.offload_gradients, fused=True, lr=base.LR,
                                      betas=base.BETAS)
            inv_clip_host = torch.ones((), dtype=torch.float32)
            inv_clip_dev = torch.ones((), dtype=torch.float32, device=dev)
            if clip:
                for inner in opt.optim_dict.values():
                    inner.grad_scale = inv_clip_host
                if opt.d_opt is not None:
                    opt.d_opt.grad_scale = inv_clip_dev
            extra["torchao_version"] = torchao.__version__
            extra["offload"] = {"optimizer": "torchao.optim.CPUOffloadOptimizer", "base": "torch.optim.AdamW",
                                "fused": True, "offload_gradients": args.offload_gradients,
                                "param_dtype": args.param_dtype, "minimal_size": opt.minimal_size,
                                "host_params": len(opt.optim_dict),
                                "device_params": sum(len(g["params"]) for g in opt.d_param_groups),
                                "clip": "grad_scale" if clip else None}
            impl = f"torchao-cpuoffloadopt-{'amp' if dtype == torch.float32 else 'bf16'}"
            impl += "-offloadgrads" if args.offload_gradients else ""

        def step(seqs):
            opt.zero_grad(set_to_none=True)
            total = torch.zeros((), device=dev)
            if args.mode != "none":
                sq_norm.zero_()
            for i, micro in enumerate(seqs):
                if args.mode != "none":
                    collect[0] = i == accum - 1
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    loss = fwd(micro[:, :-1], micro[:, 1:])
                (loss / accum).backward()
                total += loss.detach()
            if clip and args.mode == "none":
                torch.nn.utils.clip_grad_norm_(model.parameters(), base.GRAD_CLIP)
            elif clip:
                # torch.nn.utils.clip_grad_norm_'s factor, min(1, max_norm / (norm + 1e-6)), given to the fused AdamW
                # kernels as its inverse, by which they divide the gradients they read.
                factor = torch.clamp(base.GRAD_CLIP / (sq_norm.sqrt() + 1e-6), max=1.0)
                inv_clip_dev.copy_(1.0 / factor)
                inv_clip_host.copy_(inv_clip_dev)
            opt.step()
            return total / accum

        impl += "-compile" if args.compile else "-eager"
    impl += f"-{args.compile_mode}" if args.compile and args.compile_mode != "default" else ""
    impl += "-ac" if args.activation_checkpointing else ""
    impl += "" if clip else "-noclip"

    gen = torch.Generator(device=dev).manual_seed(1)
    times, walls, losses = [], [], []
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    for _ in range(args.steps):
        seqs = torch.randint(0, args.vocab, (accum, args.batch, args.seq + 1), device=dev, generator=gen)
        t0 = time.perf_counter()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step(seqs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            loss = step(seqs).item()
        walls.append((time.perf_counter() - t0) * 1e3)
        if not cuda:
            times.append(walls[-1])
        losses.append(float(loss))
    ms = statistics.median(times[args.warmup_steps:])
    tokens = accum * args.batch * args.seq
    flops = base.flops_per_step(n_flop, args.layers, args.dim, args.seq, tokens)
    result = {"impl": impl, "mode": args.mode, "torch_version": torch.__version__,
              "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
              "config": {"L": args.layers, "C": args.dim, "H": args.heads, "KV": args.kv_heads, "F": args.ffn,
                         "T": args.seq, "B": accum * args.batch, "V": args.vocab, "V_model": v_model,
                         "tied": args.tied, "qkv": args.qkv, "qkv_bias": args.qkv_bias,
                         "rope_theta": args.rope_theta, "rope_scaling": args.rope_scaling},
              "batch": args.batch, "grad_accum": accum, "params": n_params, "flop_params": n_flop,
              "flops_per_step": flops, "median_ms_per_step": ms,
              "median_wall_ms_per_step": statistics.median(walls[args.warmup_steps:]),
              "tokens_per_s": tokens / (ms / 1e3),
              "mfu": flops / (ms / 1e3) / PEAK_BF16_FLOPS if cuda else None,
              "peak_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None,
              "host_peak_rss_gib": host_peak_rss_gib(), "clip": base.GRAD_CLIP if clip else None,
              "first_loss": losses[0], "last_loss": losses[-1], **extra}
    print(json.dumps(result))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    if args.mode in ("fsdp2-cpu-offload", "deepspeed-zero-offload"):
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
