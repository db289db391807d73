// data/: text and token-shard loading, folder rules (binary files and second names skipped), the validation split,
// bad input, and the sampler's determinism and resumability.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>

#include "data/dataset.h"
#include "data/sampler.h"
#include "temp_dir.h"

namespace tt::data {
namespace {

using testing::TempDir;

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int32_t magic = kShardMagic,
                 int32_t version = 1, int64_t claimed = -1) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(claimed >= 0 ? claimed : static_cast<int64_t>(tokens.size()));
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof(header));
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

TEST(Dataset, TextFileIsBytesWithTailValidationSplit) {
  TempDir dir;
  const std::string text = "hello world, hello tiertrain\n";
  auto ds = TokenDataset::load(dir.write("a.txt", text), 0.25);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->vocab(), 256);
  EXPECT_EQ(ds->info().kind, "text");
  const size_t n_val = static_cast<size_t>(text.size() * 0.25);
  ASSERT_EQ(ds->val().size(), n_val);
  ASSERT_EQ(ds->train().size(), text.size() - n_val);
  for (size_t i = 0; i < ds->train().size(); ++i) EXPECT_EQ(ds->train()[i], static_cast<unsigned char>(text[i]));
  EXPECT_EQ(ds->val()[ds->val().size() - 1], '\n');
}

TEST(Dataset, FolderSkipsBinaryAndSecondNamesAndReadsInNameOrder) {
  TempDir dir;
  dir.write("b.txt", "bbbb");
  dir.write("a.txt", "aaaa");
  std::string binary("xx\0yy", 5);
  dir.write("a.txt.dat", binary);
  ASSERT_EQ(symlink("a.txt", dir.file("a.u8").c_str()), 0);
  std::filesystem::create_directory(dir.file("sub"));
  dir.write("sub/c.txt", "cccc");
  dir.write(".hidden", "hhhh");
  auto ds = TokenDataset::load(dir.path(), 0.0);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->info().files.size(), 3u);
  EXPECT_EQ(ds->info().skipped_files, 2);  // the .dat (binary) and the symlink to a.txt
  std::string got;
  for (size_t i = 0; i < ds->train().size(); ++i) got += static_cast<char>(ds->train()[i]);
  EXPECT_EQ(got, "aaaabbbbcccc");
  EXPECT_TRUE(ds->val().empty());
}

TEST(Dataset, DefaultCorpusFolderLoadsEachTextFileOnce) {
  const char* corpus = "/usr/share/games/fortunes";
  if (access(corpus, R_OK) != 0) GTEST_SKIP() << corpus << " is not installed (apt-get install fortunes)";
  auto ds = TokenDataset::load(corpus, 0.05);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  std::set<std::string> names(ds->info().files.begin(), ds->info().files.end());
  EXPECT_EQ(names.size(), ds->info().files.size());
  for (const auto& f : ds->info().files) {
    EXPECT_FALSE(f.ends_with(".dat")) << f;
    EXPECT_FALSE(f.ends_with(".u8")) << f;
  }
  EXPECT_GT(ds->train().size(), 2'000'000u);
  EXPECT_GT(ds->val().size(), 100'000u);
}

TEST(Dataset, BadInputGivesClearErrors) {
  TempDir dir;
  auto missing = TokenDataset::load(dir.file("nope.txt"), 0.1);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
  EXPECT_NE(missing.status().message().find("nope.txt"), std::string::npos);

  auto empty = TokenDataset::load(dir.write("empty.txt", ""), 0.1);
  ASSERT_FALSE(empty.is_ok());
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);

  TempDir only_binary;
  only_binary.write("x.dat", std::string("\0\1\2", 3));
  auto bin = TokenDataset::load(only_binary.path(), 0.1);
  ASSERT_FALSE(bin.is_ok());
  EXPECT_NE(bin.status().message().find("no text found"), std::string::npos);

  TempDir empty_dir;
  auto nofiles = TokenDataset::load(empty_dir.path(), 0.1);
  ASSERT_FALSE(nofiles.is_ok());
  EXPECT_NE(nofiles.status().message().find("holds no files"), std::string::npos);

  auto badfrac = TokenDataset::load(dir.write("ok.txt", "abc"), 1.5);
  EXPECT_FALSE(badfrac.is_ok());

  // A path through a regular file cannot exist.
  auto notdir = TokenDataset::load(dir.file("ok.txt") + "/x", 0.1);
  EXPECT_FALSE(notdir.is_ok());
}

