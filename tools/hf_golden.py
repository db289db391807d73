#!/usr/bin/env python3
"""tiertrain's model against transformers' own class on the same weights and tokens (issue 45: golden tests against
LlamaForCausalLM and Qwen2ForCausalLM; GPT2LMHeadModel too).

For each family configuration asked for, it trains a tiny model with tiertrain for a few steps on a text file (random
initial weights moved by real updates, so nothing is symmetric), exports it (`tiertrain export`, f32), loads the
folder with `transformers.AutoModelForCausalLM` (f32, eager and SDPA attention) and compares, on the windows
`tiertrain eval --split all` scores (consecutive windows of seq + 1 bytes from the start):
- every logit of every scored position (`eval --logits-out`, an .npy array) against transformers' logits: the largest
  absolute difference;
- the mean cross-entropy (tiertrain's `eval --json` against transformers');
- each token's cross-entropy (`eval --token-losses`): the log-sum-exp of its row of logits less its target's;
- the gradient of the mean loss with respect to every parameter (`eval --grads-out`, written under the Hugging Face
  names export gives the weights) against transformers' backward of the same loss, each tensor's largest difference
  over its largest magnitude.
--backend cuda evaluates on the GPU (f32 compute: --dtype); training stays on the CPU backend. Prints a table and
writes JSON (--out). Needs torch and transformers.

  tools/hf_golden.py --tiertrain build/release/src/tiertrain --data corpus.txt --out golden.json
"""
import argparse
import json
import math
import pathlib
import subprocess
import sys
import tempfile

