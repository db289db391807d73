#include "data/tokenize.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/units.h"
#include "data/dataset.h"
#include "data/finetune.h"
#include "data/tokenizer.h"

namespace tt::data {

// Note [tokenize in blocks]: a cut right after a newline that has a printable ASCII character on each side: each
// pattern cuts there too (GPT-2's: the newline is a piece of its own, a space run of one before a non-space, after a
// non-space; Llama 3's and Qwen2's: no alternative continues past a newline into a non-space), no contraction spans
// it, and no added token where none holds a newline (Tokenizer::cuts_at_newlines; else a file is read whole). NFC
// composes nothing across it. 0: no such place (the text waits for more).
size_t safe_cut(std::string_view s) {
  const auto printable = [](char c) { return c > ' ' && c < 0x7f; };
  for (size_t p = s.size() - (s.empty() ? 0 : 1); p >= 2; --p)
    if (s[p - 1] == '\n' && printable(s[p - 2]) && printable(s[p])) return p;
  return 0;
}

Result<TokenizeResult> tokenize_to_shards(const TokenizeOptions& o, FILE* progress) {
  TT_RETURN_IF(o.inputs.empty(), kInvalidArgument, "tokenize: no input files or folders given");
  TT_RETURN_IF(o.out.empty(), kInvalidArgument, "tokenize: no output folder given (--out)");
  TT_RETURN_IF(o.shard_tokens < 1 || o.val_tokens < 0 || o.chunk_bytes < 1, kInvalidArgument,
               "tokenize: --shard-tokens must be >= 1, --val-tokens >= 0 and the block size >= 1");
  TT_RETURN_IF(o.vocab.empty(), kInvalidArgument,
               "tokenize: --tokenizer names a tokenizer.json (or a folder holding one), or GPT-2's encoder.json and "
               "vocab.bpe (a folder holding both)");
  TT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(o.vocab));
  const int32_t doc_start = tok.document_start();
  TT_RETURN_IF(doc_start < 0, kFailedPrecondition,
               "tokenize: %s has no token to begin a document with (its template's first token, or <|endoftext|>)",
               o.vocab.c_str());
  if (progress && !o.print_ids) std::fprintf(progress, "tokenize: %s\n", tok.describe().c_str());
  std::vector<std::string> files;
  for (const std::string& in : o.inputs) {
    TT_ASSIGN_OR_RETURN(std::vector<std::string> f, data_files(in));
    files.insert(files.end(), f.begin(), f.end());
  }
  // uint16 shards where every id fits (GPT-2's), else uint32 (Llama 3's, Qwen2's, and any with fine-tuning examples:
  // their loss mask, Note [loss mask]); the vocabulary in the header.
  const bool wide = tok.vocab() > 65536 || std::any_of(files.begin(), files.end(), is_examples_file);
  TT_TRY(make_directories(o.out, "tokenize --out"));

