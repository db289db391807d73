"""CPU training benchmark of the reference GPT (tools/torch_gpt.py) on the bytes of a text corpus.

Trains the byte-level model (V = 256) with the specified recipe (AdamW, weight decay on matrices, clipping to 1.0,
constant learning rate) on random windows of the corpus and times every step with ``time.perf_counter``. The first
``--warmup-steps`` of the ``--steps`` steps are not timed. A step's time covers zero_grad, forward, backward,
clipping, the optimiser step and reading the loss; batch sampling is outside it.

Corpus (``--data``): a file, or a folder whose regular, non-symlink files are read in name order, skipping ``*.dat``
files and any file that contains a NUL byte; the bytes are concatenated as they are.

Prints a header line and one result line (median ms/step, tokens/s = B*T / median, first and last loss) and, with
``--json-out``, writes the same numbers as JSON. ``--compile`` tries ``torch.compile``; if that fails (e.g. no C
compiler on the machine) the failure is reported and the benchmark runs eagerly.

Example: ``python3 bench/training/torch_gpt_cpu.py --data /usr/share/games/fortunes --threads 2 --json-out out.json``
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools"))
import torch_gpt  # noqa: E402


def load_corpus(path: str) -> np.ndarray:
    """Return the corpus bytes of a file or folder (see the module docstring) as a uint8 array."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8)
    chunks = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.endswith(".dat") or not stat.S_ISREG(os.lstat(full).st_mode):
            continue
        with open(full, "rb") as f:
            data = f.read()
        if b"\0" not in data:
            chunks.append(data)
    return np.frombuffer(b"".join(chunks), dtype=np.uint8)


def sample_batch(corpus: np.ndarray, rng: np.random.Generator, B: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """B random windows of T+1 bytes; return (tokens, targets) = (window[:-1], window[1:]) as int64 tensors."""
    starts = rng.integers(0, len(corpus) - T, size=B)
    windows = np.stack([corpus[s : s + T + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(windows[:, :-1].copy()), torch.from_numpy(windows[:, 1:].copy())


def try_compile(model: torch_gpt.GPT, tokens: torch.Tensor, targets: torch.Tensor):
    """Compile ``model`` and run one forward/backward to trigger compilation.

    Returns ``(module_to_train, status)``: the compiled module and ``"ok"``, or the eager model and
    ``"failed: <error>"``. Gradients of the trial run are left for the first step's zero_grad to discard.
    """
    try:
        compiled = torch.compile(model)
        _, loss = compiled(tokens, targets)
        loss.backward()
        return compiled, "ok"
    except Exception as e:  # noqa: BLE001 - any compiler/toolchain failure falls back to eager
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return model, f"failed: {type(e).__name__}: {first_line}"[:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="corpus file or folder")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads (default: all)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60, help="training steps in all, warm-up included")
    parser.add_argument("--warmup-steps", type=int, default=10, help="first steps, not timed")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sdpa", action=argparse.BooleanOptionalAction, default=True,
                        help="use F.scaled_dot_product_attention (default on; --no-sdpa for the explicit math)")
    parser.add_argument("--compile", action="store_true", help="try torch.compile")
    parser.add_argument("--json-out", help="write the results as JSON to this file")
    args = parser.parse_args()
    if args.steps <= args.warmup_steps:
        parser.error("--steps must exceed --warmup-steps")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    corpus = load_corpus(args.data)
    if len(corpus) <= args.seq:
        sys.exit(f"corpus at {args.data} has {len(corpus)} bytes, fewer than --seq + 1")

    cfg = torch_gpt.GPTConfig(V=256, L=args.layers, C=args.dim, H=args.heads, T=args.seq)
    model = torch_gpt.GPT(cfg, use_sdpa=args.sdpa)
    torch_gpt.init_params(model)
    optimizer = torch_gpt.make_optimizer(model, args.lr)
    n_params = sum(p.numel() for p in model.parameters())

    compile_status = "off"
    if args.compile:
        trial_rng = np.random.default_rng(args.seed + 1)  # keeps the training batches those of an eager run
        model, compile_status = try_compile(model, *sample_batch(corpus, trial_rng, args.batch, args.seq))
        print(f"torch.compile: {compile_status}", file=sys.stderr)

    losses, times = [], []
    for _ in range(args.steps):
        tokens, targets = sample_batch(corpus, rng, args.batch, args.seq)
        t0 = time.perf_counter()
        loss, _ = torch_gpt.train_step(model, optimizer, tokens, targets)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)

    timed = times[args.warmup_steps :]
    median_ms = statistics.median(timed) * 1e3
    tokens_per_s = args.batch * args.seq / (median_ms / 1e3)
    result = {
        "bench": "torch_gpt_cpu",
        "torch_version": torch.__version__,
        "threads": args.threads,
        "config": {"V": 256, "L": args.layers, "C": args.dim, "H": args.heads, "T": args.seq, "B": args.batch},
        "params": n_params,
        "data": os.path.abspath(args.data),
        "data_bytes": int(len(corpus)),
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "lr": args.lr,
        "sdpa": args.sdpa,
        "compile": compile_status,
        "median_ms_per_step": median_ms,
        "min_ms_per_step": min(timed) * 1e3,
        "mean_ms_per_step": statistics.fmean(timed) * 1e3,
        "tokens_per_s": tokens_per_s,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    print(f"{'impl':<14}{'thr':>4}{'L':>3}{'C':>5}{'H':>3}{'T':>5}{'B':>4}{'steps':>6}"
          f"{'ms/step':>10}{'tok/s':>10}{'loss0':>8}{'lossN':>8}  compile")
    print(f"{'torch-cpu':<14}{args.threads:>4}{args.layers:>3}{args.dim:>5}{args.heads:>3}{args.seq:>5}"
          f"{args.batch:>4}{args.steps:>6}{median_ms:>10.2f}{tokens_per_s:>10.0f}{losses[0]:>8.4f}{losses[-1]:>8.4f}"
          f"  {compile_status}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