TEST(Dataset, TokenShardsWithNamedSplit) {
  TempDir dir;
  std::vector<uint16_t> train = {1, 2, 3, 50256, 7}, val = {9, 8};
  write_shard(dir.file("data_train_000.bin"), train);
  write_shard(dir.file("data_val_000.bin"), val);
  auto ds = TokenDataset::load(dir.path(), 0.5);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->vocab(), kGpt2Vocab);
  EXPECT_EQ(ds->info().kind, "token-shards");
  EXPECT_EQ(ds->train(), Tokens(train));
  EXPECT_EQ(ds->val(), Tokens(val));
}

TEST(Dataset, SingleShardIsSplitByFraction) {
  TempDir dir;
  std::vector<uint16_t> tokens(100);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7);
  write_shard(dir.file("tokens.bin"), tokens);
  auto ds = TokenDataset::load(dir.file("tokens.bin"), 0.1);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->train().size(), 90u);
  EXPECT_EQ(ds->val().size(), 10u);
  EXPECT_EQ(ds->val()[0], tokens[90]);
}

TEST(Dataset, MalformedShardsAreNamed) {
  TempDir dir;
  write_shard(dir.file("short.bin"), {1, 2, 3}, kShardMagic, 1, /*claimed=*/10);
  auto truncated = TokenDataset::load(dir.file("short.bin"), 0.1);
  ASSERT_FALSE(truncated.is_ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);

  write_shard(dir.file("v2.bin"), {1, 2, 3}, kShardMagic, 2);
  auto version = TokenDataset::load(dir.file("v2.bin"), 0.1);
  ASSERT_FALSE(version.is_ok());
  EXPECT_NE(version.status().message().find("version 2"), std::string::npos);

  write_shard(dir.file("big.bin"), {1, 60000, 3});
  auto big = TokenDataset::load(dir.file("big.bin"), 0.1);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("60000"), std::string::npos);
}

// Shards of uint32 tokens (llm.c's Llama 3 shards: magic 20240801, version 7): tokens beyond 16 bits, the vocabulary
// their largest token + 1 (GPT-2's at least where uint16 shards are beside them), the sampler's windows their values;
// a wide dataset written back reads the same; a wrong version or a token past 2^31 - 2 is named.
TEST(Dataset, WideShardsHoldTokensBeyondSixteenBits) {
  TempDir dir;
  std::vector<uint32_t> wide(300);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<uint32_t>(70000 + i * 173 % 58000);
  std::filesystem::create_directories(dir.file("w"));
  ASSERT_TRUE(write_token_shard(dir.file("w/train_000.bin"), Tokens(wide)).is_ok());
  auto ds = TokenDataset::load(dir.file("w/train_000.bin"), 0.1);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_TRUE(ds->train().wide());
  uint32_t most = 0;
  for (uint32_t t : wide) most = std::max(most, t);
  EXPECT_EQ(ds->vocab(), static_cast<int>(most) + 1);
  EXPECT_EQ(ds->train().size(), 270u);
  EXPECT_EQ(ds->train()[5], static_cast<int32_t>(wide[5]));
  EXPECT_EQ(ds->val()[0], static_cast<int32_t>(wide[270]));
  auto s = BatchSampler::create(&ds->train(), 2, 8, 3);
  ASSERT_TRUE(s.is_ok());
  std::vector<int32_t> x(16), y(16);
  s->next(x.data(), y.data());
  for (int32_t t : x) EXPECT_GE(t, 70000);
  // Beside a GPT-2 shard: one dataset, widened.
  std::vector<uint16_t> narrow(100, 7);
  write_shard(dir.file("w/train_001.bin"), narrow);
  auto mixed = TokenDataset::load(dir.file("w"), 0.0);
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().to_string();
  EXPECT_EQ(mixed->train().size(), 400u);
  EXPECT_EQ(mixed->train()[399], 7);
  EXPECT_EQ(mixed->vocab(), std::max(static_cast<int>(most) + 1, kGpt2Vocab));
  // A wrong version, a token past the range.
  std::string bytes(1024 + 8, '\0');
  const int32_t header[3] = {kWideShardMagic, 1, 2};
  std::memcpy(bytes.data(), header, sizeof header);
  dir.write("v1.bin", bytes);
  auto v = TokenDataset::load(dir.file("v1.bin"), 0.0);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find("version 1; magic 20240801's shards are version 7"), std::string::npos)
      << v.status().message();
  const int32_t ok[3] = {kWideShardMagic, 7, 2};
  std::memcpy(bytes.data(), ok, sizeof ok);
  const uint32_t huge[2] = {5, 0xffffffffu};
  std::memcpy(bytes.data() + 1024, huge, sizeof huge);
  dir.write("huge.bin", bytes);
  auto h = TokenDataset::load(dir.file("huge.bin"), 0.0);
  ASSERT_FALSE(h.is_ok());
  EXPECT_NE(h.status().message().find("not below the shard's vocabulary (2147483646)"), std::string::npos)
      << h.status().message();
}

