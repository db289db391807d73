"""GPU training benchmark of a Llama-family model in PyTorch, the side-by-side for tiertrain's CUDA backend on Llama
shapes: random-token batches, AdamW with clipping, one GPU.

Two implementations of the same model. ``--impl clean`` (the default) is the Llama written out in this file in plain
PyTorch: token embedding; L blocks of [RMSNorm -> attention (fused qkv or separate q/k/v projections, without bias
unless ``--qkv-bias``, as Qwen2 has it; rotary embeddings; grouped-query attention through
``scaled_dot_product_attention(is_causal=True, enable_gqa=True)``) -> output projection] and [RMSNorm -> SwiGLU MLP
(gate, up, down, no bias)], each added to the residual stream; a final RMSNorm and the LM head (tied to the embedding
with ``--tied``, the default, as Llama 3.2 1B has it; ``--untied`` for a head of its own). Weights are drawn from
N(0, 0.02), biases zero, RMSNorm gains one. ``--impl hf`` is ``transformers.LlamaForCausalLM`` with SDPA attention
on the same shapes (with ``--qkv-bias``, attention_bias and the o_proj bias it also adds taken off again); its logits
go through the same ``F.cross_entropy`` against the same targets (labels are not passed, so transformers' own shift
does not apply).

The step is what a PyTorch user runs: bf16 autocast (``--mode fp32``: no autocast, TF32 off), fused AdamW (lr 3e-4,
betas 0.9/0.95, weight decay 0.1 on the 2-D weights only), gradient clipping at 1.0, optionally ``--grad-accum N``
micro-batches of ``--batch`` sequences a step, ``--compile`` (torch.compile, ``--compile-mode`` passed through) and
``--activation-checkpointing`` (torch.utils.checkpoint around each block, non-reentrant; transformers' gradient
checkpointing for ``--impl hf``). Tokens are drawn uniformly from the data vocabulary ``--vocab`` on the device each
step, outside the timed region. The model's vocabulary is not padded unless ``--vocab-multiple`` asks (Llama 3's 128256
is already a multiple of 128); FLOPs and parameter counts use the data vocabulary.

Defaults are the Llama-3.2-1B shape (dim 2048, 16 layers, 32 query heads, 8 KV heads, ffn 8192, vocab 128256, tied
embeddings, RoPE theta 500000; ``--rope-scaling llama3`` adds Llama 3's frequency scaling with factor 32, low 1,
high 4 and original context 8192, as Llama 3.2 ships it) at seq 2048, batch 4.

FLOPs of a step: (6 N + 12 L T C) x tokens, tokens = grad_accum x B x T. N counts the weight matrices that multiply
activations: q, k, v, o, gate, up, down of every block and the LM head (over the data vocabulary). The embedding
table is a lookup and is left out when untied; when tied the shared matrix is counted once, as the LM head. Norm gains
and qkv biases are vectors and not in N. 12 L T C is the attention's score and value products (forward and backward,
C = heads x head_dim), with no causal discount, as bench/training/torch_gpt_gpu.py counts them. Step times are
CUDA-event timed (perf_counter on CPU), median over the steps after ``--warmup-steps``; tokens/s = tokens / median;
MFU against 989 TFLOP/s (H100/H200 dense bf16) or 67 TFLOP/s (fp32 non-tensor-core). Prints one JSON line and writes
the same JSON with ``--json-out``; peak memory is torch.cuda.max_memory_allocated.

Without CUDA, ``--device cpu`` runs the same code with plain (non-fused) AdamW, for a smoke test at tiny shapes:

  python3 bench/llama/torch_llama_gpu.py --device cpu --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 \\
      --vocab 512 --seq 32 --batch 2 --steps 3 --warmup-steps 1
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

LR = 3e-4
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
INIT_STD = 0.02
NORM_EPS = 1e-5
# Llama 3's RoPE frequency scaling as Llama 3.1/3.2 configure it.
LLAMA3_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}


def _sdpa_has_enable_gqa() -> bool:
    """Whether this torch's scaled_dot_product_attention takes ``enable_gqa`` (torch 2.5 and later)."""
    q, kv = torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 4)
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except TypeError:
        return False
    return True


SDPA_GQA = _sdpa_has_enable_gqa()


