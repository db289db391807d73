// data/gpt2_bpe: GPT-2's tokenizer (byte-level BPE, as OpenAI's encoder.py and tiktoken's r50k_base): text to token
// ids and back, from the two files OpenAI published with GPT-2: encoder.json (token -> id; Hugging Face calls it
// vocab.json) and vocab.bpe (the merges in rank order; merges.txt there).
//
// Encoding (Note [GPT-2 BPE]): the text is cut into pieces by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (a hand-written scanner over code points; letters and numbers by Unicode's general categories,
// src/data/unicode_classes.inc); each piece's UTF-8 bytes start as one token each, and the adjacent pair of lowest
// merge rank is merged, every occurrence of it, until no adjacent pair has a rank. The literal text <|endoftext|> is
// the special token 50256 (as tiktoken's allowed_special="all").
//
//   TT_ASSIGN_OR_RETURN(Gpt2Bpe bpe, Gpt2Bpe::load("gpt2/"));   // a folder with encoder.json and vocab.bpe
//   std::vector<int32_t> ids = bpe.encode("Hello world");        // {15496, 995}
//   TT_ASSIGN_OR_RETURN(std::string text, bpe.decode(ids));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace tt {

// GPT-2's vocabulary file (encoder.json: {"token": id}) as the bytes of each id: its tokens are byte-level BPE
// strings, each byte written as one Unicode character (printable ASCII and Latin-1 as themselves, the other 68
// bytes as U+0100 on, in order), so "\u0120world" is " world". `where`: the file, or a folder holding encoder.json
// (or vocab.json).
Result<std::vector<std::string>> load_gpt2_vocab(const std::string& where);

class Gpt2Bpe {
 public:
  // `where`: a folder holding encoder.json (or vocab.json) and vocab.bpe (or merges.txt), or the encoder file itself
  // with the merges file beside it. Every merge must make a token of the vocabulary, and every byte must be one.
  static Result<Gpt2Bpe> load(const std::string& where);

  int vocab() const { return static_cast<int>(bytes_of_.size()); }
  // Pieces already encoded (words repeat: a corpus encodes several times faster with one); the caller's to keep.
  // Looked up by string_view; emptied when it holds a million pieces, so that it stays within ~100 MB.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceCache = std::unordered_map<std::string, std::vector<int32_t>, PieceHash, std::equal_to<>>;
  std::vector<int32_t> encode(std::string_view text, PieceCache* cache = nullptr) const;
  // The bytes of the ids, concatenated; an id outside the vocabulary is an error naming it.
  Result<std::string> decode(const std::vector<int32_t>& ids) const;
  // GPT-2's pre-tokenizer: the pieces of `text` in order (their concatenation is `text`), handed to `piece` one by
  // one (split_each: nothing the size of the text is kept), or all in a vector.
  static void split_each(std::string_view text, const std::function<void(std::string_view)>& piece);
  static std::vector<std::string_view> split(std::string_view text);

 private:
  std::vector<int32_t> encode_piece(std::string_view piece) const;

  std::vector<std::string> bytes_of_;               // [id] its bytes
  int32_t byte_id_[256] = {};                       // the token of each single byte
  int32_t end_of_text_ = -1;                        // <|endoftext|>, when the vocabulary has it
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges_;      // (left id << 32 | right id) -> its rank and the merged token
};

}  // namespace tt
