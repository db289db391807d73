// data/tokenizer: byte-level BPE tokenizers, as GPT-2, Llama 3 and Qwen2 publish them: text to token ids and back,
// from a Hugging Face tokenizer.json or from GPT-2's encoder.json and vocab.bpe.
//
// Encoding (Note [byte-level BPE]): the added tokens (<|endoftext|>, <|begin_of_text|>, <|im_start|>, ...) are cut
// out of the text whole, leftmost and longest first; each stretch between them is normalized (NFC where the
// tokenizer says so), cut into pieces by the pre-tokenizer's pattern (GPT-2's, Llama 3's or Qwen2's: a hand-written
// scanner each, letters and numbers by Unicode's general categories, src/data/unicode_classes.inc), and each piece's
// UTF-8 bytes start as one token each and merge, the adjacent pair of lowest merge rank first, until no pair has a
// rank (with ignore_merges, as Llama 3's, a piece that is a token of the vocabulary is that token at once). The ids
// are those of Hugging Face's `tokenizers` (python/tests/test_tokenizer_json.py compares whole texts) and of OpenAI's
// tiktoken for GPT-2 (test_tokenize.py).
//
//   TT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load("Llama-3.2-1B/"));  // tokenizer.json, or GPT-2's two files
//   std::vector<int32_t> ids = tok.encode("Hello world");                   // {9906, 1917}
//   TT_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"

namespace tt {

// The pre-tokenizer patterns read (Note [byte-level BPE]):
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
//            \s+(?!\S)|\s+                        (OpenAI's cl100k_base; Qwen2's is the same with \p{N} for \p{N}{1,3})
struct Pattern {
  enum Kind { kGpt2, kLlama3 } kind = kGpt2;
  int max_digits = 0;  // kLlama3: numbers in runs of at most this many (3 Llama 3, 1 Qwen2)
  std::string describe() const;
};

// GPT-2's vocabulary file (encoder.json: {"token": id}) as the bytes of each id: its tokens are byte-level BPE
// strings, each byte written as one Unicode character (printable ASCII and Latin-1 as themselves, the other 68
// bytes as U+0100 on, in order), so "\u0120world" is " world". `where`: the file, or a folder holding encoder.json
// (or vocab.json). A tokenizer.json (or a folder holding one) gives its tokens too.
Result<std::vector<std::string>> load_vocab_bytes(const std::string& where);

// Unicode's NFC of UTF-8 text (canonical decomposition, reordering, composition; Unicode version as
// unicode_classes.inc). Bytes that are not valid UTF-8 stay as they are and compose with nothing.
std::string nfc(std::string_view text);

class Tokenizer {
 public:
  // `where`: a tokenizer.json, a folder holding one, or GPT-2's files (a folder with encoder.json and vocab.bpe, or
  // vocab.json and merges.txt; or encoder.json with its merges beside it). What is not a byte-level BPE of the
  // kinds above is refused with what it is (a SentencePiece tokenizer, another pattern, a missing byte, ...).
  static Result<Tokenizer> load(const std::string& where);
  // A tokenizer.json's text (`name` in messages).
  static Result<Tokenizer> from_json(std::string_view json, const std::string& name);

  int vocab() const { return static_cast<int>(bytes_of_.size()); }  // the largest id + 1
  // What it is, for a log line: "tokenizer.json: byte-level BPE, Llama 3's pattern, 128256 tokens (256 added)".
  const std::string& describe() const { return describe_; }
  const Pattern& pattern() const { return pattern_; }
  bool normalizes() const { return nfc_; }  // NFC before the pre-tokenizer (Qwen2)
  // Whether decode(encode(text)) is every text itself: no normalizer, no added token that takes whitespace in.
  bool lossless() const { return lossless_; }

