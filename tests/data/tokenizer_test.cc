// data/tokenizer: byte-level BPE tokenizers (GPT-2's files, tokenizer.json).
//  - the pre-tokenizers cut text where GPT-2's, Llama 3's and Qwen2's patterns do (contractions, an optional space
//    or other character before a run of letters, numbers in runs of 1 or 3, whitespace runs less their last space
//    before a word, newlines), letters and numbers by Unicode's categories, invalid UTF-8 as characters of their own;
//  - BPE merges the pair of lowest rank first, every occurrence of it; decode(encode(x)) == x for any bytes;
//    added tokens in the text are cut out whole (leftmost, longest), lstrip/rstrip taking the whitespace beside them;
//  - tokenizer.json: ignore_merges, merges as strings or pairs, the template's tokens, NFC (checked against Python's
//    unicodedata on chosen cases); what is not a byte-level BPE of these kinds is refused, named;
//  - with GPT-2's own files (TT_GPT2_VOCAB_DIR), known ids (the Python tests compare whole texts with tiktoken and
//    with Hugging Face's tokenizers).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokenize.h"
#include "temp_dir.h"
#include "gpt2_vocab.h"

namespace tt {
namespace {

using testing::TempDir;
using Pieces = std::vector<std::string>;

Pieces split(const std::string& s) {
  Pieces out;
  for (std::string_view p : Tokenizer::split(Pattern{Pattern::kGpt2, 0}, s)) out.emplace_back(p);
  return out;
}

TEST(Tokenizer, Gpt2sPreTokenizerCutsWhereItsPatternDoes) {
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

// Random bytes (40 at a time, 100 times) decode from their ids to themselves.
void expect_any_bytes_come_back(const Tokenizer& t, uint64_t seed) {
  Rng rng(seed);
  for (int k = 0; k < 100; ++k) {
    std::string s;
    for (int i = 0; i < 40; ++i) s.push_back(static_cast<char>(rng.uniform_int(256)));
    auto back = t.decode(t.encode(s));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(back.value(), s);
  }
}

// A small byte-level vocabulary in dir (testing::write_small_gpt2_vocab); the folder's path.
std::string write_small_vocab(TempDir& dir, const std::vector<std::pair<std::string, std::string>>& merges) {
  testing::write_small_gpt2_vocab(dir.path(), merges);
  return dir.path();
}

TEST(Tokenizer, MergesTheLowestRankedPairFirst) {
  TempDir dir;
  const std::string sp = gpt2_char_of(' ');  // U+0120
  // Ranks 0.. in this order; "ll" before "he" matters for "hell" (he + ll, not h + ell).
  const std::string where = write_small_vocab(
      dir, {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {"e", "l"}, {sp, "w"}, {"o", "r"}, {sp + "w", "or"},
            {"a", "a"}});
  auto bpe = Tokenizer::load(where);
  ASSERT_TRUE(bpe.is_ok()) << bpe.status().to_string();
  const Tokenizer& t = bpe.value();
  EXPECT_EQ(t.vocab(), 256 + 9 + 1);
  // "hello": ll (rank 0), he (1), he+ll (2), hell+o (3): one token; "el" (rank 4) never gets its chance.
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{259}));
  // " world": " w" then "or" then " w"+"or", then the bytes l and d.
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{259, 263, 'l', 'd'}));
  // Every occurrence of the best pair merges: "aaaaa" -> aa aa a.
  EXPECT_EQ(t.encode("aaaaa"), (std::vector<int32_t>{264, 264, 'a'}));
  // The special token, wherever it is in the text.
  EXPECT_EQ(t.encode("aa<|endoftext|>hello"), (std::vector<int32_t>{264, 265, 259}));
  expect_any_bytes_come_back(t, 4);
  EXPECT_FALSE(t.decode({266}).is_ok());
  // The decode-only reader agrees on the folder.
  auto v = load_vocab_bytes(where);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v.value()[259], "hello");
}

