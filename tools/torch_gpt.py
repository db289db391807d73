"""Reference GPT in PyTorch, written to the same specification as the tiertrain C++ model.

Model (vocabulary V, layers L, width C, heads H, context T, head size hs = C / H):

* ``x = wte[tokens] + wpe[positions]`` with ``wte`` [V, C] and ``wpe`` [T, C].
* L pre-LN blocks::

      x = x + attn.proj(attention(ln1(x)))
      x = x + mlp.proj(gelu_tanh(mlp.fc(ln2(x))))

  LayerNorms have eps 1e-5, a weight and a bias. ``attn.qkv`` is Linear(C, 3C) whose output per token is laid out
  ``[q (C) | k (C) | v (C)]``; head h uses columns ``h*hs:(h+1)*hs`` of each. Attention is causal softmax attention
  with scale ``1/sqrt(hs)``, computed explicitly (``(q @ k^T) * scale``, ``-inf`` above the diagonal, softmax,
  ``@ v``) unless ``use_sdpa`` asks for ``F.scaled_dot_product_attention``. ``attn.proj`` is Linear(C, C), ``mlp.fc``
  Linear(C, 4C), ``mlp.proj`` Linear(4C, C), all with bias; GELU is the tanh approximation.
* ``logits = lnf(x) @ wte^T`` (head tied to ``wte``, no bias); the loss is the cross-entropy averaged over all B*T
  positions.

Parameter names (the tensor names of .ttf files and of the C++ side) and their order are given by
:func:`param_names`; weights are stored [out, in] as ``torch.nn.Linear`` stores them.

Initialisation (:func:`init_params`): every Linear weight, ``wte`` and ``wpe`` ~ N(0, 0.02), except the two
residual projections ``attn.proj.w`` and ``mlp.proj.w`` ~ N(0, 0.02 / sqrt(2L)); biases 0; LayerNorm weights 1 and
biases 0. Parameters are drawn in :func:`param_names` order from the global torch RNG.

Optimiser (:func:`make_optimizer`, :func:`train_step`): AdamW with betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on
the parameters with ndim >= 2 (``wte``, ``wpe`` and the four matrices of each layer) and 0 on biases and LayerNorm
parameters; gradients are clipped to a global norm of 1.0 before each step.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5
INIT_STD = 0.02
BETAS = (0.9, 0.95)
ADAM_EPS = 1e-8
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0


@dataclass(frozen=True)
class GPTConfig:
    """Model shape: vocabulary V, layers L, width C, heads H, maximum sequence length T."""

    V: int = 256
    L: int = 2
    C: int = 64
    H: int = 4
    T: int = 32

    def __post_init__(self) -> None:
        if self.C % self.H:
            raise ValueError(f"dim C={self.C} is not a multiple of heads H={self.H}")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused qkv projection and an output projection."""

    def __init__(self, cfg: GPTConfig, use_sdpa: bool) -> None:
        super().__init__()
        self.n_head = cfg.H
        self.qkv = nn.Linear(cfg.C, 3 * cfg.C)
        self.proj = nn.Linear(cfg.C, cfg.C)
        self.use_sdpa = use_sdpa
        mask = torch.triu(torch.ones(cfg.T, cfg.T, dtype=torch.bool), diagonal=1)
        self.register_buffer("future_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        # [B, T, C] -> [B, H, T, hs]: head h takes columns h*hs:(h+1)*hs.
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.future_mask[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    """Two-layer feed-forward network C -> 4C -> C with tanh-approximated GELU."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.C, 4 * cfg.C)
        self.proj = nn.Linear(4 * cfg.C, cfg.C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-LN transformer block."""

    def __init__(self, cfg: GPTConfig, use_sdpa: bool) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.C, eps=LN_EPS)
        self.attn = CausalSelfAttention(cfg, use_sdpa)
        self.ln2 = nn.LayerNorm(cfg.C, eps=LN_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """GPT language model; ``forward(tokens, targets)`` returns ``(logits, loss)`` (loss None without targets).

    The constructor leaves PyTorch's default initialisation in place; call :func:`init_params` for the specified one.
    """

    def __init__(self, cfg: GPTConfig, use_sdpa: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.V, cfg.C)
        self.wpe = nn.Embedding(cfg.T, cfg.C)
        self.h = nn.ModuleList(Block(cfg, use_sdpa) for _ in range(cfg.L))
        self.lnf = nn.LayerNorm(cfg.C, eps=LN_EPS)

    def forward(
        self, tokens: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = tokens.shape
        if T > self.cfg.T:
            raise ValueError(f"sequence length {T} exceeds the model's T={self.cfg.T}")
        pos = torch.arange(T, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.lnf(x), self.wte.weight)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T).long())
        return logits, loss


def param_names(cfg: GPTConfig) -> list[str]:
    """The parameter names in their canonical order."""
    names = ["wte", "wpe"]
    for l in range(cfg.L):
        p = f"h.{l}."
        names += [
            p + "ln1.w", p + "ln1.b",
            p + "attn.qkv.w", p + "attn.qkv.b",
            p + "attn.proj.w", p + "attn.proj.b",
            p + "ln2.w", p + "ln2.b",
            p + "mlp.fc.w", p + "mlp.fc.b",
            p + "mlp.proj.w", p + "mlp.proj.b",
        ]  # fmt: skip
    return names + ["lnf.w", "lnf.b"]


def named_params(model: GPT) -> OrderedDict[str, nn.Parameter]:
    """Map each canonical parameter name to the model's Parameter, in canonical order."""
    out: OrderedDict[str, nn.Parameter] = OrderedDict()
    out["wte"] = model.wte.weight
    out["wpe"] = model.wpe.weight
    for l, block in enumerate(model.h):
        p = f"h.{l}."
        for name, module in (
            ("ln1", block.ln1), ("attn.qkv", block.attn.qkv), ("attn.proj", block.attn.proj),
            ("ln2", block.ln2), ("mlp.fc", block.mlp.fc), ("mlp.proj", block.mlp.proj),
        ):  # fmt: skip
            out[p + name + ".w"] = module.weight
            out[p + name + ".b"] = module.bias
    out["lnf.w"] = model.lnf.weight
    out["lnf.b"] = model.lnf.bias
    assert list(out) == param_names(model.cfg)
    assert len(out) == len(list(model.parameters())), "a parameter is missing from the canonical list"
    return out


@torch.no_grad()
def init_params(model: GPT) -> None:
    """Apply the specified initialisation, drawing from the global torch RNG in canonical parameter order."""
    residual_std = INIT_STD / math.sqrt(2 * model.cfg.L)
    for name, p in named_params(model).items():
        if name.endswith(("attn.proj.w", "mlp.proj.w")):
            p.normal_(0.0, residual_std)
        elif p.ndim >= 2:  # wte, wpe, qkv and fc weights
            p.normal_(0.0, INIT_STD)
        elif name.endswith(".b"):
            p.zero_()
        else:  # LayerNorm weights
            p.fill_(1.0)


def make_optimizer(
    model: GPT, lr: float, foreach: bool | None = None, fused: bool | None = None
) -> torch.optim.AdamW:
    """AdamW with the specified hyper-parameters and weight decay only on the parameters with ndim >= 2.

    The first param group holds the decayed parameters, the second the others, each in canonical order. The golden
    path passes ``foreach=False, fused=False`` for the plain per-parameter loop.
    """
    params = named_params(model).values()
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, eps=ADAM_EPS, foreach=foreach, fused=fused)


def train_step(
    model: GPT, optimizer: torch.optim.Optimizer, tokens: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One training step: zero_grad, forward, backward, clip to ``GRAD_CLIP``, optimiser step.

    Returns ``(loss, grad_norm)`` as detached tensors; ``loss`` is computed before the update and ``grad_norm`` is
    the global gradient norm before clipping.
    """
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(tokens, targets)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    optimizer.step()
    return loss.detach(), grad_norm.detach()
