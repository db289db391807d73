#!/usr/bin/env python3
"""tiertrain's model against transformers' own class on the same weights and tokens (issue 45: golden tests against
LlamaForCausalLM and Qwen2ForCausalLM; GPT2LMHeadModel too).

For each family configuration asked for, it trains a tiny model with tiertrain for a few steps on a text file (random
initial weights moved by real updates, so nothing is symmetric), exports it (`tiertrain export`, f32), loads the
folder with `transformers.AutoModelForCausalLM` (f32, eager and SDPA attention) and compares the mean cross-entropy
on the windows `tiertrain eval --split all` scores (consecutive windows of seq + 1 bytes from the start): tiertrain's
`eval --json` against transformers'. (Gradients are not compared here: tests/model/llama_test.cc checks every
gradient against central differences of a reference written from the definitions.) Prints a table and writes JSON
(--out). Needs torch and transformers.

  tools/hf_golden.py --tiertrain build/release/src/tiertrain --data corpus.txt --out golden.json
"""
import argparse
import json
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


def hf_loss(folder, tokens, seq, batch, batches, attn):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation=attn)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(batches):
            rows = []
            for b in range(batch):
                at = (k * batch + b) * seq
                rows.append(tokens[at:at + seq + 1])
            x = torch.tensor(rows, dtype=torch.long)
            logits = model(input_ids=x[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                                     reduction="sum")
            total += loss.item()
            count += x[:, 1:].numel()
    return total / count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiertrain", required=True)
    ap.add_argument("--data", required=True, help="a text file (bytes: vocabulary 256)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tolerance", type=float, default=2e-5, help="relative, on the loss")
    ap.add_argument("--out")
    a = ap.parse_args()
    tokens = list(pathlib.Path(a.data).read_bytes())
    need = a.batch * a.batches * a.seq + 1
    if len(tokens) < need:
        sys.exit(f"{a.data}: {len(tokens)} bytes, {need} needed")
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.cases.split(","):
            run_dir, folder = f"{tmp}/{name}", f"{tmp}/{name}-hf"
            run(f"{a.tiertrain} train --backend cpu --data {a.data} {CASES[name]} --seq {a.seq} --batch 4 "
                f"--steps {a.steps} --warmup 2 --eval-every 0 --sample-tokens 0 --run-dir {run_dir}")
            run([a.tiertrain, "export", run_dir, "--out", folder])
            ours = json.loads(run([a.tiertrain, "eval", run_dir, "--data", a.data, "--split", "all", "--batch",
                                   str(a.batch), "--batches", str(a.batches), "--backend", "cpu", "--json"]))["loss"]
            config = json.loads(pathlib.Path(folder, "config.json").read_text())
            row = {"case": name, "architecture": config["architectures"][0], "tiertrain": ours}
            for attn in ("eager", "sdpa"):
                theirs = hf_loss(folder, tokens, a.seq, a.batch, a.batches, attn)
                row[f"transformers_{attn}"] = theirs
                row[f"rel_{attn}"] = abs(ours - theirs) / abs(theirs)
            row["ok"] = max(row["rel_eager"], row["rel_sdpa"]) <= a.tolerance
            failed += not row["ok"]
            rows.append(row)
            print(f"{name:16s} {row['architecture']:18s} tiertrain {ours:.8f}  transformers eager "
                  f"{row['transformers_eager']:.8f} sdpa {row['transformers_sdpa']:.8f}  rel "
                  f"{row['rel_eager']:.1e} {row['rel_sdpa']:.1e}  {'ok' if row['ok'] else 'DIFFERENT'}", flush=True)
    import torch
    import transformers
    result = {"torch": torch.__version__, "transformers": transformers.__version__, "seq": a.seq, "batch": a.batch,
              "batches": a.batches, "tolerance": a.tolerance, "rows": rows}
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"{len(rows) - failed} of {len(rows)} cases agree (torch {torch.__version__}, transformers "
          f"{transformers.__version__})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