  TokenizeResult r;
  std::vector<uint32_t> shard;
  int train_index = 0;
  bool val_done = o.val_tokens == 0;
  auto flush = [&](bool last) -> Status {
    // The validation shard first (exactly val_tokens), then training shards of shard_tokens.
    while (true) {
      const size_t want = val_done ? static_cast<size_t>(o.shard_tokens) : static_cast<size_t>(o.val_tokens);
      if (shard.size() < want && !(last && !shard.empty())) return Status::ok();
      const size_t n = std::min(want, shard.size());
      char name[64];
      std::snprintf(name, sizeof(name), val_done ? "train_%06d.bin" : "val_%06d.bin", val_done ? train_index++ : 0);
      const std::string path = o.out + "/" + name;
      const auto first = shard.begin(), last = shard.begin() + static_cast<long>(n);
      TT_TRY(write_token_shard(path, wide ? Tokens(std::vector<uint32_t>(first, last))
                                          : Tokens(std::vector<uint16_t>(first, last)),
                               tok.vocab()));
      r.shards.push_back(path);
      shard.erase(shard.begin(), shard.begin() + static_cast<long>(n));
      val_done = true;
      if (shard.empty()) return Status::ok();
    }
  };
  Tokenizer::PieceCache cache;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  bool line_start = true;  // print_ids: the next id starts a document's line
  auto emit = [&](uint32_t id) -> Status {  // with kNoLoss where the loss does not count it
    shard.push_back(id);
    ++r.tokens;
    if (o.print_ids && progress)
      std::fprintf(progress, line_start ? "%s%u" : " %s%u", (id & kNoLoss) ? "-" : "", id & ~kNoLoss);
    line_start = false;
    if (shard.size() >= static_cast<size_t>(std::max(o.shard_tokens, o.val_tokens))) return flush(false);
    return Status::ok();
  };
  for (const std::string& file : files) {
    if (is_examples_file(file)) {  // fine-tuning examples (data/finetune.h), each line one after another
      std::vector<uint32_t> ids;
      FinetuneStats stats;
      TT_TRY(tokenize_examples(file, tok, &ids, &stats));
      if (o.print_ids && progress && r.tokens > 0) std::fputc('\n', progress);
      line_start = true;
      ++r.files;
      r.examples += stats.examples;
      r.counted += stats.counted;
      for (uint32_t id : ids) TT_TRY(emit(id));
      continue;
    }
    std::ifstream in(file, std::ios::binary);
    TT_RETURN_IF(!in, kIoError, "cannot read '%s': %s", file.c_str(), std::strerror(errno));
    // Note [tokenize in blocks]: the file in blocks of chunk_bytes; what has been read is encoded up to its last
    // safe cut (safe_cut), the rest kept for the next block, so that a file of any size is tokenized in bounded
    // memory, to the same ids as the whole text at once.
    std::string pending, block;
    in.seekg(0, std::ios::end);
    int64_t left = static_cast<int64_t>(in.tellg());
    in.seekg(0, std::ios::beg);
    bool first = true;
    while (true) {
      // A block no larger than what is left of the file (a buffer of chunk_bytes for each small file cost more
      // than the tokenizing: 255 s instead of 4 s on 8259 headers).
      block.resize(static_cast<size_t>(std::max<int64_t>(0, std::min(o.chunk_bytes, left))));
      in.read(block.data(), static_cast<std::streamsize>(block.size()));
      block.resize(static_cast<size_t>(in.gcount()));
      TT_RETURN_IF(in.bad(), kIoError, "reading '%s' failed: %s", file.c_str(), std::strerror(errno));
      left -= static_cast<int64_t>(block.size());
      const bool end = left <= 0 || block.empty();
      if (first) {  // a document: its first bytes tell text from binary
        first = false;
        if (block.empty() || !looks_like_text(block)) {
          ++r.skipped;
          break;
        }
        ++r.files;
        if (o.print_ids && progress && r.tokens > 0) std::fputc('\n', progress);
        line_start = true;
        TT_TRY(emit(static_cast<uint32_t>(doc_start)));
      }
      r.bytes += static_cast<int64_t>(block.size());
      pending += block;
      const size_t cut = end ? pending.size() : tok.cuts_at_newlines() ? safe_cut(pending) : 0;
      if (cut > 0) {
        for (int32_t id : tok.encode(std::string_view(pending).substr(0, cut), &cache))
          TT_TRY(emit(static_cast<uint32_t>(id)));
        pending.erase(0, cut);
      }
      const auto now = std::chrono::steady_clock::now();
      if (progress && !o.print_ids && now - last_report > std::chrono::seconds(5)) {
        last_report = now;
        const double sec = std::chrono::duration<double>(now - t0).count();
        std::fprintf(progress, "tokenize: %lld files, %s read (%s/s), %lld tokens\n", static_cast<long long>(r.files),
                     format_bytes(r.bytes).c_str(), format_bytes(static_cast<int64_t>(r.bytes / sec)).c_str(),
                     static_cast<long long>(r.tokens));
      }
      if (end) break;
    }
  }
  if (o.print_ids && progress && r.tokens > 0) std::fputc('\n', progress);
  TT_RETURN_IF(r.files == 0, kDataLoss, "tokenize: no text in the inputs (%lld files skipped as binary or empty)",
               static_cast<long long>(r.skipped));
  TT_RETURN_IF(!val_done && shard.size() <= static_cast<size_t>(o.val_tokens), kFailedPrecondition,
               "tokenize: the inputs make %zu tokens: not more than --val-tokens %lld, nothing would be left to "
               "train on",
               shard.size(), static_cast<long long>(o.val_tokens));
  TT_TRY(flush(true));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

Status tokenize_in_memory(const std::vector<std::string>& inputs, const Tokenizer& tok, double val_fraction,
                          Tokens* train, Tokens* val) {
  TT_RETURN_IF(tok.document_start() < 0, kFailedPrecondition,
               "the tokenizer has no token to begin a document with (its template's first token, or <|endoftext|>)");
  TT_RETURN_IF(!(val_fraction >= 0 && val_fraction < 1), kInvalidArgument, "the validation share %g is not in [0, 1)",
               val_fraction);
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    TT_ASSIGN_OR_RETURN(std::vector<std::string> f, data_files(in));
    files.insert(files.end(), f.begin(), f.end());
  }
  const bool wide = tok.vocab() > 65536 || std::any_of(files.begin(), files.end(), is_examples_file);
  *train = wide ? Tokens(std::vector<uint32_t>()) : Tokens(std::vector<uint16_t>());
  *val = *train;
  Tokenizer::PieceCache cache;
  int64_t documents = 0;
  {
    for (const std::string& file : files) {
      if (is_examples_file(file)) {  // examples: the last share of their tokens is the validation's
        std::vector<uint32_t> ids;
        FinetuneStats stats;
        TT_TRY(tokenize_examples(file, tok, &ids, &stats));
        ++documents;
        const Tokens doc(std::move(ids));
        const size_t n_val = static_cast<size_t>(static_cast<double>(doc.size()) * val_fraction);
        train->append(doc, 0, doc.size() - n_val);
        val->append(doc, doc.size() - n_val, doc.size());
        continue;
      }
      std::ifstream f(file, std::ios::binary);
      TT_RETURN_IF(!f, kIoError, "cannot read '%s': %s", file.c_str(), std::strerror(errno));
      std::stringstream text;
      text << f.rdbuf();
      const std::string bytes = text.str();
      if (bytes.empty() || !looks_like_text(bytes)) continue;
      ++documents;
      std::vector<int32_t> ids = {tok.document_start()};
      for (int32_t id : tok.encode(bytes, &cache)) ids.push_back(id);
      const Tokens doc = wide ? Tokens(std::vector<uint32_t>(ids.begin(), ids.end()))
                              : Tokens(std::vector<uint16_t>(ids.begin(), ids.end()));
      const size_t n_val = static_cast<size_t>(static_cast<double>(doc.size()) * val_fraction);
      train->append(doc, 0, doc.size() - n_val);
      val->append(doc, doc.size() - n_val, doc.size());
    }
  }
  TT_RETURN_IF(documents == 0, kDataLoss, "no text in %s (binary and empty files are skipped)",
               inputs.empty() ? "(no inputs)" : inputs[0].c_str());
  return Status::ok();
}

}  // namespace tt::data