def rope_inverse_frequencies(head_dim: int, theta: float, scaling: str) -> torch.Tensor:
    """Inverse frequencies theta^(-2i/head_dim), i < head_dim/2, of the rotary embedding (fp32).

    With ``scaling == "llama3"`` they are rescaled as Llama 3 defines it: a frequency whose wavelength 2 pi / f is
    shorter than original_context / high_freq_factor is kept, one whose wavelength is longer than
    original_context / low_freq_factor is divided by ``factor``, and those between are interpolated linearly in
    s = (original_context / wavelength - low) / (high - low) between the two: (1 - s) f / factor + s f.
    """
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling == "llama3":
        factor, low, high, context = (LLAMA3_SCALING[k] for k in
                                      ("factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"))
        wavelength = 2 * math.pi / inv
        s = ((context / wavelength - low) / (high - low)).clamp(0.0, 1.0)
        # s = 1 for the short wavelengths (kept), 0 for the long ones (divided by factor).
        inv = (1 - s) * inv / factor + s * inv
    elif scaling != "none":
        raise ValueError(f"unknown RoPE scaling {scaling!r}")
    return inv.float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, heads, T, head_dim) by position, in the half-split layout Llama checkpoints use: dimension i
    pairs with i + head_dim/2, and the pair (a, b) becomes (a cos - b sin, b cos + a sin)."""
    a, b = x.chunk(2, dim=-1)
    rotated = torch.cat((-b, a), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) times a learned gain, computed in fp32 and returned in the input's dtype."""

    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    """Causal grouped-query self-attention with rotary embeddings: ``heads`` query heads share ``kv_heads`` key and
    value heads (heads / kv_heads queries a group)."""

    def __init__(self, dim: int, heads: int, kv_heads: int, fused_qkv: bool, qkv_bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        q_out, kv_out = heads * self.head_dim, kv_heads * self.head_dim
        self.split = (q_out, kv_out, kv_out)
        if fused_qkv:
            self.qkv = nn.Linear(dim, q_out + 2 * kv_out, bias=qkv_bias)
        else:
            self.qkv = None
            self.q = nn.Linear(dim, q_out, bias=qkv_bias)
            self.k = nn.Linear(dim, kv_out, bias=qkv_bias)
            self.v = nn.Linear(dim, kv_out, bias=qkv_bias)
        self.o = nn.Linear(q_out, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        if self.qkv is not None:
            q, k, v = self.qkv(x).split(self.split, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.kv_heads == self.heads:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif SDPA_GQA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # torch before 2.5: give every query head its own copy of its group's keys and values
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, dim: int, ffn: int):
        super().__init__()
        self.gate = nn.Linear(dim, ffn, bias=False)
        self.up = nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int, fused_qkv: bool, qkv_bias: bool):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads, fused_qkv, qkv_bias)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, ffn)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """The clean Llama: embedding, blocks, final norm, LM head; ``forward(x, y)`` returns the mean cross-entropy of
    the next-token logits of ``x`` (B, T) against ``y`` (B, T)."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, kv_heads: int, ffn: int, seq: int,
                 rope_theta: float, rope_scaling: str, tied: bool, fused_qkv: bool, qkv_bias: bool,
                 activation_checkpointing: bool = False):
        super().__init__()
        self.activation_checkpointing = activation_checkpointing
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, ffn, fused_qkv, qkv_bias) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight
        angles = torch.outer(torch.arange(seq, dtype=torch.float32),
                             rope_inverse_frequencies(dim // heads, rope_theta, rope_scaling))
        angles = torch.cat((angles, angles), dim=-1)  # (T, head_dim): the half-split layout's pairs share an angle
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Weights (embedding included) from N(0, INIT_STD), biases zero, RMSNorm gains one."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, INIT_STD)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, RMSNorm):
                module.weight.fill_(1.0)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        h = self.embed(x)
        for block in self.blocks:
            if self.activation_checkpointing and torch.is_grad_enabled():
                h = checkpoint(block, h, cos, sin, use_reentrant=False)
            else:
                h = block(h, cos, sin)
        logits = self.head(self.norm(h))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))


class HFLlamaLoss(nn.Module):
    """``transformers.LlamaForCausalLM`` (SDPA attention) with the same loss as the clean model: its logits of ``x``
    against ``y`` through ``F.cross_entropy``."""

    def __init__(self, vocab: int, dim: int, layers: int, heads: int, kv_heads: int, ffn: int, seq: int,
                 rope_theta: float, rope_scaling: str, tied: bool, qkv_bias: bool,
                 activation_checkpointing: bool = False):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        rope = {"rope_type": "default"} if rope_scaling == "none" else {"rope_type": "llama3", **LLAMA3_SCALING}
        shape = dict(vocab_size=vocab, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads,
                     num_key_value_heads=kv_heads, intermediate_size=ffn, max_position_embeddings=seq,
                     rms_norm_eps=NORM_EPS, initializer_range=INIT_STD, tie_word_embeddings=tied,
                     attention_bias=qkv_bias, hidden_act="silu", use_cache=False, attn_implementation="sdpa")
        if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:  # transformers 5
            config = LlamaConfig(**shape, rope_parameters={**rope, "rope_theta": rope_theta})
        else:  # transformers 4
            config = LlamaConfig(**shape, rope_theta=rope_theta,
                                 rope_scaling=None if rope_scaling == "none" else rope)
        self.model = LlamaForCausalLM(config)
        if self.model.config._attn_implementation != "sdpa":
            raise RuntimeError(f"transformers chose attention {self.model.config._attn_implementation!r}, not sdpa")
        if qkv_bias:
            # Llama's attention_bias also gives o_proj a bias; Qwen2 (and the clean model) bias q, k and v only.
            for layer in self.model.model.layers:
                layer.self_attn.o_proj.register_parameter("bias", None)
        if activation_checkpointing:
            kwargs = {"use_reentrant": False}
            if hasattr(self.model, "activation_checkpointing_enable"):  # transformers 5's name
                self.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self.model.train()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))


def flop_params(model: nn.Module, vocab: int, v_model: int, dim: int, tied: bool) -> int:
    """N of the FLOP count: the 2-D parameters (each shared one once), less the embedding table when untied and less
    the LM head's padding rows beyond the data vocabulary."""
    n = sum(p.numel() for p in model.parameters() if p.ndim == 2)
    if not tied:
        n -= v_model * dim
    return n - (v_model - vocab) * dim


