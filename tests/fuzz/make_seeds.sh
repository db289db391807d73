#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) from a tiertrain binary and small
# hand-written inputs. The corpora are committed; run this again when a format changes:
#
#   tests/fuzz/make_seeds.sh build/release/src/tiertrain
set -euo pipefail
bin=$(realpath "${1:?usage: tests/fuzz/make_seeds.sh PATH/TO/tiertrain}")
cd "$(dirname "$0")"
out=$PWD/corpus
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"/{tensorfile,checkpoint_meta,config,plan,profile,dataset,hf_folder,tokenizer,chat_template,examples}

# A small corpus and a token shard (llm.c's format: 256 x int32 header, magic 20240520, version 1, count; uint16s).
printf 'the memory of a device is never enough\nso we swap and recompute\n%.0s' {1..40} > "$work/text.txt"
python3 - "$work/shard.bin" <<'PY'
import struct, sys
tokens = [(i * 7919) % 50257 for i in range(600)]
header = [20240520, 1, len(tokens)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens))
PY

# A checkpoint of a tiny model: the tensor file, and its metadata alone.
tiny=(--data "$work/text.txt" --layers 1 --dim 8 --heads 2 --seq 8 --batch 2 --steps 2 --warmup 1)
"$bin" train "${tiny[@]}" --checkpoint-dir "$work/ckpt" --checkpoint-every 2 > /dev/null 2>&1
cp "$work/ckpt/step_00000002.ttf" "$out/tensorfile/checkpoint.ttf"
python3 - "$work/ckpt/step_00000002.ttf" "$out" <<'PY'
import json, struct, sys, zlib
data = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", data, 8)[0]
header = json.loads(data[24:24 + n])
open(sys.argv[2] + "/checkpoint_meta/meta.json", "w").write(json.dumps(header["meta"]))
# A tensor file with no tensor, and one with a single 2x3 float tensor (docs/FORMATS.md).
def ttf(meta, tensors):
    body, entries = b"", []
    for name, payload, shape in tensors:
        entries.append({"name": name, "dtype": "f32", "shape": shape, "offset": len(body), "bytes": len(payload),
                        "crc32": zlib.crc32(payload)})
        body += payload
    hdr = json.dumps({"format": "tiertrain-tensors", "version": 1, "meta": meta, "tensors": entries}).encode()
    head = b"TTTENSR1" + struct.pack("<QI", len(hdr), zlib.crc32(hdr)) + b"\0" * 4 + hdr
    head += b"\0" * ((-len(head)) % 64)
    total = len(head) + len(body) + 16
    return head + body + b"TTEND001" + struct.pack("<Q", total)
open(sys.argv[2] + "/tensorfile/empty.ttf", "wb").write(ttf({}, []))
open(sys.argv[2] + "/tensorfile/one.ttf", "wb").write(
    ttf({"step": 1}, [("w", struct.pack("<6f", 1, 2, 3, 4, 5, 6), [2, 3])]))
PY

# Configuration files.
echo '{"layers": 2, "dim": 64, "heads": 4, "seq": 64, "batch": 4, "steps": 10, "lr": 0.001}' > "$out/config/model.json"
echo '{"plan": "swap-activations", "device-budget": "2GiB", "dtype": "bf16", "checkpoint_every": 100, "checkpoint_dir": "/tmp/ck"}' \
  > "$out/config/plan.json"
echo '{"data": "/tmp/x.txt", "val_fraction": 0.1, "resume": "latest", "checkpoint-dir": "/tmp/ck", "seed": 7, "debug": "INFO"}' \
  > "$out/config/data.json"

# Plans: the first byte is the model's layers (mod 16, plus 1).
plan() { printf '\x03'; echo "$1"; }
plan '{"version": 1, "default": {"activation": "recompute"}, "layers": {"0-1": {"activation": "swap"}}, "swap_prefetch": 1}' > "$out/plan/mix.json"
plan '{"version": 1, "default": {"activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}}}' > "$out/plan/halves.json"
plan '{"version": 1, "default": {"activation": "resident", "param": "host_streamed", "grad": "host_streamed", "optim_state": "host_streamed"}, "optimizer": "cpu", "param_prefetch": 2}' > "$out/plan/offload.json"

# A calibration profile of the CPU backend for the tiny model.
XDG_CACHE_HOME=$work/cache "$bin" calibrate "${tiny[@]}" --out "$out/profile/cpu.json" > /dev/null 2>&1

