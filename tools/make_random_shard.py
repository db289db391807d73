"""Write an llm.c token shard (.bin: 256 x int32 header with magic 20240520, version 1, token count; uint16 tokens)
of uniformly random GPT-2 token ids, for benchmarks at the GPT-2 vocabulary without a tokenizer or a download.

    python3 tools/make_random_shard.py OUT.bin --tokens 20000000 --seed 0
"""

from __future__ import annotations

import argparse

import numpy as np

MAGIC, VERSION, GPT2_VOCAB = 20240520, 1, 50257


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--tokens", type=int, default=20_000_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (MAGIC, VERSION, args.tokens)
    tokens = np.random.default_rng(args.seed).integers(0, GPT2_VOCAB, size=args.tokens, dtype=np.uint16)
    with open(args.out, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
