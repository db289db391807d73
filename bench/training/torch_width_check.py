"""The PyTorch side of bench/training/width_check.sh: the reference GPT (tools/torch_gpt.py, GPT-2 initialisation, AdamW with
tiertrain's betas, eps and weight decay) trained for a few steps on the CPU at one width, L2 T128 B4, byte tokens of
a text file, linear warm-up over 3 steps, no gradient clip; prints the loss and gradient norm of each step. The
batches are not tiertrain's (its sampler is its own), so compare the trend, not the digits.

    python3 bench/training/torch_width_check.py --dim 4096 --lr 1e-4 --steps 4
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
import torch_gpt  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=4096)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--data", default="/usr/share/games/fortunes/fortunes")
    args = p.parse_args()
    torch.manual_seed(0)
    cfg = torch_gpt.GPTConfig(V=256, L=args.layers, C=args.dim, H=args.dim // 128, T=128)
    model = torch_gpt.GPT(cfg)
    torch_gpt.init_params(model)
    opt = torch_gpt.make_optimizer(model, args.lr)
    tokens = torch.tensor(list(open(args.data, "rb").read()[:200000]), dtype=torch.long)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup)
        starts = torch.randint(0, len(tokens) - cfg.T - 2, (4,), generator=gen)
        x = torch.stack([tokens[s:s + cfg.T] for s in starts])
        y = torch.stack([tokens[s + 1:s + cfg.T + 1] for s in starts])
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        opt.step()
        print(f"d{args.dim} lr {args.lr:g} step {step + 1} loss {loss.item():.4f} norm {norm.item():.2f}", flush=True)


if __name__ == "__main__":
    main()
