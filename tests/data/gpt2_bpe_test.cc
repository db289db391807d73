// data/gpt2_bpe: GPT-2's tokenizer.
//  - the pre-tokenizer cuts text where GPT-2's pattern does (contractions, an optional space before a run of letters,
//    numbers or other characters, whitespace runs less their last space before a word), letters and numbers by
//    Unicode's categories, invalid UTF-8 as characters of their own;
//  - BPE merges the pair of lowest rank first, every occurrence of it; decode(encode(x)) == x for any bytes;
//    <|endoftext|> in the text is the special token;
//  - files that are not GPT-2's kind are refused, named;
//  - with GPT-2's own files (TT_GPT2_VOCAB_DIR), known ids (the Python tests compare whole texts with tiktoken).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/gpt2_bpe.h"
#include "data/tokenize.h"
#include "temp_dir.h"
#include "gpt2_vocab.h"

namespace tt {
namespace {

using testing::TempDir;
using Pieces = std::vector<std::string>;

Pieces split(const std::string& s) {
  Pieces out;
  for (std::string_view p : Gpt2Bpe::split(s)) out.emplace_back(p);
  return out;
}

TEST(Gpt2Bpe, ThePreTokenizerCutsWhereGpt2sPatternDoes) {
  EXPECT_EQ(split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("it's don't I'll we've they're I'm he'd"),
            (Pieces{"it", "'s", " don", "'t", " I", "'ll", " we", "'ve", " they", "'re", " I", "'m", " he", "'d"}));
  EXPECT_EQ(split("'S"), (Pieces{"'", "S"}));  // the contractions are lower case only
  EXPECT_EQ(split("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("\t\tx"), (Pieces{"\t", "\t", "x"}));
  EXPECT_EQ(split("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(split("3.14 is pi"), (Pieces{"3", ".", "14", " is", " pi"}));
  EXPECT_EQ(split(" 123abc"), (Pieces{" 123", "abc"}));
  EXPECT_EQ(split("hi!!! ?"), (Pieces{"hi", "!!!", " ?"}));
  EXPECT_EQ(split("h\xc3\xa9llo w\xc3\xb6rld"), (Pieces{"h\xc3\xa9llo", " w\xc3\xb6rld"}));      // e-acute, o-umlaut
  EXPECT_EQ(split("\xe6\x97\xa5\xe6\x9c\xac \xe3\x83\x86"), (Pieces{"\xe6\x97\xa5\xe6\x9c\xac", " \xe3\x83\x86"}));
  EXPECT_EQ(split("x\xc2\xbc\xc2\xbd"), (Pieces{"x", "\xc2\xbc\xc2\xbd"}));  // one quarter, one half: numbers
  EXPECT_EQ(split("a\xc2\xa0" "b"), (Pieces{"a", "\xc2\xa0", "b"}));         // no-break space is a space
  EXPECT_EQ(split("\xff\xfe ok"), (Pieces{"\xff\xfe", " ok"}));            // invalid UTF-8: neither letter nor space
  EXPECT_EQ(split(""), Pieces{});
  // The pieces always put the text back together.
  Rng rng(9);
  for (int k = 0; k < 200; ++k) {
    std::string s;
    const char* alphabet[] = {"a", "Z", " ", "  ", "\n", "'", "'s", "7", ".", "\xc3\xa9", "\xe2\x80\x94", "\xff", "\t"};
    for (int i = 0; i < 20; ++i) s += alphabet[rng.uniform_int(13)];
    std::string back;
    for (const std::string& p : split(s)) {
      EXPECT_FALSE(p.empty());
      back += p;
    }
    EXPECT_EQ(back, s);
  }
}

using testing::gpt2_char_of;

// A small byte-level vocabulary in dir (testing::write_small_gpt2_vocab); the folder's path.
std::string write_small_vocab(TempDir& dir, const std::vector<std::pair<std::string, std::string>>& merges) {
  testing::write_small_gpt2_vocab(dir.path(), merges);
  return dir.path();
}

TEST(Gpt2Bpe, MergesTheLowestRankedPairFirst) {
  TempDir dir;
  const std::string sp = gpt2_char_of(' ');  // U+0120
  // Ranks 0.. in this order; "ll" before "he" matters for "hell" (he + ll, not h + ell).
  const std::string where = write_small_vocab(
      dir, {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {"e", "l"}, {sp, "w"}, {"o", "r"}, {sp + "w", "or"},
            {"a", "a"}});
  auto bpe = Gpt2Bpe::load(where);
  ASSERT_TRUE(bpe.is_ok()) << bpe.status().to_string();
  const Gpt2Bpe& t = bpe.value();
  EXPECT_EQ(t.vocab(), 256 + 9 + 1);
  // "hello": ll (rank 0), he (1), he+ll (2), hell+o (3): one token; "el" (rank 4) never gets its chance.
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{259}));
  // " world": " w" then "or" then " w"+"or", then the bytes l and d.
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{259, 263, 'l', 'd'}));
  // Every occurrence of the best pair merges: "aaaaa" -> aa aa a.
  EXPECT_EQ(t.encode("aaaaa"), (std::vector<int32_t>{264, 264, 'a'}));
  // The special token, wherever it is in the text.
  EXPECT_EQ(t.encode("aa<|endoftext|>hello"), (std::vector<int32_t>{264, 265, 259}));
  // Any bytes come back as they were.
  Rng rng(4);
  for (int k = 0; k < 100; ++k) {
    std::string s;
    for (int i = 0; i < 40; ++i) s.push_back(static_cast<char>(rng.uniform_int(256)));
    auto back = t.decode(t.encode(s));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(back.value(), s);
  }
  EXPECT_FALSE(t.decode({266}).is_ok());
  // The decode-only reader agrees on the folder.
  auto v = load_gpt2_vocab(where);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v.value()[259], "hello");
}

TEST(Gpt2Bpe, FilesThatAreNotGpt2sAreRefusedNamed) {
  TempDir dir;
  auto none = Gpt2Bpe::load(dir.path());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no encoder.json"), std::string::npos) << none.status().message();
  write_small_vocab(dir, {{"a", "b"}});
  dir.write("vocab.bpe", "#version: 0.2\na b\nx yz\n");  // "yz" is no token
  auto bad = Gpt2Bpe::load(dir.path());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
  dir.write("vocab.bpe", "#version: 0.2\nab\n");
  auto onetoken = Gpt2Bpe::load(dir.path());
  ASSERT_FALSE(onetoken.is_ok());
  EXPECT_NE(onetoken.status().message().find("not two tokens"), std::string::npos) << onetoken.status().message();
  TempDir nomerges;
  nomerges.write("encoder.json", "{\"a\": 0}");
  auto m = Gpt2Bpe::load(nomerges.path());
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("no vocab.bpe or merges.txt"), std::string::npos) << m.status().message();
}

