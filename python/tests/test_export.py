"""`tiertrain export` writes Hugging Face's GPT-2 layout: a GPT-2 forward written here in numpy from that layout's
definition (Conv1D weights [in, out], tied LM head, GELU's tanh form, LayerNorm eps 1e-5) gives, on the exported
weights, the loss `tiertrain eval` gives on the same windows; and so does transformers' GPT2LMHeadModel where
transformers is installed (skipped otherwise)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from test_comm import launcher

T = 16  # the model's context


def tiertrain(*args: str) -> str:
    out = subprocess.run([launcher(), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    corpus = d / "corpus.txt"
    corpus.write_text("The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.\n" * 300)
    tiertrain("train", "--layers", "2", "--dim", "32", "--heads", "2", "--seq", str(T), "--batch", "4", "--steps", "40",
              "--eval-every", "0", "--threads", "1", "--backend", "cpu", "--data", str(corpus), "--checkpoint-dir",
              str(d / "ck"))
    tiertrain("export", str(d / "ck"), "--out", str(d / "hf"))
    out = tiertrain("eval", str(d / "ck"), "--data", str(corpus), "--batch", "1", "--batches", "3", "--backend", "cpu")
    loss = float(re.search(r": loss ([0-9.]+) nats/token", out).group(1))
    return d, corpus.read_bytes(), loss


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return out


def gpt2_loss(w: dict[str, np.ndarray], cfg: dict, x: np.ndarray, y: np.ndarray) -> float:
    """GPT-2's forward of one sequence from Hugging Face's layout, in float64: the mean cross-entropy."""
    H, C = cfg["n_head"], cfg["n_embd"]
    hs = C // H

    def ln(v, g, b):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + cfg["layer_norm_epsilon"]) * g + b

    def gelu(v):
        return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))

    n = len(x)
    h = w["transformer.wte.weight"][x] + w["transformer.wpe.weight"][:n]
    mask = np.triu(np.ones((n, n), bool), 1)
    for layer in range(cfg["n_layer"]):
        p = f"transformer.h.{layer}."
        a = ln(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(n, H, hs).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hs)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(n, C)
        h = h + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = ln(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        h = h + gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]) @ w[p + "mlp.c_proj.weight"] + \
            w[p + "mlp.c_proj.bias"]
    h = ln(h, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    logits = h @ w["transformer.wte.weight"].T
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-logp[np.arange(n), y].mean())


def windows(tokens: bytes, count: int):
    t = np.frombuffer(tokens, np.uint8).astype(np.int64)
    return [(t[j * T:j * T + T], t[j * T + 1:j * T + T + 1]) for j in range(count)]


def test_numpy_gpt2_on_the_exported_layout_gives_evals_loss(exported):
    d, tokens, loss = exported
    w = read_safetensors(d / "hf" / "model.safetensors")
    cfg = json.loads((d / "hf" / "config.json").read_text())
    assert cfg["vocab_size"] == 256 and cfg["n_layer"] == 2 and cfg["n_positions"] == T
    assert "lm_head.weight" not in w  # tied to the token embedding
    assert w["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D: [in, out]
    mine = np.mean([gpt2_loss(w, cfg, x, y) for x, y in windows(tokens, 3)])
    assert loss < 4.0, "the model learnt nothing: the comparison would not test the layout"
    assert abs(mine - loss) < 2e-4, (mine, loss)


def test_transformers_loads_the_export_at_the_same_loss(exported):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    d, tokens, loss = exported
    model = transformers.GPT2LMHeadModel.from_pretrained(str(d / "hf")).eval()
    losses = []
    with torch.no_grad():
        for x, y in windows(tokens, 3):
            logits = model(torch.tensor(x)[None]).logits[0].double()
            losses.append(torch.nn.functional.cross_entropy(logits, torch.tensor(y)).item())
    assert abs(float(np.mean(losses)) - loss) < 2e-4, (losses, loss)
