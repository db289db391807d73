#include "data/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <set>
#include <sys/stat.h>
#include <utility>

#include "core/atomic_file.h"
#include "core/log.h"
#include "core/tensorfile.h"
#include "core/units.h"

namespace tt::data {
namespace {

constexpr size_t kTextProbeBytes = 64 * 1024;

Result<std::string> read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  TT_RETURN_IF(f == nullptr, kIoError, "cannot read data file '%s': %s", path.c_str(), std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  TT_RETURN_IF(failed, kIoError, "reading data file '%s' failed: %s", path.c_str(), std::strerror(err));
  return bytes;
}

// Regular files under dir, recursively, sorted by path; symlinks are followed but each file (device, inode) is
// listed once, under the first name in sorted order.
Status list_files(const std::string& dir, std::vector<std::string>* out, std::set<std::pair<dev_t, ino_t>>* seen,
                  int64_t* skipped) {
  DIR* d = opendir(dir.c_str());
  TT_RETURN_IF(d == nullptr, kIoError, "cannot read folder '%s': %s", dir.c_str(), std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  // Real files before symlinks, so a file is named by itself rather than by a link to it.
  std::vector<std::string> files, links, dirs;
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    struct stat lst {};
    if (lstat(path.c_str(), &lst) != 0) continue;
    if (S_ISLNK(lst.st_mode)) links.push_back(path);
    else if (S_ISDIR(lst.st_mode)) dirs.push_back(path);
    else if (S_ISREG(lst.st_mode)) files.push_back(path);
  }
  std::vector<std::string> mine;
  for (const auto& group : {files, links}) {
    for (const auto& path : group) {
      struct stat st {};
      if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // dangling link or link to a folder
      if (!seen->insert({st.st_dev, st.st_ino}).second) {
        ++*skipped;
        TT_LOG(TRACE, DATA, "skipping '%s': already read under another name", path.c_str());
        continue;
      }
      mine.push_back(path);
    }
  }
  std::sort(mine.begin(), mine.end());
  out->insert(out->end(), mine.begin(), mine.end());
  for (const auto& sub : dirs) TT_TRY(list_files(sub, out, seen, skipped));
  return Status::ok();
}

bool is_shard(const std::string& bytes) {
  int32_t header[3];
  if (bytes.size() < 256 * sizeof(int32_t)) return false;
  std::memcpy(header, bytes.data(), sizeof(header));
  return header[0] == kShardMagic || header[0] == kWideShardMagic;
}

// Note [shard vocabulary]: llm.c's header is 256 int32 words (magic, version, token count, the rest 0); tiertrain's
// tokenize writes its tokenizer's vocabulary in word 3, so that a model of the shards has the tokenizer's vocabulary
// (not the largest token seen + 1). 0: not said (llm.c's shards: GPT-2's 50257 for uint16 tokens).
Result<Tokens> parse_shard(const std::string& path, const std::string& bytes, int32_t* vocab) {
  int32_t header[256];
  TT_RETURN_IF(bytes.size() < sizeof(header), kDataLoss, "token shard '%s' is shorter than its 1024-byte header",
               path.c_str());
  std::memcpy(header, bytes.data(), sizeof(header));
  const bool wide = header[0] == kWideShardMagic;
  TT_RETURN_IF(header[0] != kShardMagic && !wide, kDataLoss,
               "'%s' is not a token shard (magic %d, expected %d or %d)", path.c_str(), header[0], kShardMagic,
               kWideShardMagic);
  TT_RETURN_IF(header[1] != (wide ? 7 : 1) && !(wide && header[1] == kMaskedShardVersion), kDataLoss,
               "token shard '%s' has version %d; magic %d's shards are version %d (%s tokens)%s", path.c_str(),
               header[1], header[0], wide ? 7 : 1, wide ? "uint32" : "uint16",
               wide ? " or 8 (with a loss mask)" : "");
  const uint32_t mask = header[1] == kMaskedShardVersion ? kNoLoss : 0;
  const int64_t n = header[2];
  *vocab = header[3];
  TT_RETURN_IF(header[3] < 0 || (!wide && header[3] > 65536), kDataLoss,
               "token shard '%s' says its vocabulary is %d tokens (header word 3)", path.c_str(), header[3]);
  const size_t esize = wide ? 4 : 2;
  const size_t want = sizeof(header) + static_cast<size_t>(n) * esize;
  TT_RETURN_IF(n < 0 || bytes.size() != want, kDataLoss,
               "token shard '%s' is truncated or malformed: header says %lld tokens (%zu bytes), file has %zu bytes",
               path.c_str(), static_cast<long long>(n), want, bytes.size());
  if (wide) {
    std::vector<uint32_t> tokens(static_cast<size_t>(n));
    if (n > 0) std::memcpy(tokens.data(), bytes.data() + sizeof(header), tokens.size() * 4);
    const uint32_t bound = *vocab > 0 ? static_cast<uint32_t>(*vocab) : static_cast<uint32_t>(INT32_MAX - 1);
    for (size_t i = 0; i < tokens.size(); ++i)
      TT_RETURN_IF((tokens[i] & ~mask) >= bound, kDataLoss,
                   "token shard '%s': token %u at position %zu is not below the shard's vocabulary (%u)", path.c_str(),
                   tokens[i] & ~mask, i, bound);
    return Tokens(std::move(tokens));
  }
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  if (n > 0) std::memcpy(tokens.data(), bytes.data() + sizeof(header), tokens.size() * sizeof(uint16_t));
  const int bound = *vocab > 0 ? *vocab : kGpt2Vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    TT_RETURN_IF(tokens[i] >= bound, kDataLoss,
                 "token shard '%s': token %u at position %zu is outside the %s vocabulary (%d)", path.c_str(),
                 tokens[i], i, *vocab > 0 ? "shard's" : "GPT-2", bound);
  return Tokens(std::move(tokens));
}

void split_append(const Tokens& tokens, double val_fraction, Tokens* train, Tokens* val) {
  const size_t n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * val_fraction);
  train->append(tokens, 0, tokens.size() - n_val);
  val->append(tokens, tokens.size() - n_val, tokens.size());
}

uint64_t fingerprint(const Tokens& train, const Tokens& val) {
  const uint32_t a = crc32_of(train.data(), train.bytes()), b = crc32_of(val.data(), val.bytes());
  return (static_cast<uint64_t>(a) << 32) | b;
}

bool name_has(const std::string& path, const char* word) {
  const size_t slash = path.rfind('/');
  return path.find(word, slash == std::string::npos ? 0 : slash) != std::string::npos;
}

}  // namespace