// Note [tokenize in blocks]: the cut is after a newline with printable ASCII on both sides, and a file read in blocks
// of a few bytes gives the same shards as read whole (and as encode on the whole text).
TEST(Gpt2Bpe, TokenizeInBlocksGivesTheIdsOfTheWholeText) {
  EXPECT_EQ(data::safe_cut("ab\ncd"), 3u);
  EXPECT_EQ(data::safe_cut("ab\ncd\nef"), 6u);    // the last such place
  EXPECT_EQ(data::safe_cut("ab \ncd"), 0u);        // a space before the newline: the run is longer
  EXPECT_EQ(data::safe_cut("ab\r\ncd"), 0u);
  EXPECT_EQ(data::safe_cut("ab\n cd"), 0u);
  EXPECT_EQ(data::safe_cut("ab\n"), 0u);
  EXPECT_EQ(data::safe_cut(""), 0u);
  TempDir dir;
  const std::string sp = gpt2_char_of(' ');
  const std::string where = write_small_vocab(dir, {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {sp, "w"}});
  std::string text;
  Rng rng(21);
  const char* words[] = {"hello", " world", "\n", "\n\n", "  ", "it's", "\r\n", "\xc3\xa9t\xc3\xa9", "42", "!!",
                         "<|endoftext|>", "\t"};
  for (int i = 0; i < 3000; ++i) text += words[rng.uniform_int(12)];
  std::filesystem::create_directories(dir.path() + "/in");
  std::ofstream(dir.path() + "/in/a.txt", std::ios::binary) << text;
  std::ofstream(dir.path() + "/in/b.txt", std::ios::binary) << text.substr(0, 5000);
  std::vector<std::string> shards[2];
  int k = 0;
  for (int64_t chunk : {int64_t(64) << 20, int64_t(7)}) {
    data::TokenizeOptions o;
    o.inputs = {dir.path() + "/in"};
    o.vocab = where;
    o.out = dir.path() + "/out" + std::to_string(chunk);
    o.shard_tokens = 2000;
    o.chunk_bytes = chunk;
    auto r = data::tokenize_to_shards(o, nullptr);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r.value().files, 2);
    for (const std::string& path : r.value().shards) {
      std::ifstream f(path, std::ios::binary);
      shards[k].emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    ++k;
  }
  EXPECT_GT(shards[0].size(), 2u);
  EXPECT_EQ(shards[0], shards[1]);
  // And the ids are encode's of each whole text, after <|endoftext|>.
  auto bpe = Gpt2Bpe::load(where);
  ASSERT_TRUE(bpe.is_ok());
  std::vector<int32_t> want = {bpe.value().vocab() - 1};
  for (int32_t id : bpe.value().encode(text)) want.push_back(id);
  want.push_back(bpe.value().vocab() - 1);
  for (int32_t id : bpe.value().encode(text.substr(0, 5000))) want.push_back(id);
  std::vector<int32_t> got;
  for (const std::string& sh : shards[1])
    for (size_t i = 1024; i + 1 < sh.size(); i += 2)
      got.push_back(static_cast<uint8_t>(sh[i]) | static_cast<uint8_t>(sh[i + 1]) << 8);
  EXPECT_EQ(got, want);
}

// GPT-2's published files, where a test run names them (python/tests compare whole texts with tiktoken).
TEST(Gpt2Bpe, Gpt2sOwnFilesGiveItsKnownIds) {
  const char* dir = std::getenv("TT_GPT2_VOCAB_DIR");
  if (dir == nullptr || *dir == 0) GTEST_SKIP() << "TT_GPT2_VOCAB_DIR is not set (GPT-2's encoder.json and vocab.bpe)";
  auto bpe = Gpt2Bpe::load(dir);
  ASSERT_TRUE(bpe.is_ok()) << bpe.status().to_string();
  EXPECT_EQ(bpe.value().vocab(), 50257);
  EXPECT_EQ(bpe.value().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(bpe.value().encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
}

}  // namespace
}  // namespace tt
