"""Write the PyTorch golden references of the GPT model: tests/golden/gpt_golden.ttf (float32) and gpt_golden_f64.ttf.

Regenerate with ``python3 tools/make_golden.py`` from the repository root.

The model, initialisation and optimiser are those of tools/torch_gpt.py, run on the CPU with deterministic
algorithms and the plain (non-foreach, non-fused) AdamW and gradient clipping. Both files hold:

* ``tokens``, ``targets`` [B, T] i32: ``targets`` is ``tokens`` shifted by one, both cut from one random byte
  sequence of length T+1 per row;
* ``param/<name>``: the initial parameters (canonical names and order, see ``torch_gpt.param_names``);
* ``logits`` [B, T, V] and ``loss`` [] of the first forward pass, ``grad/<name>`` the gradients of its backward pass
  (before clipping);
* ``step_losses`` [STEPS] and ``step_grad_norms`` [STEPS]: for each of STEPS training steps on the same batch
  (zero_grad, forward, backward, clip to 1.0, AdamW step at constant lr), the loss before the update and the global
  gradient norm before clipping (``step_losses[0] == loss``);
* ``final/<name>``: the parameters after the last step.

The float64 file starts from the float32 initial parameters cast up, so both runs share the same starting point.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import OrderedDict

import numpy as np
import torch

import tensorfile
import torch_gpt

SEED = 1234
CFG = torch_gpt.GPTConfig(V=256, L=2, C=64, H=4, T=32)
B = 4
LR = 1e-3
STEPS = 10
COMMAND = "python3 tools/make_golden.py"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random byte rows of length T+1 per batch row; return (tokens, targets) = (row[:-1], row[1:])."""
    seq = torch.randint(0, CFG.V, (B, CFG.T + 1), generator=generator, dtype=torch.int64)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def run(
    init: OrderedDict[str, torch.Tensor], tokens: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype
) -> OrderedDict[str, np.ndarray]:
    """Train a fresh model in ``dtype`` from the ``init`` parameters; return every golden tensor, in file order."""
    model = torch_gpt.GPT(CFG).to(dtype)
    params = torch_gpt.named_params(model)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(init[name].to(dtype))
    optimizer = torch_gpt.make_optimizer(model, LR, foreach=False, fused=False)

    out: OrderedDict[str, np.ndarray] = OrderedDict()
    out["tokens"] = tokens.numpy().astype(np.int32)
    out["targets"] = targets.numpy().astype(np.int32)
    for name, p in params.items():
        out["param/" + name] = p.detach().numpy().copy()

    step_losses, step_grad_norms = [], []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        logits, loss = model(tokens, targets)
        loss.backward()
        if step == 0:
            out["logits"] = logits.detach().numpy().copy()
            out["loss"] = loss.detach().numpy().copy()
            for name, p in params.items():
                out["grad/" + name] = p.grad.numpy().copy()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), torch_gpt.GRAD_CLIP, foreach=False)
        optimizer.step()
        step_losses.append(loss.item())
        step_grad_norms.append(grad_norm.item())

    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    out["step_losses"] = np.array(step_losses, dtype=np_dtype)
    out["step_grad_norms"] = np.array(step_grad_norms, dtype=np_dtype)
    for name, p in params.items():
        out["final/" + name] = p.detach().numpy().copy()
    return out


def meta_for(dtype_name: str) -> dict:
    """The meta object stored in a golden file."""
    return {
        "what": "PyTorch golden reference of the tiertrain GPT (tools/torch_gpt.py)",
        "dtype": dtype_name,
        "config": {"V": CFG.V, "L": CFG.L, "C": CFG.C, "H": CFG.H, "T": CFG.T, "B": B},
        "optimizer": {
            "name": "AdamW",
            "lr": LR,
            "lr_schedule": "constant",
            "beta1": torch_gpt.BETAS[0],
            "beta2": torch_gpt.BETAS[1],
            "eps": torch_gpt.ADAM_EPS,
            "weight_decay": torch_gpt.WEIGHT_DECAY,
            "weight_decay_on": "params with ndim >= 2",
            "grad_clip": torch_gpt.GRAD_CLIP,
        },
        "steps": STEPS,
        "seed": SEED,
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "command": COMMAND,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=os.path.join(REPO_ROOT, "tests", "golden"), help="output folder")
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    init_model = torch_gpt.GPT(CFG)
    torch_gpt.init_params(init_model)
    init = OrderedDict((n, p.detach().clone()) for n, p in torch_gpt.named_params(init_model).items())
    tokens, targets = make_batch(torch.Generator().manual_seed(SEED + 1))

    os.makedirs(args.out_dir, exist_ok=True)
    for dtype, dtype_name, file_name in (
        (torch.float32, "f32", "gpt_golden.ttf"),
        (torch.float64, "f64", "gpt_golden_f64.ttf"),
    ):
        tensors = run(init, tokens, targets, dtype)
        path = os.path.join(args.out_dir, file_name)
        tensorfile.write(path, tensors, meta_for(dtype_name))
        losses = tensors["step_losses"]
        norms = tensors["step_grad_norms"]
        print(
            f"{os.path.relpath(path)}: {os.path.getsize(path)} bytes, {len(tensors)} tensors, {dtype_name}; "
            f"loss {float(tensors['loss']):.6f}, step losses {float(losses[0]):.6f} -> {float(losses[-1]):.6f}, "
            f"grad norms {float(norms[0]):.4f} -> {float(norms[-1]):.4f}"
        )
    print(f"torch {torch.__version__}, {sum(p.numel() for p in init.values())} parameters, seed {SEED}")


if __name__ == "__main__":
    sys.exit(main())
