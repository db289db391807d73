// data/tokenize: text files to token shards (the format `train --data` reads: llm.c's .bin shards, uint32 tokens past
// 65536) of a byte-level BPE tokenizer's vocabulary (data/tokenizer.h: a tokenizer.json as Llama 3, Qwen2 and GPT-2
// publish it, or GPT-2's encoder.json and vocab.bpe), so that a corpus of one's own trains a model without another
// tool. Each file is one document, preceded by the tokenizer's document start (Llama 3's <|begin_of_text|>, else
// <|endoftext|>, as llm.c's and nanoGPT's preparation scripts do for GPT-2); a .jsonl file is fine-tuning examples
// (data/finetune.h), its tokens with their loss mask (uint32 shards, version 8).
//
//   TokenizeOptions o;
//   o.inputs = {"corpus/"};           // files or folders (recursively; binary files skipped)
//   o.vocab = "Llama-3.2-1B/";        // tokenizer.json (or GPT-2's encoder.json and vocab.bpe)
//   o.out = "corpus_llama3/";         // train_000000.bin, ... (and val_000000.bin with val_tokens)
//   TT_ASSIGN_OR_RETURN(TokenizeResult r, tokenize_to_shards(o, stderr));
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

namespace tt::data {

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string vocab;                     // the tokenizer (Tokenizer::load)
  std::string out;                       // the folder of shards (created)
  int64_t shard_tokens = 100'000'000;    // tokens a shard (llm.c's size), the last one shorter
  int64_t val_tokens = 0;                // the first this many tokens to val_000000.bin (0: no validation shard)
  bool print_ids = false;                // also print the ids, space-separated, one document a line (small inputs)
  int64_t chunk_bytes = int64_t(64) << 20;  // a file is read and encoded in blocks of this size (Note [tokenize in
                                            // blocks]; the tests make it small)
};

// Note [tokenize in blocks]: the last place of s where the text may be cut without changing its tokens (a newline
// with a printable ASCII character on each side, cut after it), or 0.
size_t safe_cut(std::string_view s);

struct TokenizeResult {
  int64_t files = 0, skipped = 0;        // documents read; binary or empty files skipped
  int64_t bytes = 0, tokens = 0;         // in, out (tokens with the document start before each document)
  int64_t examples = 0, counted = 0;     // fine-tuning examples (.jsonl files), and their tokens the loss counts
  std::vector<std::string> shards;       // written, in order
  double seconds = 0;
};

// Progress (a line every few seconds on long inputs) and the ids (print_ids) go to `progress`.
Result<TokenizeResult> tokenize_to_shards(const TokenizeOptions& o, FILE* progress);

// The tokens of text files or folders in memory (eval on text), as tokenize_to_shards writes them: each file a
// document after the tokenizer's document start; with val_fraction > 0, the last share of each document in *val
// (as TokenDataset::load splits files), the rest in *train. Binary and empty files are skipped.
Status tokenize_in_memory(const std::vector<std::string>& inputs, const Tokenizer& tok, double val_fraction,
                          Tokens* train, Tokens* val);

}  // namespace tt::data
