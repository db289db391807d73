"""Write an llm.c token shard of uniformly random token ids, for benchmarks without a tokenizer or a download: the
GPT-2 vocabulary by default (256 x int32 header with magic 20240520, version 1, token count; uint16 tokens), or any
vocabulary with --vocab (above 65536, e.g. Llama 3's 128256: magic 20240801, version 7, uint32 tokens). The header's
word 3 holds the vocabulary (Note [shard vocabulary] in src/data/dataset.cc), so a model of the shard takes it even
where the largest id drawn is below it.

    python3 tools/make_random_shard.py OUT.bin --tokens 20000000 --seed 0 [--vocab 128256]
"""

from __future__ import annotations

import argparse

import numpy as np

MAGIC, VERSION, GPT2_VOCAB = 20240520, 1, 50257
WIDE_MAGIC, WIDE_VERSION = 20240801, 7


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--tokens", type=int, default=20_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=GPT2_VOCAB)
    args = p.parse_args()
    if not 1 <= args.vocab <= 2**31 - 1:
        p.error(f"--vocab {args.vocab}: must be in 1..2^31-1")
    wide = args.vocab > 65536
    header = np.zeros(256, dtype=np.int32)
    header[:4] = (WIDE_MAGIC if wide else MAGIC, WIDE_VERSION if wide else VERSION, args.tokens, args.vocab)
    dtype = np.uint32 if wide else np.uint16
    tokens = np.random.default_rng(args.seed).integers(0, args.vocab, size=args.tokens, dtype=dtype)
    with open(args.out, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())


if __name__ == "__main__":
    main()