bool looks_like_text(const std::string& bytes) {
  const size_t n = std::min(bytes.size(), kTextProbeBytes);
  return std::memchr(bytes.data(), '\0', n) == nullptr;
}

Result<std::vector<std::string>> data_files(const std::string& path) {
  struct stat st {};
  TT_RETURN_IF(stat(path.c_str(), &st) != 0, kNotFound, "data path '%s' does not exist: %s", path.c_str(),
               std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    TT_RETURN_IF(!S_ISREG(st.st_mode), kFailedPrecondition,
                 "data path '%s' is neither a file nor a folder (a device, pipe or socket)", path.c_str());
    return std::vector<std::string>{path};
  }
  std::vector<std::string> files;
  std::set<std::pair<dev_t, ino_t>> seen;
  int64_t skipped = 0;
  TT_TRY(list_files(path, &files, &seen, &skipped));
  return files;
}

Tokens::Tokens(std::vector<uint32_t> wide) : wide_(std::move(wide)), is_wide_(true) {
  for (uint32_t t : wide_) masked_ = masked_ || (t & kNoLoss) != 0;
}

void Tokens::append(const Tokens& other, size_t begin, size_t end) {
  if (other.masked_)
    for (size_t i = begin; i < end && !masked_; ++i) masked_ = !other.counts(i);
  if (other.is_wide_ && !is_wide_) {
    wide_.assign(narrow_.begin(), narrow_.end());
    narrow_.clear();
    is_wide_ = true;
  }
  if (is_wide_) {
    if (other.is_wide_) {
      wide_.insert(wide_.end(), other.wide_.begin() + static_cast<ptrdiff_t>(begin),
                   other.wide_.begin() + static_cast<ptrdiff_t>(end));
    } else {
      wide_.insert(wide_.end(), other.narrow_.begin() + static_cast<ptrdiff_t>(begin),
                   other.narrow_.begin() + static_cast<ptrdiff_t>(end));
    }
    return;
  }
  narrow_.insert(narrow_.end(), other.narrow_.begin() + static_cast<ptrdiff_t>(begin),
                 other.narrow_.begin() + static_cast<ptrdiff_t>(end));
}

