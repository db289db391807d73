// data/dataset: token datasets for language-model training, loaded whole into host memory with a validation split.
//
// Two sources:
//  - text: a file, or a folder of files (recursively, in name order), read as bytes: vocabulary 256. Files that are
//    not text (a NUL byte in their first 64 KiB, like fortune's .dat indexes) and files already read through another
//    name (symlinks such as fortune's .u8) are skipped, so every file is read once.
//  - token shards in llm.c's format (.bin: a 256 x int32 header, then the tokens): magic 20240520, version 1, token
//    count, then uint16 tokens of the GPT-2 vocabulary (50257); or magic 20240801, version 7, token count, then uint32
//    tokens (Llama 3's vocabulary, 128256, as llm.c writes it; any vocabulary up to 2^31: the largest token + 1). A
//    folder of shards uses the files named *train* for training and *val* for validation when both exist.
// Unless a split is given by file names, the last `val_fraction` of each file's tokens is the validation split, so
// both splits sample every file.
//
//   TT_ASSIGN_OR_RETURN(TokenDataset ds, TokenDataset::load("/usr/share/games/fortunes", 0.05));
//   ds.train().size(); ds.vocab();  // 256
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tt::data {

constexpr int kByteVocab = 256;
constexpr int kGpt2Vocab = 50257;
constexpr int32_t kShardMagic = 20240520;      // uint16 tokens (version 1)
constexpr int32_t kWideShardMagic = 20240801;  // uint32 tokens (version 7)

// A split's tokens: 16 bits each where every token fits (text, GPT-2's shards), else 32 (Llama 3's vocabulary).
class Tokens {
 public:
  Tokens() = default;
  explicit Tokens(std::vector<uint16_t> narrow) : narrow_(std::move(narrow)) {}
  explicit Tokens(std::vector<uint32_t> wide) : wide_(std::move(wide)), is_wide_(true) {}
  size_t size() const { return is_wide_ ? wide_.size() : narrow_.size(); }
  bool empty() const { return size() == 0; }
  bool wide() const { return is_wide_; }
  int32_t operator[](size_t i) const { return is_wide_ ? static_cast<int32_t>(wide_[i]) : narrow_[i]; }
  // Appends tokens [begin, end) of `other` (widening this one if `other` is wide).
  void append(const Tokens& other, size_t begin, size_t end);
  void append(const Tokens& other) { append(other, 0, other.size()); }
  // The raw tokens (what the fingerprint is of): 2 or 4 bytes each.
  const void* data() const { return is_wide_ ? static_cast<const void*>(wide_.data()) : narrow_.data(); }
  size_t bytes() const { return size() * (is_wide_ ? 4 : 2); }
  // The same tokens, whatever their width.
  bool operator==(const Tokens& o) const {
    if (size() != o.size()) return false;
    for (size_t i = 0; i < size(); ++i)
      if ((*this)[i] != o[i]) return false;
    return true;
  }

 private:
  std::vector<uint16_t> narrow_;
  std::vector<uint32_t> wide_;
  bool is_wide_ = false;
};

struct DatasetInfo {
  std::string kind;  // "text" or "token-shards"
  std::string path;
  std::vector<std::string> files;  // read, in order
  int64_t skipped_files = 0;       // binary files and second names of files already read
  int vocab = 0;
  uint64_t fingerprint = 0;        // of the tokens of both splits; checkpoints record it
};

// The files `path` names as TokenDataset::load reads them: the file itself, or a folder's regular files recursively
// in path order, each file once (a second name of a file already listed is skipped).
Result<std::vector<std::string>> data_files(const std::string& path);
// Whether bytes look like text: no NUL byte in their first 64 KiB (what load takes for text).
bool looks_like_text(const std::string& bytes);
// Writes `tokens` as one llm.c token shard (header: magic, version, count, the vocabulary when given (Note [shard
// vocabulary]); then uint16 tokens, or uint32 ones for a wide `tokens`), atomically.
Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);
Status write_token_shard(const std::string& path, const Tokens& tokens, int vocab = 0);

class TokenDataset {
 public:
  static Result<TokenDataset> load(const std::string& path, double val_fraction);
  // A dataset from tokens in memory (tests, benchmarks).
  static TokenDataset from_tokens(Tokens train, Tokens val, int vocab);
  static TokenDataset from_tokens(std::vector<uint16_t> train, std::vector<uint16_t> val, int vocab) {
    return from_tokens(Tokens(std::move(train)), Tokens(std::move(val)), vocab);
  }

  int vocab() const { return info_.vocab; }
  const Tokens& train() const { return train_; }
  const Tokens& val() const { return val_; }
  const DatasetInfo& info() const { return info_; }
  std::string describe() const;

 private:
  DatasetInfo info_;
  Tokens train_, val_;
};

}  // namespace tt::data
