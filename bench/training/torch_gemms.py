"""The products of a Llama block and its head timed in PyTorch, the way its compiled training step runs them: bf16
operands, bf16 results (the weight gradient too, which autocast's backward then casts to the fp32 parameter's
gradient), through torch.mm (cuBLAS with PyTorch's settings). The counterpart of bench/training/gemm_survey.cu's
--ffn mode at the same shapes, in the same call: which of tiertrain's GEMMs a step loses time on.

    python3 bench/training/torch_gemms.py --tokens 8192 --width 2048 --ffn 8192 --qkv 3072 --vocab 128256 [--reps 10]
"""

import argparse
import json

import torch


def time_ms(fn, reps):
    fn()
    fn()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--qkv", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    n, c = a.tokens, a.width
    layers = [("qkv", c, a.qkv), ("attn.proj", c, c), ("mlp.gate_up", c, 2 * a.ffn), ("mlp.down", a.ffn, c),
              ("lm_head", c, a.vocab)]
    print(f"torch_gemms: {torch.cuda.get_device_name()}, torch {torch.__version__}, N {n}, C {c}")
    rows = []
    g = torch.Generator(device="cuda").manual_seed(1)
    for name, fin, fout in layers:
        x = torch.randn(n, fin, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(fout, fin, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
        dy = torch.randn(n, fout, device="cuda", dtype=torch.bfloat16, generator=g) * 0.01
        flop = 2.0 * n * fin * fout
        for what, fn in (("forward", lambda: torch.mm(x, w.t())), ("dinp", lambda: torch.mm(dy, w)),
                         ("dW", lambda: torch.mm(dy.t(), x))):
            ms = time_ms(fn, a.reps)
            rows.append({"gemm": f"{name} {what}", "ms": round(ms, 4), "tflops": round(flop / ms * 1e-9, 1)})
            print(f"  {name + ' ' + what:22s} torch.mm bf16      {ms:9.3f} ms {flop / ms * 1e-9:7.1f} TFLOP/s")
        del x, w, dy
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tokens": n, "width": c, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