Status write_token_shard(const std::string& path, const Tokens& tokens, int vocab) {
  TT_RETURN_IF(tokens.size() > static_cast<size_t>(INT32_MAX), kInvalidArgument,
               "token shard '%s': %zu tokens, a shard's header counts at most 2^31 - 1", path.c_str(), tokens.size());
  TT_RETURN_IF(vocab < 0 || (!tokens.wide() && vocab > 65536), kInvalidArgument,
               "token shard '%s': a vocabulary of %d in a shard of %s tokens", path.c_str(), vocab,
               tokens.wide() ? "uint32" : "uint16");
  int32_t header[256] = {};
  header[0] = tokens.wide() ? kWideShardMagic : kShardMagic;
  header[1] = tokens.masked() ? kMaskedShardVersion : tokens.wide() ? 7 : 1;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = vocab;  // Note [shard vocabulary]
  std::string bytes(sizeof(header) + tokens.bytes(), '\0');
  std::memcpy(bytes.data(), header, sizeof(header));
  if (!tokens.empty()) std::memcpy(bytes.data() + sizeof(header), tokens.data(), tokens.bytes());
  return write_file_atomically(path, bytes);
}

Status write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  return write_token_shard(path, Tokens(tokens));
}

TokenDataset TokenDataset::from_tokens(Tokens train, Tokens val, int vocab) {
  TokenDataset ds;
  ds.train_ = std::move(train);
  ds.val_ = std::move(val);
  ds.info_.kind = "memory";
  ds.info_.path = "(memory)";
  ds.info_.vocab = vocab;
  ds.info_.fingerprint = fingerprint(ds.train_, ds.val_);
  return ds;
}