  // Pieces already encoded (words repeat: a corpus encodes several times faster with one); the caller's to keep.
  // Emptied when it holds a million pieces, so that it stays within ~100 MB.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceCache = std::unordered_map<std::string, std::vector<int32_t>, PieceHash, std::equal_to<>>;
  // The ids of `text`; with add_special, with the tokens the tokenizer's template puts around a text (Llama 3's
  // <|begin_of_text|> before it), as `tokenizers`' encode(text) does by default.
  std::vector<int32_t> encode(std::string_view text, PieceCache* cache = nullptr, bool add_special = false) const;
  // The bytes of the ids, concatenated (an added token as its text); an id the tokenizer lacks is an error naming it.
  Result<std::string> decode(const std::vector<int32_t>& ids) const;

  // tokenizer_config.json beside a tokenizer.json (Hugging Face's): its end-of-text token (eos_token), which ends a
  // fine-tuning example's completion, and its chat template (chat_template, Jinja), which lays out a conversation.
  // Without the file: <|eot_id|>, <|im_end|>, <|end_of_text|> or <|endoftext|>, the first the tokenizer has; no
  // template.
  int32_t end_of_text() const { return end_of_text_; }
  const std::string& chat_template() const { return chat_template_; }
  const std::string& bos_text() const { return bos_text_; }  // the bos_token's text ("" where none is named)
  // The tokens the template puts before a text (Llama 3's <|begin_of_text|>; none for GPT-2 and Qwen2).
  const std::vector<int32_t>& text_prefix() const { return prefix_; }
  // The id of the added token with this text, or -1.
  int32_t added_token(std::string_view text) const;
  // The token put before each document by `tokenize` and before a sample without a prompt: the template's first
  // token (Llama 3's <|begin_of_text|>), else <|endoftext|> (GPT-2, Qwen2); -1 when there is neither.
  int32_t document_start() const { return document_start_; }
  // Whether a text may be cut after a newline between printable ASCII characters without changing its ids
  // (tokenize reads files in blocks so: Note [tokenize in blocks]); no added token may hold a newline for it.
  bool cuts_at_newlines() const { return cuts_at_newlines_; }

  // The pre-tokenizer: the pieces of `text` in order (their concatenation is `text`), handed to `piece` one by one
  // (nothing the size of the text is kept), or all in a vector.
  static void split_each(const Pattern& p, std::string_view text, const std::function<void(std::string_view)>& piece);
  static std::vector<std::string_view> split(const Pattern& p, std::string_view text);

 private:
  void encode_stretch(std::string_view text, PieceCache* cache, std::vector<int32_t>* out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;
  Status finish(const std::string& name);  // the tables derived from bytes_of_ and the added tokens

  std::string describe_;
  Pattern pattern_;
  bool nfc_ = false;                                // the normalizer is NFC (Qwen2)
  bool ignore_merges_ = false;                      // a piece that is a token is that token (Llama 3)
  bool cuts_at_newlines_ = true;
  bool lossless_ = true;
  std::vector<std::string> bytes_of_;               // [id] its bytes (an added token: its text)
  std::vector<bool> is_added_;                      // [id] an added token (matched whole, never merged into)
  int32_t byte_id_[256] = {};                       // the token of each single byte
  std::unordered_map<std::string, int32_t, PieceHash, std::equal_to<>> id_of_;  // bytes -> id (no added tokens)
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges_;      // (left id << 32 | right id) -> its rank and the merged token
  struct Added {
    std::string text;
    int32_t id;
    bool lstrip, rstrip;                            // whitespace before / after it belongs to it
  };
  std::vector<Added> added_;                        // longest first
  std::unordered_map<std::string, size_t, PieceHash, std::equal_to<>> added_index_;  // text -> its index in added_
  std::vector<size_t> added_lengths_;               // the distinct lengths of added tokens, longest first
  bool added_first_byte_[256] = {};                 // an added token starts with this byte
  std::vector<int32_t> prefix_, suffix_;            // the template's tokens around a text (add_special)
  int32_t document_start_ = -1;
  int32_t end_of_text_ = -1;
  std::string chat_template_, bos_text_;
  Status read_config(const std::string& path);  // tokenizer_config.json
};

}  // namespace tt