// Note [shard vocabulary]: the vocabulary tokenize writes in header word 3 is the dataset's (not the largest token +
// 1); a token at or past it, or a uint16 shard saying more than 65536, is named; llm.c's shards (word 3 is 0) keep
// the rules above.
TEST(Dataset, TheVocabularyAShardSaysIsTheDatasets) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("w"));
  ASSERT_TRUE(write_token_shard(dir.file("w/train_000.bin"), Tokens(std::vector<uint32_t>{5, 70000, 9}), 128256).is_ok());
  ASSERT_TRUE(write_token_shard(dir.file("w/val_000.bin"), Tokens(std::vector<uint32_t>{1, 2}), 128256).is_ok());
  auto wide = TokenDataset::load(dir.file("w"), 0.0);
  ASSERT_TRUE(wide.is_ok()) << wide.status().to_string();
  EXPECT_EQ(wide->vocab(), 128256);
  ASSERT_TRUE(write_token_shard(dir.file("n.bin"), Tokens(std::vector<uint16_t>{5, 2999, 9}), 3000).is_ok());
  auto narrow = TokenDataset::load(dir.file("n.bin"), 0.0);
  ASSERT_TRUE(narrow.is_ok()) << narrow.status().to_string();
  EXPECT_EQ(narrow->vocab(), 3000);
  ASSERT_TRUE(write_token_shard(dir.file("past.bin"), Tokens(std::vector<uint16_t>{5, 3000}), 3000).is_ok());
  auto past = TokenDataset::load(dir.file("past.bin"), 0.0);
  ASSERT_FALSE(past.is_ok());
  EXPECT_NE(past.status().message().find("outside the shard's vocabulary (3000)"), std::string::npos)
      << past.status().message();
  EXPECT_FALSE(write_token_shard(dir.file("x.bin"), Tokens(std::vector<uint16_t>{1}), 70000).is_ok());
  std::string bytes(1024 + 2, '\0');
  const int32_t header[4] = {kShardMagic, 1, 1, 70000};
  std::memcpy(bytes.data(), header, sizeof header);
  dir.write("said.bin", bytes);
  auto said = TokenDataset::load(dir.file("said.bin"), 0.0);
  ASSERT_FALSE(said.is_ok());
  EXPECT_NE(said.status().message().find("says its vocabulary is 70000"), std::string::npos) << said.status().message();
}