CASES = {
    # name: tiertrain model flags
    "llama-gqa": "--family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --tied-embeddings false "
                 "--rope-theta 500000",
    "llama-tied-mha": "--family llama --layers 2 --dim 64 --heads 4 --ffn 128 --tied-embeddings true",
    "qwen2-bias": "--family llama --layers 2 --dim 64 --heads 4 --kv-heads 1 --ffn 96 --qkv-bias true "
                  "--tied-embeddings false --rope-theta 1000000 --norm-eps 1e-6",
    "gpt2": "--family gpt2 --layers 2 --dim 64 --heads 4",
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, shell=isinstance(cmd, str))
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {cmd}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def hf_check(folder, tokens, seq, batch, batches, attn, grads):
    """transformers' mean loss, each token's loss, the logits [windows, seq, vocab] and (grads) the gradient of the
    mean loss of every parameter."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation=attn)
    model.eval()  # (no dropout; gradients still flow)
    model.zero_grad(set_to_none=True)
    total, count, per_token, all_logits = 0.0, 0, [], []
    for k in range(batches):
        rows = []
        for b in range(batch):
            at = (k * batch + b) * seq
            rows.append(tokens[at:at + seq + 1])
        x = torch.tensor(rows, dtype=torch.long)
        with torch.set_grad_enabled(grads):
            logits = model(input_ids=x[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                     reduction="none")
            if grads:  # the mean over the batches of each batch's mean, as tiertrain's eval scores it
                (loss.mean() / batches).backward()
        per_token += loss.detach().tolist()
        all_logits.append(logits.detach())
        total += loss.detach().sum().item()
        count += x[:, 1:].numel()
    out = {"loss": total / count, "token_losses": per_token, "logits": torch.cat(all_logits)}
    if grads:  # (a parameter the loss does not reach has no gradient: None, reported as missing)
        out["grads"] = {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}
    return out


def compare_grads(ours_dir, theirs):
    """Each of transformers' parameter gradients against the tensor of that name tiertrain wrote: the largest
    difference over the tensor's largest magnitude; the worst tensor, and the names either side lacks."""
    import math
    from safetensors.torch import load_file
    ours = {}
    for f in sorted(pathlib.Path(ours_dir).glob("*.safetensors")):  # (one file, or the shards)
        ours.update(load_file(str(f)))
    worst, worst_name, missing, used = 0.0, None, [], set()
    for name, g in theirs.items():
        # (GPT-2's files name the base model's tensors without its "transformer." prefix, as OpenAI's do.)
        key = next((k for k in (name, name.removeprefix("transformer."), name.removeprefix("model."))
                    if k in ours), None)
        if key is None or g is None:
            missing.append(name if key is None else f"{name} (no gradient in transformers)")
            continue
        used.add(key)
        o = ours[key].float()
        if o.shape != g.shape:
            missing.append(f"{name} (shape {tuple(o.shape)} against {tuple(g.shape)})")
            continue
        scale = g.abs().max().item()
        err = (o - g).abs().max().item() / scale if scale > 0 else (o - g).abs().max().item()
        if not math.isfinite(err):  # a NaN or infinity on either side fails the case
            err = math.inf
        if err > worst or worst_name is None:
            worst, worst_name = err, name
    missing += [f"{k} (ours alone)" for k in ours if k not in used]
    return {"tensors": len(theirs), "worst_rel": worst, "worst_tensor": worst_name, "missing": missing}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiertrain", required=True)
    ap.add_argument("--data", required=True, help="a text file (bytes: vocabulary 256)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--backend", default="cpu", help="tiertrain eval's backend (cpu or cuda)")
    ap.add_argument("--dtype", default="f32", help="tiertrain eval's compute dtype")
    ap.add_argument("--tolerance", type=float, default=2e-5, help="relative, on the mean loss")
    ap.add_argument("--token-tolerance", type=float, default=1e-4, help="absolute, on each token's loss")
    ap.add_argument("--logit-tolerance", type=float, default=1e-4, help="absolute, on each logit")
    ap.add_argument("--grad-tolerance", type=float, default=1e-4,
                    help="on each gradient tensor's largest difference over its largest magnitude")
    ap.add_argument("--out")
    a = ap.parse_args()
    tokens = list(pathlib.Path(a.data).read_bytes())
    need = a.batch * a.batches * a.seq + 1
    if len(tokens) < need:
        sys.exit(f"{a.data}: {len(tokens)} bytes, {need} needed")
    import numpy as np  # (with torch and transformers: needed only to run, not to import this file)
    import torch
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.cases.split(","):
            run_dir, folder, grads = f"{tmp}/{name}", f"{tmp}/{name}-hf", f"{tmp}/{name}-grads"
            logits_file = f"{tmp}/{name}-logits.npy"
            run(f"{a.tiertrain} train --backend cpu --data {a.data} {CASES[name]} --seq {a.seq} --batch 4 "
                f"--steps {a.steps} --warmup 2 --eval-every 0 --sample-tokens 0 --run-dir {run_dir}")
            run([a.tiertrain, "export", run_dir, "--out", folder])
            ev = json.loads(run([a.tiertrain, "eval", run_dir, "--data", a.data, "--split", "all", "--batch",
                                 str(a.batch), "--batches", str(a.batches), "--backend", a.backend, "--dtype",
                                 a.dtype, "--json", "--token-losses", "--grads-out", grads, "--logits-out",
                                 logits_file]))
            our_logits = torch.from_numpy(np.load(logits_file))
            ours = ev["loss"]
            config = json.loads(pathlib.Path(folder, "config.json").read_text())
            row = {"case": name, "architecture": config["architectures"][0], "tiertrain": ours}
            for attn in ("eager", "sdpa"):
                theirs = hf_check(folder, tokens, a.seq, a.batch, a.batches, attn, grads=attn == "eager")
                row[f"transformers_{attn}"] = theirs["loss"]
                row[f"rel_{attn}"] = abs(ours - theirs["loss"]) / abs(theirs["loss"])
                diffs = [abs(x - y) for x, y in zip(ev["token_losses"], theirs["token_losses"])]
                # (a NaN anywhere, or a count that differs, fails the case)
                row[f"token_max_abs_{attn}"] = (max(diffs) if all(math.isfinite(d) for d in diffs) and
                                                len(ev["token_losses"]) == len(theirs["token_losses"])
                                                else float("inf"))
                theirs_logits = theirs["logits"]
                row[f"logit_max_abs_{attn}"] = ((our_logits - theirs_logits).abs().max().item()
                                                if our_logits.shape == theirs_logits.shape else float("inf"))
                if not math.isfinite(row[f"logit_max_abs_{attn}"]):
                    row[f"logit_max_abs_{attn}"] = float("inf")
                if "grads" in theirs:
                    row["grads"] = compare_grads(grads, theirs["grads"])
            rels = [row["rel_eager"], row["rel_sdpa"]]
            row["ok"] = (all(math.isfinite(r) for r in rels) and max(rels) <= a.tolerance and
                         max(row["token_max_abs_eager"], row["token_max_abs_sdpa"]) <= a.token_tolerance and
                         max(row["logit_max_abs_eager"], row["logit_max_abs_sdpa"]) <= a.logit_tolerance and
                         row["grads"]["worst_rel"] <= a.grad_tolerance and not row["grads"]["missing"])
            failed += not row["ok"]
            rows.append(row)
            print(f"{name:16s} {row['architecture']:18s} tiertrain {ours:.8f}  transformers eager "
                  f"{row['transformers_eager']:.8f} sdpa {row['transformers_sdpa']:.8f}  rel "
                  f"{row['rel_eager']:.1e} {row['rel_sdpa']:.1e}  tokens {row['token_max_abs_eager']:.1e} "
                  f"{row['token_max_abs_sdpa']:.1e}  logits {row['logit_max_abs_eager']:.1e} "
                  f"{row['logit_max_abs_sdpa']:.1e}  grads of {row['grads']['tensors']} tensors worst "
                  f"{row['grads']['worst_rel']:.1e} ({row['grads']['worst_tensor']})"
                  f"{' missing ' + str(row['grads']['missing']) if row['grads']['missing'] else ''}  "
                  f"{'ok' if row['ok'] else 'DIFFERENT'}", flush=True)
    import transformers
    result = {"torch": torch.__version__, "transformers": transformers.__version__, "seq": a.seq, "batch": a.batch,
              "batches": a.batches, "backend": a.backend, "dtype": a.dtype, "tolerance": a.tolerance,
              "token_tolerance": a.token_tolerance, "logit_tolerance": a.logit_tolerance,
              "grad_tolerance": a.grad_tolerance, "rows": rows}
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"{len(rows) - failed} of {len(rows)} cases agree (torch {torch.__version__}, transformers "
          f"{transformers.__version__})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
