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

constexpr int32_t kMaskedShardVersion = 8;      // uint32 tokens with kNoLoss marks (tiertrain's; llm.c has none)

// Note [loss mask]: fine-tuning data says which tokens are targets the loss counts (a completion's) and which are
// not (a prompt's, a template's): a wide token with bit 31 set (kNoLoss) is input only. The sampler then writes
// target -1 where such a token would be the target; the cross-entropy kernels give such a row loss 0 and no
// gradient, and the step scales the gradient by 1 / (the targets that count) instead of 1 / (B x T) (Model::
// set_loss_scale). Shards of such tokens are version 8 of magic 20240801's format (llm.c reads version 7 only).
constexpr uint32_t kNoLoss = 1u << 31;

// A split's tokens: 16 bits each where every token fits (text, GPT-2's shards), else 32 (Llama 3's vocabulary, and
// any tokens with a loss mask: Note [loss mask]).
class Tokens {
 public:
  Tokens() = default;
  explicit Tokens(std::vector<uint16_t> narrow) : narrow_(std::move(narrow)) {}
  explicit Tokens(std::vector<uint32_t> wide);
  size_t size() const { return is_wide_ ? wide_.size() : narrow_.size(); }
  bool empty() const { return size() == 0; }
  bool wide() const { return is_wide_; }
  int32_t operator[](size_t i) const {
    return is_wide_ ? static_cast<int32_t>(wide_[i] & ~kNoLoss) : narrow_[i];
  }
  // Whether token i is a target the loss counts (Note [loss mask]); and whether any token is not.
  bool counts(size_t i) const { return !is_wide_ || (wide_[i] & kNoLoss) == 0; }
  bool masked() const { return masked_; }
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
  std::vector<uint32_t> wide_;  // with kNoLoss marks (raw: data(), the fingerprint, the shards)
  bool is_wide_ = false;
  bool masked_ = false;         // a token has kNoLoss
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