# Datasets: the first byte picks one file (even) or a folder (odd) and the validation share; files are cut at
# "\n--tt-file--\n", each named by its first byte: 0 text, 1 text in a subfolder, 2 train shard, 3 val shard, 4 shard.
cut=$'\n--tt-file--\n'
{ printf '\x00\x00'; cat "$work/text.txt"; } > "$out/dataset/text"
{ printf '\x01\x00'; head -c 300 "$work/text.txt"; printf '%s\x01' "$cut"; tail -c 300 "$work/text.txt"; } \
  > "$out/dataset/text_folder"
{ printf '\x00\x04'; cat "$work/shard.bin"; } > "$out/dataset/shard"
{ printf '\x01\x02'; cat "$work/shard.bin"; printf '%s\x03' "$cut"; cat "$work/shard.bin"; } > "$out/dataset/shards"
# Hugging Face folders (tests/fuzz/hf_folder.cc: config.json's length, config.json, model.safetensors): a tiny Llama
# exported in bf16, and a tiny GPT-2 in f32.
hf_seed() {  # NAME FLAGS...
  local name=$1
  shift
  "$bin" train --data "$work/text.txt" --layers 1 --dim 8 --heads 2 --seq 8 --batch 2 --steps 1 --warmup 1 \
    --checkpoint-dir "$work/$name-ck" "$@" > /dev/null 2>&1
  "$bin" export "$work/$name-ck" --out "$work/$name-hf" "${export_flags[@]}" > /dev/null
  python3 - "$work/$name-hf" "$out/hf_folder/$name" <<'PY'
import struct, sys
config = open(sys.argv[1] + "/config.json", "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<I", len(config)) + config + open(sys.argv[1] + "/model.safetensors", "rb").read())
PY
}
export_flags=(--dtype bf16)
hf_seed llama --family llama --kv-heads 1 --ffn 16 --tied-embeddings false --qkv-bias true
export_flags=()
hf_seed gpt2 --family gpt2
# Tokenizers (tests/fuzz/tokenizer.cc: tokenizer.json's length, tokenizer.json, a text): small byte-level BPEs of
# Llama 3's kind (its pattern, ignore_merges, a template, added tokens), Qwen2's (NFC) and GPT-2's, with texts.
python3 - "$out/tokenizer" <<'PY'
import json, struct, sys
keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
char, extra = {}, 0
for b in range(256):
    char[b] = chr(b) if b in keep else chr(256 + extra)
    extra += b not in keep
llama3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
          r"\s+(?!\S)|\s+")
def tokenizer(pattern, nfc, ignore_merges, added, bos):
    vocab = {char[b]: b for b in range(256)}
    merges = []
    for a, b in [("t", "h"), ("th", "e"), (char[32], "the"), ("i", "n"), (char[32], "in"), ("1", "2"), ("\u00c3", "\u00a9")]:
        vocab[a + b] = len(vocab)
        merges.append([a, b])
    added_tokens = [{"id": len(vocab) + k, "content": c, "single_word": False, "lstrip": c == "<pad>",
                     "rstrip": c == "<pad>", "normalized": False, "special": True} for k, c in enumerate(added)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": pattern is None}
    pre = byte_level if pattern is None else {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, byte_level]}
    post = byte_level
    if bos:
        post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                                                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [], "special_tokens": {bos: {"id": bos, "ids": [len(vocab)], "tokens": [bos]}}}
    return {"version": "1.0", "added_tokens": added_tokens, "normalizer": {"type": "NFC"} if nfc else None,
            "pre_tokenizer": pre, "post_processor": post, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}}
text = "the thin 123 it's I'LL <|eot_id|> e\u0301t\u00e9  \n\n x.\r\n<pad> \u65e5\u672c <|endoftext|>"
seeds = {"llama3": tokenizer(llama3, False, True, ["<|begin_of_text|>", "<|eot_id|>", "<pad>"], "<|begin_of_text|>"),
         "qwen2": tokenizer(llama3.replace(r"\p{N}{1,3}", r"\p{N}"), True, False, ["<|endoftext|>", "<|im_start|>"], None),
         "gpt2": tokenizer(None, False, False, ["<|endoftext|>"], None)}
for name, j in seeds.items():
    body = json.dumps(j, ensure_ascii=False).encode()
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<I", len(body)) + body + text.encode())
PY
# Chat templates (tests/fuzz/chat_template.cc: the template's text): Llama 3's and ChatML's shapes, and one using the
# interpreter's other features.
python3 - "$out/chat_template" <<'PY'
import pathlib, sys
d = pathlib.Path(sys.argv[1])
(d / 'llama3').write_text("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
(d / 'chatml').write_text("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
(d / 'features').write_text("{%- set ns = namespace(n=0, sys='') %}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set ns.sys = messages[0]['content']|trim %}\n    {%- set rest = messages[1:] %}\n{%- else %}\n    {%- set rest = messages %}\n{%- endif %}\n[{{ ns.sys|upper if ns.sys else 'none' }}]\n{% for m in rest if m.role != 'tool' %}\n  {% set ns.n = ns.n + 1 %}\n  {{ loop.index }}/{{ loop.length }} {{ m.role ~ ':' }} {{ m['content'] }}{% if not loop.last %},{% endif %}\n{% else %}empty\n{% endfor %}\n{{- ns.n }} {{ rest|length }} {{ 'x' in 'xyz' }} {{ 3 // 2 }} {{ 7 % 3 }} {{ 1.5 * 2 }} {{ none is none }} {{ rest[-1].role }}\n{{ {'a': [1, 'b', true, none]}|tojson(indent=2) }} {{ ['p', 'q']|join('+') }} {{ 'a,b'.split(',')|last }} {{ '  s  '.strip() }}\n{%- for k, v in {'x': 1}.items() %}{{ k }}={{ v|string }}{% endfor %}{{ range(3)|list|length }} {{ x|default('d') }}\n{%- if add_generation_prompt %}<gen>{% endif %}")
PY
# Fine-tuning examples (tests/fuzz/examples.cc: JSON Lines): a prompt and completion, and conversations.
python3 - "$out/examples/mixed.jsonl" <<'PY'
import json, sys
lines = [{"prompt": "2+2=", "completion": " 4"},
         {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello!"}]},
         {"messages": [{"role": "user", "content": "caf\u00e9 <|eot_id|>"}, {"role": "assistant", "content": " \u65e5\u672c "},
                       {"role": "user", "content": "again"}, {"role": "assistant", "content": "he he"}]}]
open(sys.argv[1], "w").write("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
PY
du -sh "$out"/*
