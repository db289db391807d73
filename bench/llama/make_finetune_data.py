"""A fine-tuning set for benchmarks without a download (issue 46's JSON Lines row): a byte-level tokenizer with Llama 3's
special tokens and chat template (tokenizer.json, tokenizer_config.json), and JSON Lines examples, half
{"prompt", "completion"} and half {"messages": [...]}, whose completions follow from their prompts (arithmetic and
word reversal), so that a model learns something a loss can show.

    python3 bench/llama/make_finetune_data.py OUTDIR [--examples 20000] [--seed 0]
    tiertrain tokenize OUTDIR/train.jsonl --tokenizer OUTDIR --out OUTDIR/shards

Writes OUTDIR/tokenizer.json, OUTDIR/tokenizer_config.json and OUTDIR/train.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import random

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# Llama 3's chat template as its tokenizer_config.json carries it, less the tool-calling branches.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
WORDS = ["river", "stone", "cloud", "maple", "signal", "copper", "lantern", "harbor", "meadow", "circuit", "falcon",
         "glacier", "orchard", "pixel", "quartz", "saddle", "thistle", "velvet", "willow", "zephyr"]


def byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet: the printable bytes as themselves, the others shifted past 255."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return [chars[b] for b in range(256)]


def tokenizer() -> tuple[dict, dict]:
    vocab = {c: i for i, c in enumerate(byte_chars())}
    added = [{"id": 256 + i, "content": t, "special": True} for i, t in enumerate(SPECIAL)]
    level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    tok = {"added_tokens": added, "normalizer": None, "pre_tokenizer": level, "decoder": level,
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<|begin_of_text|>"}}, {"Sequence": {"id": "A"}}],
                              "special_tokens": {"<|begin_of_text|>": {"ids": [256]}}},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": CHAT_TEMPLATE}
    return tok, config


def example(rng: random.Random, i: int) -> dict:
    if rng.random() < 0.5:
        a, b = rng.randrange(1000), rng.randrange(1000)
        prompt, answer = f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    else:
        words = rng.sample(WORDS, rng.randrange(3, 8))
        prompt, answer = "Reverse these words: " + " ".join(words), " ".join(reversed(words))
    if i % 2 == 0:
        return {"prompt": prompt + "\n", "completion": answer}
    return {"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": prompt},
                         {"role": "assistant", "content": answer}]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok, config = tokenizer()
    with open(os.path.join(a.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    rng = random.Random(a.seed)
    with open(os.path.join(a.out, "train.jsonl"), "w") as f:
        for i in range(a.examples):
            f.write(json.dumps(example(rng, i)) + "\n")


if __name__ == "__main__":
    main()