// count_ahead counts what the next batches' next() will return, within an epoch and across its end, and moves nothing.
TEST(Sampler, CountAheadIsWhatTheNextBatchesCount) {
  std::vector<uint32_t> raw(3000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint32_t>(i % 251) | ((i * 7) % 5 < 2 ? kNoLoss : 0u);
  const Tokens tokens(raw);
  ASSERT_TRUE(tokens.masked());
  auto s = BatchSampler::create(&tokens, 3, 16, 5);
  ASSERT_TRUE(s.is_ok());
  std::vector<int32_t> x(48), y(48);
  for (int step = 0; step < 80; ++step) {  // several epochs of 187 windows
    const int64_t ahead = s->count_ahead(2);
    const SamplerState before = s->state();
    EXPECT_EQ(s->count_ahead(2), ahead);
    EXPECT_EQ(s->state().cursor, before.cursor);
    const int64_t a = s->next(x.data(), y.data());
    const int64_t b = s->next(x.data(), y.data());
    EXPECT_EQ(a + b, ahead) << "step " << step;
  }
}

TEST(Sampler, DeterministicFromSeedAndResumable) {
  std::vector<uint16_t> raw(5000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint16_t>(i % 251);
  const Tokens tokens(raw);
  const int B = 3, T = 16;
  auto a = BatchSampler::create(&tokens, B, T, 7);
  auto b = BatchSampler::create(&tokens, B, T, 7);
  auto c = BatchSampler::create(&tokens, B, T, 8);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  std::vector<int32_t> xa(B * T), ya(B * T), xb(B * T), yb(B * T), xc(B * T), yc(B * T);
  bool any_diff_seed = false;
  SamplerState mid;
  std::vector<std::vector<int32_t>> after_mid;
  // Several epochs' worth (5000/16 ~ 312 windows, 104 batches per epoch).
  for (int step = 0; step < 300; ++step) {
    a->next(xa.data(), ya.data());
    b->next(xb.data(), yb.data());
    c->next(xc.data(), yc.data());
    ASSERT_EQ(xa, xb);
    ASSERT_EQ(ya, yb);
    any_diff_seed |= xa != xc;
    for (int i = 0; i < B; ++i)
      for (int t = 0; t + 1 < T; ++t) ASSERT_EQ(ya[i * T + t], xa[i * T + t + 1]);  // targets are shifted inputs
    if (step == 150) mid = a->state();
    if (step > 150) after_mid.push_back(xa);
  }
  EXPECT_TRUE(any_diff_seed);
  EXPECT_GE(a->state().epoch, 2u);
  auto resumed = BatchSampler::create(&tokens, B, T, 7);
  ASSERT_TRUE(resumed.is_ok());
  resumed->set_state(mid);
  for (const auto& want : after_mid) {
    resumed->next(xb.data(), yb.data());
    ASSERT_EQ(xb, want);
  }
}

// A data-parallel mesh's ranks (issue 21): shard k of N gets the k-th run of B/N windows of the batch the
// single-device sampler draws, and every shard's sampler stays at the single-device state, across epochs.
TEST(Sampler, ShardsTogetherAreTheSingleDeviceBatch) {
  std::vector<uint16_t> raw(3000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint16_t>((i * 7) % 251);
  const Tokens tokens(raw);
  const int B = 8, T = 16, N = 4, local = B / N;
  auto whole = BatchSampler::create(&tokens, B, T, 3);
  ASSERT_TRUE(whole.is_ok());
  std::vector<BatchSampler> shards;
  for (int k = 0; k < N; ++k) shards.push_back(BatchSampler::create(&tokens, B, T, 3).value());
  std::vector<int32_t> x(B * T), y(B * T), xs(local * T), ys(local * T);
  for (int step = 0; step < 80; ++step) {  // ~186 windows an epoch, 8 a step: several epochs
    whole->next(x.data(), y.data());
    for (int k = 0; k < N; ++k) {
      std::fill(xs.begin(), xs.end(), -1);
      shards[static_cast<size_t>(k)].next(xs.data(), ys.data(), k, N);
      ASSERT_TRUE(std::equal(xs.begin(), xs.end(), x.begin() + k * local * T)) << "step " << step << " shard " << k;
      ASSERT_TRUE(std::equal(ys.begin(), ys.end(), y.begin() + k * local * T));
      ASSERT_EQ(shards[static_cast<size_t>(k)].state().epoch, whole->state().epoch);
      ASSERT_EQ(shards[static_cast<size_t>(k)].state().cursor, whole->state().cursor);
    }
  }
  EXPECT_GE(whole->state().epoch, 2u);
}

TEST(Sampler, EpochVisitsEveryWindowOnce) {
  std::vector<uint16_t> raw(1001);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint16_t>(i);
  const Tokens tokens(raw);
  const int T = 10;
  auto s = BatchSampler::create(&tokens, 1, T, 3);
  ASSERT_TRUE(s.is_ok());
  const uint64_t n = s->windows_in_epoch();
  std::set<int32_t> starts;
  std::vector<int32_t> x(T), y(T);
  for (uint64_t i = 0; i < n; ++i) {
    s->next(x.data(), y.data());
    starts.insert(x[0]);
  }
  EXPECT_EQ(starts.size(), n);
  EXPECT_EQ(s->state().epoch, 0u);
  for (int32_t st : starts) EXPECT_EQ(st % T, *starts.begin() % T);  // one offset per epoch
}

TEST(Sampler, TooFewTokensIsAnError) {
  const Tokens tokens(std::vector<uint16_t>(20));
  auto s = BatchSampler::create(&tokens, 2, 16, 1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("too few"), std::string::npos);
}

TEST(Sampler, ValidationBatchesAreConsecutiveWindows) {
  std::vector<uint16_t> raw(100);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint16_t>(i);
  const Tokens tokens(raw);
  EXPECT_EQ(val_batches_available(tokens, 2, 10), 4);  // 9 windows of 11 tokens -> 4 batches of 2
  std::vector<int32_t> x(20), y(20);
  val_batch(tokens, 2, 10, 1, x.data(), y.data());
  EXPECT_EQ(x[0], 20);
  EXPECT_EQ(x[10], 30);
  EXPECT_EQ(y[9], 30);
}

}  // namespace
}  // namespace tt::data
