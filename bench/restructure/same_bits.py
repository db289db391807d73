#!/usr/bin/env python3
"""Old against new: the same training runs with two tiertrain programs give the same bits (issue 44: a restructuring
changes no output).

For every plan given, both programs train the same model on the same data with the same seed into their own run
folder; the per-step losses and gradient norms (metrics.json, full precision), the validation losses, and every tensor
of the final checkpoint (parameters, AdamW moments) must be equal bit for bit. Prints a table and writes JSON.

  bench/restructure/same_bits.py OLD/tiertrain NEW/tiertrain --out DIR [--backend cpu|cuda] [--plans a,b,...]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
try:
    import tensorfile  # noqa: E402  (needs numpy)
except ImportError:
    tensorfile = None

PLANS = ["in-core", "in-core-selective", "recompute", "swap-activations", "swap-attention-recompute-mlp",
         "swap-attention-recompute-mlp-norms", "offload-params", "offload-all", "in-core/cpu", "recompute/cpu",
         "swap-activations/cpu", "um", "um-advised", "um-swap-activations"]


def corpus(path):
    words = ("the model trains on the host while the device computes the next block and the copies overlap with "
             "compute so that no stream waits longer than it must").split()
    out, state = [], 11
    for _ in range(30000):
        state = (state * 1103515245 + 12345) % (1 << 31)
        out.append(words[state % len(words)])
    path.write_text(" ".join(out))


def train(binary, plan, data, run_dir, backend, extra):
    plan_name, _, optimizer = plan.partition("/")
    args = [binary, "train", "--data", str(data), "--backend", backend, "--layers", "4", "--dim", "64", "--heads", "4",
            "--seq", "64", "--batch", "4", "--steps", "12", "--warmup", "3", "--eval-every", "6", "--log-every", "4",
            "--seed", "7", "--plan", plan_name, "--run-dir", str(run_dir), "--sample-tokens", "0", *extra]
    if optimizer:
        args += ["--optimizer", optimizer]
    r = subprocess.run(args, capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="2"))
    return r.returncode, r.stdout + r.stderr


def results(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    steps = [(s["step"], s["loss"], s["grad_norm"]) for s in m["steps"]]
    val = [(v["step"], v["loss"]) for v in m.get("val", [])]
    if tensorfile is None:
        return steps, val, None
    ckpt = sorted((run_dir / "checkpoints").glob("step_*.ttf"))[-1]
    tensors, _ = tensorfile.read(str(ckpt))
    return steps, val, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--plans", default=",".join(PLANS))
    ap.add_argument("--extra", default="", help="more train flags for both, e.g. '--dtype bf16'")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "corpus.txt"
    corpus(data)
    rows, failed, refused = [], 0, 0
    for plan in a.plans.split(","):
        row = {"plan": plan}
        runs = {}
        for which, binary in (("old", a.old), ("new", a.new)):
            d = out / f"{plan.replace('/', '_')}-{which}"
            code, log = train(binary, plan, data, d, a.backend, a.extra.split())
            (out / f"{plan.replace('/', '_')}-{which}.log").write_text(log)
            if code != 0:
                row[which] = f"exit {code}"
            else:
                runs[which] = results(d)
        if len(runs) == 2:
            (so, vo, to), (sn, vn, tn) = runs["old"], runs["new"]
            if to is None:  # no numpy here: the losses and norms alone
                same_tensors, ntensors = True, "not compared (no numpy)"
            else:
                same_tensors = to.keys() == tn.keys() and all(
                    to[k].dtype == tn[k].dtype and to[k].shape == tn[k].shape and to[k].tobytes() == tn[k].tobytes()
                    for k in to)
                ntensors = len(to)
            row.update(steps=len(so), tensors=ntensors, losses_equal=so == sn, val_equal=vo == vn,
                       checkpoint_equal=same_tensors, final_loss=so[-1][1])
            row["same"] = so == sn and vo == vn and same_tensors
        elif "old" in row and "new" in row and row["old"] == row["new"]:
            # Both refused the plan alike (e.g. no managed memory on this backend): nothing was compared.
            row["same"] = None
        else:
            row["same"] = False
        failed += row["same"] is False
        refused += row["same"] is None
        rows.append(row)
        verdict = {True: "same bits", False: "DIFFERENT", None: "refused by both"}[row["same"]]
        print(f"{plan:40s} {verdict}  "
              + " ".join(f"{k}={v}" for k, v in row.items() if k not in ("plan", "same")), flush=True)
    (out / "same_bits.json").write_text(json.dumps({"backend": a.backend, "extra": a.extra, "rows": rows}, indent=1))
    print(f"{len(rows) - failed - refused} of {len(rows)} plans give the same bits"
          + (f"; {refused} refused by both alike (nothing compared)" if refused else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
