#include "data/tokenize.h"

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
#include "data/gpt2_bpe.h"

namespace tt::data {
namespace {

Result<std::string> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TT_RETURN_IF(!in, kIoError, "cannot read '%s': %s", path.c_str(), std::strerror(errno));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Result<TokenizeResult> tokenize_to_shards(const TokenizeOptions& o, FILE* progress) {
  TT_RETURN_IF(o.inputs.empty(), kInvalidArgument, "tokenize: no input files or folders given");
  TT_RETURN_IF(o.out.empty(), kInvalidArgument, "tokenize: no output folder given (--out)");
  TT_RETURN_IF(o.shard_tokens < 1 || o.val_tokens < 0, kInvalidArgument,
               "tokenize: --shard-tokens must be >= 1 and --val-tokens >= 0");
  TT_RETURN_IF(o.vocab.empty(), kInvalidArgument,
               "tokenize: --vocab names GPT-2's encoder.json and vocab.bpe (a folder holding both)");
  TT_ASSIGN_OR_RETURN(Gpt2Bpe bpe, Gpt2Bpe::load(o.vocab));
  TT_RETURN_IF(bpe.vocab() > kGpt2Vocab, kFailedPrecondition,
               "tokenize: %s has %d tokens; shards hold GPT-2's %d (uint16 ids below it)", o.vocab.c_str(),
               bpe.vocab(), kGpt2Vocab);
  const std::vector<int32_t> eot = bpe.encode("<|endoftext|>");
  TT_RETURN_IF(eot.size() != 1, kFailedPrecondition, "tokenize: %s has no <|endoftext|> token", o.vocab.c_str());
  std::vector<std::string> files;
  for (const std::string& in : o.inputs) {
    TT_ASSIGN_OR_RETURN(std::vector<std::string> f, data_files(in));
    files.insert(files.end(), f.begin(), f.end());
  }
  TT_TRY(make_directories(o.out, "tokenize --out"));

  TokenizeResult r;
  std::vector<uint16_t> shard;
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
      TT_TRY(write_token_shard(path, std::vector<uint16_t>(shard.begin(), shard.begin() + static_cast<long>(n))));
      r.shards.push_back(path);
      shard.erase(shard.begin(), shard.begin() + static_cast<long>(n));
      val_done = true;
      if (shard.empty()) return Status::ok();
    }
  };
  Gpt2Bpe::PieceCache cache;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  for (const std::string& file : files) {
    TT_ASSIGN_OR_RETURN(std::string text, read_all(file));
    if (text.empty() || !looks_like_text(text)) {
      ++r.skipped;
      continue;
    }
    ++r.files;
    r.bytes += static_cast<int64_t>(text.size());
    shard.push_back(static_cast<uint16_t>(eot[0]));
    ++r.tokens;
    if (o.print_ids && progress) std::fprintf(progress, "%d", eot[0]);
    for (int32_t id : bpe.encode(text, &cache)) {
      shard.push_back(static_cast<uint16_t>(id));
      ++r.tokens;
      if (o.print_ids && progress) std::fprintf(progress, " %d", id);
      if (shard.size() >= static_cast<size_t>(std::max(o.shard_tokens, o.val_tokens))) TT_TRY(flush(false));
    }
    if (o.print_ids && progress) std::fputc('\n', progress);
    const auto now = std::chrono::steady_clock::now();
    if (progress && !o.print_ids && now - last_report > std::chrono::seconds(5)) {
      last_report = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(progress, "tokenize: %lld files, %s read (%s/s)\n", static_cast<long long>(r.files),
                   format_bytes(r.bytes).c_str(), format_bytes(static_cast<int64_t>(r.bytes / s)).c_str());
    }
  }
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

}  // namespace tt::data