def flops_per_step(n: int, L: int, C: int, T: int, tokens: int) -> float:
    """Training FLOPs of one step: 6 N a token for the weight matrices plus 12 L T C a token for attention (no causal
    discount)."""
    return (6 * n + 12 * L * T * C) * tokens


def make_optimizer(model: nn.Module, fused: bool) -> torch.optim.AdamW:
    """AdamW (LR, BETAS) with WEIGHT_DECAY on the 2-D weights and none on the gains and biases."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, fused=fused or None)


def add_model_args(p: argparse.ArgumentParser, layers: int, dim: int, ffn: int, batch: int, tied: bool) -> None:
    """The model's shape and options, and the step's batch, as both Llama baselines take them (this script's and
    torch_offload_gpu.py's); the defaults are the shape each measures (Llama-3.2-1B here, Llama-3-8B there)."""
    p.add_argument("--layers", type=int, default=layers)
    p.add_argument("--dim", type=int, default=dim)
    p.add_argument("--heads", type=int, default=32, help="query heads")
    p.add_argument("--kv-heads", type=int, default=8, help="key/value heads (grouped-query attention)")
    p.add_argument("--ffn", type=int, default=ffn, help="SwiGLU intermediate size")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--batch", type=int, default=batch, help="sequences a micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches a step")
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--vocab-multiple", type=int, default=1,
                   help="pad the model's vocabulary (embedding, LM head) up to a multiple of this")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--rope-scaling", choices=["none", "llama3"], default="none",
                   help="llama3: factor 32, low 1, high 4, original context 8192 (Llama 3.1/3.2)")
    tie = p.add_mutually_exclusive_group()
    tie.add_argument("--tied", dest="tied", action="store_true", help="LM head shares the embedding")
    tie.add_argument("--untied", dest="tied", action="store_false", help="LM head of its own")
    p.set_defaults(tied=tied)
    p.add_argument("--qkv", choices=["fused", "separate"], default="fused",
                   help="one qkv projection or three (clean Llama; transformers' is separate)")
    p.add_argument("--qkv-bias", action="store_true", help="biases on q, k, v (Qwen2 style)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["clean", "hf"], default="clean",
                   help="clean: the Llama in this file; hf: transformers.LlamaForCausalLM (sdpa)")
    add_model_args(p, layers=16, dim=2048, ffn=8192, batch=4, tied=True)  # Llama-3.2-1B (tied)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--mode", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--compile-mode", default="default", help="passed to torch.compile(mode=...)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each block in the backward pass (torch.utils.checkpoint, non-reentrant)")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when available, else cpu")
    p.add_argument("--json-out")
    p.add_argument("--profile-out", help="after timing, profile 3 steps and write the top CUDA kernels here (CUDA)")
    args = p.parse_args()
    if args.dim % args.heads or args.heads % args.kv_heads or (args.dim // args.heads) % 2:
        p.error("--dim must split into --heads heads of even size, and --heads into --kv-heads groups")
    if args.steps <= args.warmup_steps:
        p.error("--steps must exceed --warmup-steps")

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
        if args.device == "cpu":
            print("CUDA not available: running on the CPU (use tiny shapes)", file=sys.stderr)
    cuda = args.device == "cuda"
    torch.manual_seed(0)
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    v_model = -(-args.vocab // args.vocab_multiple) * args.vocab_multiple
    shape = dict(vocab=v_model, dim=args.dim, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                 ffn=args.ffn, seq=args.seq, rope_theta=args.rope_theta, rope_scaling=args.rope_scaling,
                 tied=args.tied, qkv_bias=args.qkv_bias, activation_checkpointing=args.activation_checkpointing)
    if args.impl == "clean":
        model = Llama(**shape, fused_qkv=args.qkv == "fused")
    else:
        model = HFLlamaLoss(**shape)
    model = model.to(dev)
    # Parameters of the unpadded model (the padding rows of the embedding and head are not the model's).
    n_params = (sum(q.numel() for q in model.parameters())
                - (v_model - args.vocab) * args.dim * (1 if args.tied else 2))
    n_flop = flop_params(model, args.vocab, v_model, args.dim, args.tied)
    opt = make_optimizer(model, fused=cuda)
    fwd = torch.compile(model, mode=args.compile_mode) if args.compile else model
    accum = args.grad_accum

    def step(seqs):
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=dev)
        for micro in seqs:
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.mode == "bf16"):
                loss = fwd(micro[:, :-1], micro[:, 1:])
            (loss / accum).backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        return total / accum

    gen = torch.Generator(device=dev).manual_seed(1)
    times, losses = [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.steps):
        seqs = torch.randint(0, args.vocab, (accum, args.batch, args.seq + 1), device=dev, generator=gen)
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step(seqs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            loss = step(seqs)
            loss = loss.item()
            times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss))
    if args.profile_out and cuda:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(torch.randint(0, args.vocab, (accum, args.batch, args.seq + 1), device=dev, generator=gen))
            torch.cuda.synchronize()
        with open(args.profile_out, "w") as f:
            f.write("3 steps\n")
            f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=45, max_name_column_width=90))
    ms = statistics.median(times[args.warmup_steps:])
    tokens = accum * args.batch * args.seq
    flops = flops_per_step(n_flop, args.layers, args.dim, args.seq, tokens)
    peak_flops = 989e12 if args.mode == "bf16" else 67e12
    impl = f"torch-{args.impl}-{args.mode}" + ("-compile" if args.compile else "-eager")
    impl += f"-{args.compile_mode}" if args.compile and args.compile_mode != "default" else ""
    impl += "-ac" if args.activation_checkpointing else ""
    result = {"impl": impl, "torch_version": torch.__version__,
              "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
              "config": {"L": args.layers, "C": args.dim, "H": args.heads, "KV": args.kv_heads, "F": args.ffn,
                         "T": args.seq, "B": accum * args.batch, "V": args.vocab, "V_model": v_model,
                         "tied": args.tied, "qkv": "separate" if args.impl == "hf" else args.qkv,
                         "qkv_bias": args.qkv_bias, "rope_theta": args.rope_theta,
                         "rope_scaling": args.rope_scaling},
              "batch": args.batch, "grad_accum": accum, "params": n_params, "flop_params": n_flop,
              "flops_per_step": flops, "median_ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3),
              "mfu": flops / (ms / 1e3) / peak_flops if cuda else None,
              "peak_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if cuda else None,
              "first_loss": losses[0], "last_loss": losses[-1]}
    if args.impl == "hf":
        import transformers
        result["transformers_version"] = transformers.__version__
    print(json.dumps(result))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
