// data/dataset: token datasets for language-model training, loaded whole into host memory with a validation split.
//
// Two sources:
//  - text: a file, or a folder of files (recursively, in name order), read as bytes: vocabulary 256. Files that are
//    not text (a NUL byte in their first 64 KiB, like fortune's .dat indexes) and files already read through another
//    name (symlinks such as fortune's .u8) are skipped, so every file is read once.
//  - token shards in llm.c's format (.bin: a 256 x int32 header, magic 20240520, version 1, token count; then uint16
//    tokens of the GPT-2 vocabulary, 50257). A folder of shards uses the files named *train* for training and *val*
//    for validation when both exist.
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
constexpr int32_t kShardMagic = 20240520;

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
// Writes `tokens` as one llm.c token shard (header: magic, version 1, count; then uint16 tokens), atomically.
Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

class TokenDataset {
 public:
  static Result<TokenDataset> load(const std::string& path, double val_fraction);
  // A dataset from tokens in memory (tests, benchmarks).
  static TokenDataset from_tokens(std::vector<uint16_t> train, std::vector<uint16_t> val, int vocab);

  int vocab() const { return info_.vocab; }
  const std::vector<uint16_t>& train() const { return train_; }
  const std::vector<uint16_t>& val() const { return val_; }
  const DatasetInfo& info() const { return info_; }
  std::string describe() const;

 private:
  DatasetInfo info_;
  std::vector<uint16_t> train_, val_;
};

}  // namespace tt::data