TEST(Tokenizer, Gpt2FilesThatAreNotByteLevelBpeAreRefusedNamed) {
  TempDir dir;
  auto none = Tokenizer::load(dir.path());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no encoder.json"), std::string::npos) << none.status().message();
  write_small_vocab(dir, {{"a", "b"}});
  dir.write("vocab.bpe", "#version: 0.2\na b\nx yz\n");  // "yz" is no token
  auto bad = Tokenizer::load(dir.path());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
  dir.write("vocab.bpe", "#version: 0.2\nab\n");
  auto onetoken = Tokenizer::load(dir.path());
  ASSERT_FALSE(onetoken.is_ok());
  EXPECT_NE(onetoken.status().message().find("not two tokens"), std::string::npos) << onetoken.status().message();
  // Issue 47: a merges file that is a FIFO (or a device) is refused at once, not read until it ends.
  ASSERT_EQ(std::remove((dir.path() + "/vocab.bpe").c_str()), 0);
  ASSERT_EQ(mkfifo((dir.path() + "/vocab.bpe").c_str(), 0600), 0);
  auto fifo = Tokenizer::load(dir.path());
  ASSERT_FALSE(fifo.is_ok());
  EXPECT_NE(fifo.status().message().find("a FIFO, socket or device"), std::string::npos) << fifo.status().message();
  TempDir nomerges;
  nomerges.write("encoder.json", "{\"a\": 0}");
  auto m = Tokenizer::load(nomerges.path());
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("no vocab.bpe or merges.txt"), std::string::npos) << m.status().message();
}

