// Fuzz target: a Hugging Face tokenizer.json (data/tokenizer: Tokenizer::from_json) and a text it encodes. The input
// is 4 bytes (little-endian) of the tokenizer.json's length, the tokenizer.json, then the text. Every accepted
// tokenizer encodes the text to ids of its vocabulary (the same with a piece cache) that decode (byte-level BPE
// loses nothing: to the text itself where the tokenizer is lossless), and the template's tokens come on top.
#include <cstring>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  if (n > size - 4) return 0;
  auto tok = tt::Tokenizer::from_json(tt::fuzz::as_text(data + 4, n), "tokenizer.json");
  if (!tt::fuzz::accepted(tok)) return 0;
  const tt::Tokenizer& t = tok.value();
  const std::string text(tt::fuzz::as_text(data + 4 + n, size - 4 - n));
  tt::Tokenizer::PieceCache cache;
  const std::vector<int32_t> ids = t.encode(text, &cache);
  TT_FUZZ_REQUIRE(t.encode(text) == ids);
  for (int32_t id : ids) TT_FUZZ_REQUIRE(id >= 0 && id < t.vocab());
  auto back = t.decode(ids);
  TT_FUZZ_REQUIRE(back.is_ok());
  // Byte for byte the text, unless NFC or an added token's lstrip/rstrip changes it.
  if (t.lossless()) TT_FUZZ_REQUIRE(back.value() == text);
  const std::vector<int32_t> framed = t.encode(text, nullptr, true);
  TT_FUZZ_REQUIRE(framed.size() >= ids.size() + t.text_prefix().size());
  return 0;
}