Result<TokenDataset> TokenDataset::load(const std::string& path, double val_fraction) {
  TT_RETURN_IF(path.empty(), kInvalidArgument, "no data path given (--data)");
  TT_RETURN_IF(!(val_fraction >= 0.0 && val_fraction < 1.0), kInvalidArgument,
               "validation fraction %g is outside [0, 1)", val_fraction);
  struct stat st {};
  TT_RETURN_IF(stat(path.c_str(), &st) != 0, kNotFound, "data path '%s' does not exist: %s", path.c_str(),
               std::strerror(errno));
  DatasetInfo info;
  info.path = path;
  std::vector<std::string> candidates;
  std::set<std::pair<dev_t, ino_t>> seen;
  if (S_ISDIR(st.st_mode)) {
    TT_TRY(list_files(path, &candidates, &seen, &info.skipped_files));
    TT_RETURN_IF(candidates.empty(), kNotFound, "data folder '%s' holds no files", path.c_str());
  } else {
    TT_RETURN_IF(!S_ISREG(st.st_mode), kFailedPrecondition,
                 "data path '%s' is neither a file nor a folder (a device, pipe or socket)", path.c_str());
    candidates.push_back(path);
  }

  // Read everything once; decide between shards and text by the first file that is either.
  std::vector<std::pair<std::string, std::string>> contents;
  bool shards = false;
  for (const auto& file : candidates) {
    TT_ASSIGN_OR_RETURN(std::string bytes, read_file(file));
    if (is_shard(bytes)) shards = true;
    contents.emplace_back(file, std::move(bytes));
  }

  TokenDataset ds;
  if (shards) {
    info.kind = "token-shards";
    info.vocab = kGpt2Vocab;
    bool any_wide = false, any_narrow = false;
    int32_t wide_vocab = 0;  // uint32 shards: the largest token + 1 (at least GPT-2's, when mixed with its shards)
    int32_t said_vocab = 0;  // the largest vocabulary a shard's header says (Note [shard vocabulary])
    bool all_say = true;
    bool named_split = false, has_train = false, has_val = false;
    for (const auto& [file, bytes] : contents) {
      if (!is_shard(bytes)) continue;
      has_train |= name_has(file, "train");
      has_val |= name_has(file, "val");
    }
    named_split = has_train && has_val;
    // Issue 47: only validation shards (val_*.bin without a train_*.bin) are a mistake, not a corpus to train on.
    TT_RETURN_IF(has_val && !has_train, kFailedPrecondition,
                 "data '%s' holds validation shards (names with \"val\") and no training shard (names with "
                 "\"train\"): give the folder that has both, or rename the shards",
                 path.c_str());
    for (const auto& [file, bytes] : contents) {
      if (!is_shard(bytes)) {
        ++info.skipped_files;
        TT_LOG(INFO, DATA, "skipping '%s': not a token shard", file.c_str());
        continue;
      }
      int32_t said = 0;
      TT_ASSIGN_OR_RETURN(Tokens tokens, parse_shard(file, bytes, &said));
      said_vocab = std::max(said_vocab, said);
      all_say = all_say && said > 0;
      for (size_t i = 0; tokens.wide() && i < tokens.size(); ++i) wide_vocab = std::max(wide_vocab, tokens[i] + 1);
      any_wide = any_wide || tokens.wide();
      any_narrow = any_narrow || !tokens.wide();
      if (named_split) {
        (name_has(file, "val") ? ds.val_ : ds.train_).append(tokens);
      } else {
        split_append(tokens, val_fraction, &ds.train_, &ds.val_);
      }
      info.files.push_back(file);
    }
    if (any_wide) info.vocab = std::max(wide_vocab, any_narrow ? kGpt2Vocab : 2);
    info.vocab = all_say ? said_vocab : std::max(info.vocab, said_vocab);
  } else {
    info.kind = "text";
    info.vocab = kByteVocab;
    for (const auto& [file, bytes] : contents) {
      if (bytes.empty()) {
        TT_RETURN_IF(candidates.size() == 1, kDataLoss, "data file '%s' is empty", file.c_str());
        ++info.skipped_files;
        continue;
      }
      if (!looks_like_text(bytes)) {
        // A file given (not a folder) that is neither: say what it is not, and what a shard's first bytes would be.
        if (!S_ISDIR(st.st_mode)) {
          int32_t magic = 0;
          std::memcpy(&magic, bytes.data(), std::min(bytes.size(), sizeof(magic)));
          return make_status(StatusCode::kDataLoss,
                             "data file '%s' is neither text (it has NUL bytes) nor a token shard (its first 4 bytes "
                             "read %d; a shard's are %d, then version 1 and its token count in a 1024-byte header)",
                             file.c_str(), magic, kShardMagic);
        }
        ++info.skipped_files;
        TT_LOG(TRACE, DATA, "skipping '%s': binary (NUL byte in its first 64 KiB)", file.c_str());
        continue;
      }
      std::vector<uint16_t> bytes16(bytes.size());
      for (size_t i = 0; i < bytes.size(); ++i) bytes16[i] = static_cast<unsigned char>(bytes[i]);
      split_append(Tokens(std::move(bytes16)), val_fraction, &ds.train_, &ds.val_);
      info.files.push_back(file);
    }
    TT_RETURN_IF(info.files.empty(), kDataLoss, "no text found at '%s' (%lld files skipped as binary or empty)",
                 path.c_str(), static_cast<long long>(info.skipped_files));
  }
  TT_RETURN_IF(ds.train_.empty(), kDataLoss, "data at '%s' holds no training tokens", path.c_str());
  info.fingerprint = fingerprint(ds.train_, ds.val_);
  ds.info_ = std::move(info);
  TT_LOG(INFO, DATA, "%s", ds.describe().c_str());
  return ds;
}

std::string TokenDataset::describe() const {
  return str_format("%s data '%s': %zu file(s), %lld skipped, vocab %d, %zu train + %zu val tokens",
                    info_.kind.c_str(), info_.path.c_str(), info_.files.size(),
                    static_cast<long long>(info_.skipped_files), info_.vocab, train_.size(), val_.size());
}

}  // namespace tt::data