// Note [tokenize in blocks]: the cut is after a newline with printable ASCII on both sides, and a file read in blocks
// of a few bytes gives the same shards as read whole (and as encode on the whole text).
TEST(Tokenizer, TokenizeInBlocksGivesTheIdsOfTheWholeText) {
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
  auto bpe = Tokenizer::load(where);
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
TEST(Tokenizer, Gpt2sOwnFilesGiveItsKnownIds) {
  const char* dir = std::getenv("TT_GPT2_VOCAB_DIR");
  if (dir == nullptr || *dir == 0) GTEST_SKIP() << "TT_GPT2_VOCAB_DIR is not set (GPT-2's encoder.json and vocab.bpe)";
  auto bpe = Tokenizer::load(dir);
  ASSERT_TRUE(bpe.is_ok()) << bpe.status().to_string();
  EXPECT_EQ(bpe.value().vocab(), 50257);
  EXPECT_EQ(bpe.value().encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(bpe.value().encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
}

Pieces split_with(const Pattern& p, const std::string& s) {
  Pieces out;
  for (std::string_view piece : Tokenizer::split(p, s)) out.emplace_back(piece);
  return out;
}

// The expected pieces are what Hugging Face's tokenizers (0.23, Oniguruma) cut with Llama 3's and Qwen2's Split.
TEST(Tokenizer, Llama3sAndQwen2sPreTokenizersCutWhereTheirPatternsDo) {
  const Pattern l3{Pattern::kLlama3, 3}, q2{Pattern::kLlama3, 1};
  for (const Pattern& p : {l3, q2}) {
    SCOPED_TRACE(p.describe());
    EXPECT_EQ(split_with(p, "Hello world"), (Pieces{"Hello", " world"}));
    EXPECT_EQ(split_with(p, "it's DON'T I'LL We'Ve"),
              (Pieces{"it", "'s", " DON", "'T", " I", "'LL", " We", "'Ve"}));  // contractions of any case
    EXPECT_EQ(split_with(p, "x '\xc5\xbf"), (Pieces{"x", " '", "\xc5\xbf"}));  // long s: not folded to s
    EXPECT_EQ(split_with(p, "a  b"), (Pieces{"a", " ", " b"}));
    EXPECT_EQ(split_with(p, "a\n\nb"), (Pieces{"a", "\n\n", "b"}));             // newlines together
    EXPECT_EQ(split_with(p, "x.\n\ny"), (Pieces{"x", ".\n\n", "y"}));           // after punctuation, with it
    EXPECT_EQ(split_with(p, "  \n  z"), (Pieces{"  \n", " ", " z"}));
    EXPECT_EQ(split_with(p, "\t\tx"), (Pieces{"\t", "\tx"}));                   // any non-newline before letters
    EXPECT_EQ(split_with(p, "(hello) \"quoted\""), (Pieces{"(hello", ")", " \"", "quoted", "\""}));
    EXPECT_EQ(split_with(p, "end.\r\n\r\nNext"), (Pieces{"end", ".\r\n\r\n", "Next"}));
    EXPECT_EQ(split_with(p, "a \n b"), (Pieces{"a", " \n", " b"}));
    EXPECT_EQ(split_with(p, "foo\t\n\tbar"), (Pieces{"foo", "\t\n", "\tbar"}));
    EXPECT_EQ(split_with(p, "a\xc2\xa0" "b"), (Pieces{"a", "\xc2\xa0" "b"}));  // no-break space before a letter
    EXPECT_EQ(split_with(p, "x   "), (Pieces{"x", "   "}));
    EXPECT_EQ(split_with(p, "\n\n\n"), (Pieces{"\n\n\n"}));
    EXPECT_EQ(split_with(p, "hi!!! ?"), (Pieces{"hi", "!!!", " ?"}));
    EXPECT_EQ(split_with(p, "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"),
              (Pieces{"\xc3\xa9t\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac"}));
  }
  // Numbers: in threes (Llama 3), one by one (Qwen2); a space before a number is a piece of its own.
  EXPECT_EQ(split_with(l3, "12345 is 1234567"), (Pieces{"123", "45", " is", " ", "123", "456", "7"}));
  EXPECT_EQ(split_with(q2, "$100 x\xc2\xbc\xc2\xbd"), (Pieces{"$", "1", "0", "0", " x", "\xc2\xbc", "\xc2\xbd"}));
  EXPECT_EQ(split_with(l3, " 123abc"), (Pieces{" ", "123", "abc"}));
  // The pieces always put the text back together.
  Rng rng(10);
  const char* alphabet[] = {"a", "Z", " ", "  ", "\n", "\r\n", "'", "'S", "7", "123", ".", "\xc3\xa9", "\xe2\x80\x94",
                            "\xff", "\t", "\xc2\xa0"};
  for (int k = 0; k < 300; ++k) {
    std::string s;
    for (int i = 0; i < 24; ++i) s += alphabet[rng.uniform_int(16)];
    for (const Pattern& p : {l3, q2}) {
      std::string back;
      for (const std::string& piece : split_with(p, s)) {
        EXPECT_FALSE(piece.empty());
        back += piece;
      }
      EXPECT_EQ(back, s);
    }
  }
}

// Cases checked against Python's unicodedata.normalize("NFC", ...) (Unicode 14).
TEST(Tokenizer, NfcComposesReordersAndKeepsExclusions) {
  EXPECT_EQ(nfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(nfc("e\xcc\x81"), "\xc3\xa9");                              // e + acute -> e-acute
  EXPECT_EQ(nfc("\xc3\xa9"), "\xc3\xa9");                               // already composed
  EXPECT_EQ(nfc("a\xcc\x81\xcc\x96"), "\xc3\xa1\xcc\x96");              // a, acute (230), grave below (220)
  EXPECT_EQ(nfc("\xe1\xb8\x8a\xcc\xa3"), "\xe1\xb8\x8c\xcc\x87");       // D-dot-above + dot below -> D-dot-below + dot
  EXPECT_EQ(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81");  // Hangul L V T -> one syllable
  EXPECT_EQ(nfc("\xea\xb0\x80\xe1\x86\xa8"), "\xea\xb0\x81");           // LV + T
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");                           // Angstrom sign: a singleton -> A-ring
  EXPECT_EQ(nfc("\xe0\xa5\x98"), "\xe0\xa4\x95\xe0\xa4\xbc");           // Devanagari qa: excluded from composition
  EXPECT_EQ(nfc("\xcc\x81" "a"), "\xcc\x81" "a");                       // a mark first stays first
  EXPECT_EQ(nfc("\xff" "e\xcc\x81"), "\xff\xc3\xa9");                   // a stray byte stays as it is
}

// A small tokenizer.json: the 256 bytes (id = the byte), then each merge's token in order, then the added tokens.
struct JsonSpec {
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<nlohmann::json> added;  // each {"content", "lstrip", "rstrip", ...}; ids given in order after the merges
  std::string pattern;                // a Split's regex; empty: ByteLevel's own (GPT-2's)
  bool nfc = false, ignore_merges = false, merges_as_pairs = false;
  std::string bos;                    // the template's first token (one of the added), if any
};

nlohmann::json tokenizer_json(const JsonSpec& spec) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[testing::gpt2_char_of(b)] = b;
  int id = 256;
  json merges = json::array();
  for (const auto& [a, b] : spec.merges) {
    vocab[a + b] = id++;
    merges.push_back(spec.merges_as_pairs ? json::array({a, b}) : json(a + " " + b));
  }
  json added = json::array();
  for (json a : spec.added) {
    a["id"] = id++;
    added.push_back(a);
  }
  json j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  j["normalizer"] = spec.nfc ? json{{"type", "NFC"}} : json(nullptr);
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", spec.pattern.empty()}};
  j["pre_tokenizer"] =
      spec.pattern.empty()
          ? byte_level
          : json{{"type", "Sequence"},
                 {"pretokenizers",
                  {{{"type", "Split"}, {"pattern", {{"Regex", spec.pattern}}}, {"behavior", "Isolated"},
                    {"invert", false}},
                   byte_level}}};
  if (spec.bos.empty()) {
    j["post_processor"] = byte_level;
  } else {
    int bos_id = -1;
    for (const json& a : added)
      if (a["content"] == spec.bos) bos_id = a["id"];
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", spec.bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens", {{spec.bos, {{"id", spec.bos}, {"ids", {bos_id}}, {"tokens", {spec.bos}}}}}}};
  }
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", spec.ignore_merges}, {"vocab", vocab}, {"merges", merges}};
  return j;
}

const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Tokenizer load_json(const JsonSpec& spec) {
  auto t = Tokenizer::from_json(tokenizer_json(spec).dump(), "test tokenizer.json");
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : Tokenizer();
}

TEST(Tokenizer, ReadsTokenizerJsonWithItsPatternMergesAddedTokensAndTemplate) {
  using nlohmann::json;
  const std::string sp = gpt2_char_of(' ');
  JsonSpec spec;
  spec.merges = {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {"e", "l"}, {sp, "w"}, {"o", "r"},
                 {sp + "w", "or"}, {"1", "2"}, {"12", "3"}};
  // ids 266.. : the added tokens, in this order.
  spec.added = {json{{"content", "<|begin_of_text|>"}, {"special", true}},
                json{{"content", "<|eot_id|>"}, {"special", true}},
                json{{"content", "<|eot|>"}, {"special", true}},
                json{{"content", "<pad>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}}};
  spec.pattern = kLlama3Pattern;
  spec.bos = "<|begin_of_text|>";
  const Tokenizer t = load_json(spec);
  EXPECT_EQ(t.vocab(), 256 + 10 + 4);
  EXPECT_EQ(t.pattern().kind, Pattern::kLlama3);
  EXPECT_EQ(t.pattern().max_digits, 3);
  EXPECT_NE(t.describe().find("Llama 3's pattern"), std::string::npos) << t.describe();
  EXPECT_EQ(t.document_start(), 266);
  EXPECT_EQ(t.text_prefix(), (std::vector<int32_t>{266}));
  EXPECT_EQ(t.encode("hello world"), (std::vector<int32_t>{259, 263, 'l', 'd'}));
  EXPECT_EQ(t.encode("hello", nullptr, true), (std::vector<int32_t>{266, 259}));  // the template's token first
  EXPECT_EQ(t.encode("1234"), (std::vector<int32_t>{265, '4'}));                   // numbers in threes, then merged
  // Added tokens: leftmost, then longest (<|eot_id|> over <|eot|>); <pad> takes the whitespace on both sides.
  EXPECT_EQ(t.encode("he<|eot_id|><|eot|>x"), (std::vector<int32_t>{257, 267, 268, 'x'}));
  EXPECT_EQ(t.encode("he  <pad> \n he"), (std::vector<int32_t>{257, 269, 257}));
  EXPECT_EQ(t.added_token("<|eot|>"), 268);
  EXPECT_EQ(t.added_token("<|nope|>"), -1);
  EXPECT_FALSE(t.cuts_at_newlines());  // <pad> takes whitespace in: a newline is no safe cut
  EXPECT_FALSE(t.lossless());          // and the whitespace is gone
  auto text = t.decode({266, 259, 263});
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text.value(), "<|begin_of_text|>hello wor");
  EXPECT_FALSE(t.decode({270}).is_ok());
  // Merges written as pairs read the same.
  spec.merges_as_pairs = true;
  EXPECT_EQ(load_json(spec).encode("hello world 123"), t.encode("hello world 123"));
  expect_any_bytes_come_back(t, 5);
}

TEST(Tokenizer, IgnoreMergesTakesAPieceThatIsATokenWhole) {
  // "abc" is a token that the merges cannot make (a+b, then b+c is no longer possible): only ignore_merges finds it.
  JsonSpec spec;
  spec.merges = {{"a", "b"}, {"b", "c"}, {"a", "bc"}};  // tokens ab 256, bc 257, abc 258
  spec.pattern = kLlama3Pattern;
  EXPECT_EQ(load_json(spec).encode("abc"), (std::vector<int32_t>{256, 'c'}));
  spec.ignore_merges = true;
  EXPECT_EQ(load_json(spec).encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(load_json(spec).encode("abcab"), (std::vector<int32_t>{256, 'c', 256}));  // not a token: merged
}

TEST(Tokenizer, Qwen2sNfcNormalizerComposesBeforeMerging) {
  using nlohmann::json;
  JsonSpec spec;
  spec.merges = {{gpt2_char_of(0xC3), gpt2_char_of(0xA9)}};  // e-acute's two bytes: token 256
  spec.pattern = kQwen2Pattern;
  spec.nfc = true;
  spec.added = {json{{"content", "<|endoftext|>"}, {"special", true}}};
  const Tokenizer t = load_json(spec);
  EXPECT_EQ(t.pattern().max_digits, 1);
  EXPECT_EQ(t.encode("e\xcc\x81"), (std::vector<int32_t>{256}));  // e + combining acute: e-acute, one token
  EXPECT_EQ(t.encode("\xc3\xa9"), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.encode("12"), (std::vector<int32_t>{'1', '2'}));
  EXPECT_EQ(t.document_start(), 257);  // no template: <|endoftext|>
  EXPECT_TRUE(t.text_prefix().empty());
  EXPECT_TRUE(t.cuts_at_newlines());
  EXPECT_FALSE(t.lossless());  // NFC
}

TEST(Tokenizer, TokenizerJsonThatIsNotByteLevelBpeIsRefusedNamed) {
  using nlohmann::json;
  JsonSpec spec;
  spec.merges = {{"a", "b"}};
  spec.pattern = kLlama3Pattern;
  const auto refused = [](const json& j, const std::string& words) {
    auto t = Tokenizer::from_json(j.dump(), "tok.json");
    ASSERT_FALSE(t.is_ok()) << words;
    EXPECT_NE(t.status().message().find(words), std::string::npos) << t.status().message();
  };
  json j = tokenizer_json(spec);
  j["model"]["type"] = "WordPiece";
  refused(j, "a WordPiece model");
  j = tokenizer_json(spec);
  j["model"]["byte_fallback"] = true;
  refused(j, "byte fallback");
  j = tokenizer_json(spec);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  refused(j, "none that tiertrain reads");
  j = tokenizer_json(spec);
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
  refused(j, "a Metaspace pre-tokenizer");
  j = tokenizer_json(spec);
  j["normalizer"] = {{"type", "NFKC"}};
  refused(j, "a NFKC normalizer");
  j = tokenizer_json(spec);
  j["model"]["vocab"].erase(gpt2_char_of('q'));
  refused(j, "byte 0x71 is no token");
  j = tokenizer_json(spec);
  j["model"]["merges"].push_back("a zz");
  refused(j, "merge 1");
  j = tokenizer_json(spec);
  j["model"]["merges"].push_back(json::array({"a"}));
  refused(j, "is not two tokens");
  j = tokenizer_json(spec);
  j["model"]["vocab"]["\xe4\xb8\x80"] = 999;  // a character that stands for no byte
  refused(j, "stands for no byte");
  j = tokenizer_json(spec);
  j["added_tokens"].push_back({{"id", 300}, {"content", "<x>"}, {"single_word", true}});
  refused(j, "single_word");
  j = tokenizer_json(spec);
  j["model"]["dropout"] = 0.1;
  refused(j, "dropout");
  j = tokenizer_json(spec);
  j["model"]["vocab"]["zz"] = -3;
  refused(j, "has id -3");
  for (const char* text : {"", "[]", "{\"model\": 3}", "{\"model\": {}", "null"}) {
    auto t = Tokenizer::from_json(text, "tok.json");
    EXPECT_FALSE(t.is_ok()) << text;
  }
  // From a folder: tokenizer.json is preferred to GPT-2's files; a folder with neither is named.
  TempDir dir;
  auto none = Tokenizer::load(dir.path());
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no tokenizer.json"), std::string::npos) << none.status().message();
  dir.write("tokenizer.json", tokenizer_json(spec).dump());
  auto t = Tokenizer::load(dir.path());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t.value().encode("ab"), (std::vector<int32_t>{256}));
}

}  // namespace
}  // namespace tt
