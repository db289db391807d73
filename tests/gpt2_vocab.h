// A small vocabulary in GPT-2's file format for the tests of the tokenizer and of `tiertrain tokenize` (no network,
// no 1.5 MB of GPT-2's own files in the repository).
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace tt::testing {

// GPT-2's byte-level alphabet for one byte, as its vocabulary files write it (UTF-8): bytes 33-126, 161-172 and
// 174-255 as themselves, the other 68 from U+0100 on, in byte order.
inline std::string gpt2_char_of(int b) {
  int next = 256, cp = -1;
  for (int x = 0; x <= b; ++x) {
    const bool self = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    cp = self ? x : next++;
  }
  std::string u;
  if (cp < 0x80) {
    u.push_back(static_cast<char>(cp));
  } else {
    u.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    u.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return u;
}

// A small byte-level vocabulary in GPT-2's two files, dir/encoder.json and dir/vocab.bpe: the 256 bytes (id = the
// byte), then each merge's token (ids 256.. in the order given, which is their rank), then <|endoftext|>.
inline void write_small_gpt2_vocab(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& merges) {
  auto quoted = [](const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    return out + "\"";
  };
  std::string enc = "{";
  for (int b = 0; b < 256; ++b) enc += quoted(gpt2_char_of(b)) + ": " + std::to_string(b) + ", ";
  std::string bpe = "#version: 0.2\n";
  int id = 256;
  for (const auto& [a, b] : merges) {
    enc += quoted(a + b) + ": " + std::to_string(id++) + ", ";
    bpe += a + " " + b + "\n";
  }
  enc += "\"<|endoftext|>\": " + std::to_string(id) + "}";
  std::ofstream(dir + "/encoder.json", std::ios::binary) << enc;
  std::ofstream(dir + "/vocab.bpe", std::ios::binary) << bpe;
}

}  // namespace tt::testing
