#include "data/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tt {
namespace {

struct CodeRange {
  uint32_t first, last;
};
#include "data/unicode_classes.inc"
struct CombiningRun {
  uint32_t first, last, cls;
};
struct Decomposition {
  uint32_t cp, first, second;
};
struct Composition {
  uint32_t first, second, composite;
};
#include "data/unicode_nfc.inc"

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], uint32_t cp) {
  const CodeRange* it =
      std::upper_bound(table, table + N, cp, [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != table && cp <= (it - 1)->last;
}

// Unicode's White_Space property (what \s matches in the pattern).
bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// The pattern's three classes of non-space characters.
enum class Cls { kSpace, kLetter, kNumber, kOther };
Cls cls(uint32_t cp) {
  if (cp < 0x80) {
    if (is_space(cp)) return Cls::kSpace;
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return Cls::kLetter;
    if (cp >= '0' && cp <= '9') return Cls::kNumber;
    return Cls::kOther;
  }
  if (is_space(cp)) return Cls::kSpace;
  if (in_ranges(kLetters, cp)) return Cls::kLetter;
  if (in_ranges(kNumbers, cp)) return Cls::kNumber;
  return Cls::kOther;
}

// The code point at s[i] and its length in bytes; a byte that starts no valid UTF-8 sequence is a code point of its
// own that is no letter, number or space (0xFFFFFFFF).
uint32_t next_code_point(std::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
  bool ok = n > 0 && i + static_cast<size_t>(n) <= s.size();
  for (int k = 1; ok && k < n; ++k) {
    const unsigned char cc = b(i + static_cast<size_t>(k));
    ok = (cc & 0xC0) == 0x80;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (!ok) {
    *len = 1;
    return 0xFFFFFFFFu;
  }
  *len = static_cast<size_t>(n);
  return cp;
}

// GPT-2's byte-level alphabet: the character standing for each byte (bytes 33-126, 161-172, 174-255 as themselves,
// the other 68 from U+0100 on, in byte order), and back.
const std::unordered_map<uint32_t, unsigned char>& byte_of_char() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<uint32_t, unsigned char>;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      (*t)[self ? static_cast<uint32_t>(b) : next++] = static_cast<unsigned char>(b);
    }
    return t;
  }();
  return *table;
}

// A byte-level token string (UTF-8 of the alphabet above) as the bytes it stands for.
Result<std::string> bytes_of_token(const std::string& token, const std::string& file, const std::string& what) {
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const uint32_t cp = next_code_point(token, i, &len);
    i += len;
    const auto it = byte_of_char().find(cp);
    TT_RETURN_IF(it == byte_of_char().end(), kDataLoss,
                 "%s: %s has a character (U+%04X) that stands for no byte: not a byte-level BPE vocabulary",
                 file.c_str(), what.c_str(), cp);
    bytes.push_back(static_cast<char>(it->second));
  }
  return bytes;
}

// A tokenizer's file: a regular file (a FIFO or a device would block or never end) of at most 256 MiB (Llama 3's
// tokenizer.json is 9 MB), read whole.
Result<std::string> read_text(const std::string& path, const char* what) {
  TT_TRY(require_regular_file(path, what));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  TT_RETURN_IF(ec || size > (uintmax_t(256) << 20), kDataLoss, "%s '%s': %s", what, path.c_str(),
               ec ? ec.message().c_str() : "larger than 256 MiB: not a tokenizer's file");
  std::ifstream in(path, std::ios::binary);
  TT_RETURN_IF(!in, kNotFound, "%s %s: cannot open (%s)", what, path.c_str(), std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  TT_RETURN_IF(in.bad(), kIoError, "%s %s: read failed (%s)", what, path.c_str(), std::strerror(errno));
  return text.str();
}


// --- NFC (UAX #15): canonical decomposition, canonical order, canonical composition.

constexpr uint32_t kNotChar = 0x110000;  // kNotChar + b: byte b, not valid UTF-8 (a starter composing with nothing)
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint32_t combining_class(uint32_t cp) {
  if (cp < 0x300 || cp >= kNotChar) return 0;
  const CombiningRun* end = kCombining + std::size(kCombining);
  const CombiningRun* it = std::upper_bound(kCombining, end, cp, [](uint32_t c, const CombiningRun& r) {
    return c < r.first;
  });
  return it != kCombining && cp <= (it - 1)->last ? (it - 1)->cls : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {  // a Hangul syllable: L V (T)
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + std::size(kDecompositions);
  const Decomposition* it =
      cp < 0xC0 || cp >= kNotChar
          ? end
          : std::lower_bound(kDecompositions, end, cp, [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out->push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of a and b, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + std::size(kCompositions);
  const Composition* it = std::lower_bound(kCompositions, end, std::pair(a, b), [](const Composition& c, auto key) {
    return std::pair(c.first, c.second) < key;
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp >= kNotChar) {
    out->push_back(static_cast<char>(cp - kNotChar));
  } else if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// --- The pre-tokenizers (Note [byte-level BPE]).

bool is_cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// (?i:...)'s case-insensitive letters of the contractions: ASCII only (tokenizers' Oniguruma does not fold U+017F,
// long s, to s there: checked).
uint32_t fold(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp | 0x20 : cp; }

// GPT-2's pattern, over byte offsets, each code point decoded where it is looked at.
void split_gpt2(std::string_view s, const std::function<void(std::string_view)>& piece) {
  const size_t n = s.size();
  auto at = [&](size_t pos, size_t* len) { return next_code_point(s, pos, len); };
  size_t i = 0;
  while (i < n) {
    size_t end = 0, len0 = 0;
    const uint32_t c0 = at(i, &len0);
    // 's|'t|'re|'ve|'m|'ll|'d (ASCII: bytes are characters)
    if (c0 == '\'' && i + 1 < n) {
      const char a = s[i + 1], b = i + 2 < n ? s[i + 2] : '\0';
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
    }
    if (end == 0) {
      // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': a run of one class, after one optional space.
      size_t j = i, lj = len0;
      Cls c = cls(c0);
      if (c0 == ' ' && i + 1 < n) {
        size_t l1 = 0;
        const Cls c1 = cls(at(i + 1, &l1));
        if (c1 != Cls::kSpace) {
          j = i + 1;
          lj = l1;
          c = c1;
        }
      }
      if (c != Cls::kSpace) {
        end = j + lj;
        for (size_t l = 0; end < n && cls(at(end, &l)) == c;) end += l;
      } else {
        // \s+(?!\S) then \s+: a run of spaces, less its last one when a non-space follows (that one starts the next
        // piece), unless the run is that one alone.
        size_t k = i, last = i;
        for (size_t l = 0; k < n && cls(at(k, &l)) == Cls::kSpace; k += l) last = k;
        end = k == n || last == i ? k : last;
      }
    }
    piece(s.substr(i, end - i));
    i = end;
  }
}

// Llama 3's (and Qwen2's) pattern: the first alternative that matches, as a backtracking regex engine takes it.
void split_llama3(std::string_view s, int max_digits, const std::function<void(std::string_view)>& piece) {
  const size_t n = s.size();
  auto at = [&](size_t pos, size_t* len) { return next_code_point(s, pos, len); };
  auto run_of = [&](size_t from, Cls c) {  // the end of the run of class c from `from`
    for (size_t l = 0; from < n && cls(at(from, &l)) == c;) from += l;
    return from;
  };
  size_t i = 0;
  while (i < n) {
    size_t end = 0, len0 = 0, len1 = 0;
    const uint32_t c0 = at(i, &len0);
    const Cls k0 = cls(c0);
    const uint32_t c1 = i + len0 < n ? at(i + len0, &len1) : 0;
    const Cls k1 = i + len0 < n ? cls(c1) : Cls::kSpace;
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c0 == '\'' && i + len0 < n) {
      const uint32_t a = fold(c1);
      size_t len2 = 0;
      const uint32_t b = i + len0 + len1 < n ? fold(at(i + len0 + len1, &len2)) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + len0 + len1;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + len0 + len1 + len2;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (end == 0 && k0 == Cls::kLetter) end = run_of(i, Cls::kLetter);
    if (end == 0 && k0 != Cls::kNumber && !is_cr_lf(c0) && i + len0 < n && k1 == Cls::kLetter)
      end = run_of(i + len0, Cls::kLetter);
    // \p{N}{1,max_digits}
    if (end == 0 && k0 == Cls::kNumber) {
      end = i + len0;
      for (int d = 1; d < max_digits && end < n; ++d) {
        size_t l = 0;
        if (cls(at(end, &l)) != Cls::kNumber) break;
        end += l;
      }
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (end == 0 && (k0 == Cls::kOther || (c0 == ' ' && i + len0 < n && k1 == Cls::kOther))) {
      end = run_of(k0 == Cls::kOther ? i : i + len0, Cls::kOther);
      while (end < n && is_cr_lf(static_cast<unsigned char>(s[end]))) ++end;
    }
    if (end == 0) {
      // Whitespace: \s*[\r\n]+ (to just past the run's last CR or LF), else \s+(?!\S) and \s+ as GPT-2's.
      size_t k = i, last = i, last_cr_lf = n;
      for (size_t l = 0; k < n; k += l) {
        const uint32_t c = at(k, &l);
        if (cls(c) != Cls::kSpace) break;
        last = k;
        if (is_cr_lf(c)) last_cr_lf = k;
      }
      end = last_cr_lf != n ? last_cr_lf + 1 : k == n || last == i ? k : last;
    }
    piece(s.substr(i, end - i));
    i = end;
  }
}

const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* kLlama3Head = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|)";
const char* kLlama3Tail = R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern a Split pre-tokenizer's regex is, if it is one of those read.
std::optional<Pattern> pattern_of_regex(std::string_view re) {
  if (re == kGpt2Regex) return Pattern{Pattern::kGpt2, 0};
  const std::string_view head = kLlama3Head, tail = kLlama3Tail;
  if (re.size() <= head.size() + tail.size() || re.substr(0, head.size()) != head ||
      re.substr(re.size() - tail.size()) != tail)
    return std::nullopt;
  const std::string_view digits = re.substr(head.size(), re.size() - head.size() - tail.size());
  if (digits == R"(\p{N})") return Pattern{Pattern::kLlama3, 1};
  if (digits.size() == 10 && digits.substr(0, 8) == R"(\p{N}{1,)" && digits[8] >= '1' && digits[8] <= '9' &&
      digits[9] == '}')
    return Pattern{Pattern::kLlama3, digits[8] - '0'};
  return std::nullopt;
}

// --- Reading a tokenizer.json: a few strict accessors (what is missing or of another type is an error naming it).

using nlohmann::json;

const json* member(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  const auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::string string_member(const json& o, const char* key) {
  const json* v = member(o, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

bool bool_member(const json& o, const char* key) {
  const json* v = member(o, key);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

// The parts of a component that may be a Sequence of them (normalizers, pre_tokenizers, processors, decoders).
std::vector<const json*> parts_of(const json& c, const char* list) {
  if (string_member(c, "type") != "Sequence") return {&c};
  std::vector<const json*> out;
  if (const json* l = member(c, list); l != nullptr && l->is_array())
    for (const json& x : *l) out.push_back(&x);
  return out;
}

}  // namespace

std::string Pattern::describe() const {
  if (kind == kGpt2) return "GPT-2's pattern";
  return max_digits == 3 ? "Llama 3's pattern" : max_digits == 1 ? "Qwen2's pattern"
                                                                  : "Llama 3's pattern with numbers of up to " +
                                                                        std::to_string(max_digits) + " digits";
}

std::string nfc(std::string_view text) {
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    uint32_t cp = next_code_point(text, i, &len);
    if (cp == 0xFFFFFFFFu) cp = kNotChar + static_cast<unsigned char>(text[i]);
    i += len;
    decompose(cp, &cps);
  }
  // Canonical order: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Composition: each character after the last starter joins it unless blocked (a character between of the same
  // or a higher class, or a starter).
  if (!cps.empty()) {
    size_t starter = 0, kept = 1;
    uint32_t last_class = combining_class(cps[0]) == 0 ? 0 : 256;
    for (size_t i = 1; i < cps.size(); ++i) {
      const uint32_t c = cps[i], k = combining_class(c);
      const uint32_t composite = last_class < k || last_class == 0 ? compose(cps[starter], c) : 0;
      if (composite != 0) {
        cps[starter] = composite;
        continue;
      }
      if (k == 0) starter = kept;
      last_class = k;
      cps[kept++] = c;
    }
    cps.resize(kept);
  }
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : cps) append_utf8(cp, &out);
  return out;
}

Result<std::vector<std::string>> load_vocab_bytes(const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool folder = fs::is_directory(where, ec);
  if ((folder && fs::exists(fs::path(where) / "tokenizer.json", ec)) ||
      (!folder && fs::path(where).filename() == "tokenizer.json")) {
    TT_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(where));
    std::vector<std::string> out;
    for (int i = 0; i < t.vocab(); ++i) {
      auto b = t.decode({i});
      out.push_back(b.is_ok() ? b.value() : std::string());
    }
    return out;
  }
  std::string path = where;
  if (folder) {
    for (const char* n : {"encoder.json", "vocab.json"})
      if (path == where && fs::exists(fs::path(where) / n, ec)) path = (fs::path(where) / n).string();
    TT_RETURN_IF(path == where, kNotFound, "--vocab %s: no tokenizer.json, encoder.json or vocab.json in this folder",
                 where.c_str());
  }
  TT_ASSIGN_OR_RETURN(std::string text, read_text(path, "--vocab"));
  const json j = json::parse(text, nullptr, false);
  TT_RETURN_IF(!j.is_object() || j.empty(), kDataLoss, "--vocab %s: not GPT-2's encoder.json (an object token -> id)",
               path.c_str());
  std::vector<std::string> out;
  std::vector<bool> seen;
  for (const auto& [token, id] : j.items()) {
    TT_RETURN_IF(!id.is_number_unsigned() || id.get<uint64_t>() > 1000000, kDataLoss, "--vocab %s: '%s' -> %s",
                 path.c_str(), token.c_str(), id.dump().c_str());
    const size_t k = id.get<size_t>();
    if (out.size() <= k) {
      out.resize(k + 1);
      seen.resize(k + 1);
    }
    TT_RETURN_IF(seen[k], kDataLoss, "--vocab %s: id %zu is given to two tokens", path.c_str(), k);
    seen[k] = true;
    if (token == "<|endoftext|>") {
      out[k] = token;  // a special token: its text as it is
      continue;
    }
    TT_ASSIGN_OR_RETURN(out[k], bytes_of_token(token, "--vocab " + path, "token " + std::to_string(k)));
  }
  return out;
}

Result<Tokenizer> Tokenizer::load(const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool folder = fs::is_directory(where, ec);
  if (folder && fs::exists(fs::path(where) / "tokenizer.json", ec))
    return load((fs::path(where) / "tokenizer.json").string());
  if (!folder) {
    // A tokenizer.json is an object with a "model"; GPT-2's encoder.json maps tokens to numbers.
    TT_ASSIGN_OR_RETURN(std::string text, read_text(where, "tokenizer"));
    bool is_json = fs::path(where).filename() == "tokenizer.json";
    if (!is_json)
      if (const json j = json::parse(text, nullptr, false); j.is_object() && member(j, "model") != nullptr)
        is_json = true;
    if (is_json) {
      TT_ASSIGN_OR_RETURN(Tokenizer t, from_json(text, where));
      const fs::path config = fs::path(where).parent_path() / "tokenizer_config.json";
      if (fs::exists(config, ec)) TT_TRY(t.read_config(config.string()));
      return t;
    }
  }
  // GPT-2's two files.
  const fs::path dir = folder ? fs::path(where) : fs::path(where).parent_path();
  auto first_of = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (fs::exists(dir / n, ec)) return (dir / n).string();
    return {};
  };
  const std::string encoder = folder ? first_of({"encoder.json", "vocab.json"}) : where;
  const std::string merges = first_of({"vocab.bpe", "merges.txt"});
  TT_RETURN_IF(encoder.empty(), kNotFound,
               "%s: no tokenizer.json (Hugging Face's) and no encoder.json or vocab.json (GPT-2's) in this folder",
               where.c_str());
  TT_RETURN_IF(merges.empty(), kNotFound,
               "%s: no vocab.bpe or merges.txt in %s (GPT-2's merges, published with encoder.json)", where.c_str(),
               dir.string().c_str());
  Tokenizer t;
  TT_ASSIGN_OR_RETURN(t.bytes_of_, load_vocab_bytes(encoder));
  t.is_added_.assign(t.bytes_of_.size(), false);
  for (size_t i = 0; i < t.bytes_of_.size(); ++i)
    if (t.bytes_of_[i] == "<|endoftext|>") {
      t.is_added_[i] = true;
      t.added_.push_back({"<|endoftext|>", static_cast<int32_t>(i), false, false});
    }
  TT_TRY(t.finish(encoder));
  TT_ASSIGN_OR_RETURN(std::string text, read_text(merges, "merges file"));
  std::istringstream lines(text);
  std::string line;
  int32_t rank = 0;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    TT_RETURN_IF(sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != line.npos,
                 kDataLoss, "%s line %lld: '%s' is not two tokens separated by a space", merges.c_str(),
                 static_cast<long long>(number), line.c_str());
    const std::string where_line = "line " + std::to_string(number);
    TT_ASSIGN_OR_RETURN(std::string a, bytes_of_token(line.substr(0, sp), merges, where_line));
    TT_ASSIGN_OR_RETURN(std::string b, bytes_of_token(line.substr(sp + 1), merges, where_line));
    const auto ia = t.id_of_.find(a), ib = t.id_of_.find(b), im = t.id_of_.find(a + b);
    TT_RETURN_IF(ia == t.id_of_.end() || ib == t.id_of_.end() || im == t.id_of_.end(), kDataLoss,
                 "%s line %lld: '%s' merges tokens that %s does not have", merges.c_str(),
                 static_cast<long long>(number), line.c_str(), encoder.c_str());
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    t.merges_.emplace(key, Merge{rank++, im->second});  // a repeated pair keeps its first (lowest) rank
  }
  TT_RETURN_IF(rank == 0, kDataLoss, "%s holds no merges", merges.c_str());
  t.document_start_ = t.added_token("<|endoftext|>");
  t.describe_ = "GPT-2's " + fs::path(encoder).filename().string() + " and " + fs::path(merges).filename().string() +
                ": byte-level BPE, GPT-2's pattern, " + std::to_string(t.vocab()) + " tokens";
  return t;
}

Result<Tokenizer> Tokenizer::from_json(std::string_view text, const std::string& name) {
  const char* nm = name.c_str();
  const json j = json::parse(text, nullptr, false);
  TT_RETURN_IF(j.is_discarded() || !j.is_object(), kDataLoss, "%s: not a tokenizer.json (not a JSON object)", nm);
  const json* model = member(j, "model");
  TT_RETURN_IF(model == nullptr || !model->is_object(), kDataLoss, "%s: not a tokenizer.json (no \"model\")", nm);
  const std::string type = string_member(*model, "type");
  TT_RETURN_IF(!(type == "BPE" || (type.empty() && member(*model, "merges") != nullptr)), kFailedPrecondition,
               "%s: a %s model, not byte-level BPE (tiertrain reads the tokenizers of GPT-2, Llama 3 and Qwen2)", nm,
               type.empty() ? "tokenizer" : type.c_str());
  TT_RETURN_IF(bool_member(*model, "byte_fallback"), kFailedPrecondition,
               "%s: BPE with byte fallback (SentencePiece's kind, as Llama 2's and Mistral's), not byte-level BPE: "
               "not supported",
               nm);
  TT_RETURN_IF(!string_member(*model, "continuing_subword_prefix").empty() ||
                   !string_member(*model, "end_of_word_suffix").empty(),
               kFailedPrecondition, "%s: BPE with word prefixes or suffixes, not byte-level BPE: not supported", nm);
  if (const json* d = member(*model, "dropout"); d != nullptr)
    TT_RETURN_IF(!d->is_number() || d->get<double>() != 0.0, kFailedPrecondition,
                 "%s: BPE dropout %s (random merges): not supported; set \"dropout\": null", nm, d->dump().c_str());

  Tokenizer t;
  // The pre-tokenizer: ByteLevel with GPT-2's pattern, or a Split on a pattern then ByteLevel without one.
  const json* pre = member(j, "pre_tokenizer");
  TT_RETURN_IF(pre == nullptr, kFailedPrecondition, "%s: no pre_tokenizer (a byte-level BPE has ByteLevel)", nm);
  std::optional<Pattern> pattern;
  bool byte_level = false;
  for (const json* p : parts_of(*pre, "pretokenizers")) {
    const std::string pt = string_member(*p, "type");
    if (pt == "ByteLevel") {
      TT_RETURN_IF(byte_level, kFailedPrecondition, "%s: two ByteLevel pre-tokenizers", nm);
      byte_level = true;
      TT_RETURN_IF(bool_member(*p, "add_prefix_space"), kFailedPrecondition,
                   "%s: ByteLevel with add_prefix_space: not supported (GPT-2, Llama 3 and Qwen2 have it off)", nm);
      const json* use_regex = member(*p, "use_regex");
      if (use_regex == nullptr || (use_regex->is_boolean() && use_regex->get<bool>())) {
        TT_RETURN_IF(pattern.has_value(), kFailedPrecondition, "%s: a Split and ByteLevel's own pattern both", nm);
        pattern = Pattern{Pattern::kGpt2, 0};
      }
    } else if (pt == "Split") {
      TT_RETURN_IF(pattern.has_value() || byte_level, kFailedPrecondition,
                   "%s: pre-tokenizers in an order not supported (one Split, then ByteLevel)", nm);
      const json* pat = member(*p, "pattern");
      const std::string re = pat != nullptr ? string_member(*pat, "Regex") : std::string();
      TT_RETURN_IF(string_member(*p, "behavior") != "Isolated" || bool_member(*p, "invert"), kFailedPrecondition,
                   "%s: a Split pre-tokenizer other than Isolated, not inverted: not supported", nm);
      pattern = pattern_of_regex(re);
      TT_RETURN_IF(!pattern.has_value(), kFailedPrecondition,
                   "%s: the pre-tokenizer's pattern %s is none that tiertrain reads (GPT-2's, Llama 3's, Qwen2's)", nm,
                   pat != nullptr ? pat->dump().c_str() : "(none)");
    } else {
      return make_status(StatusCode::kFailedPrecondition,
                         "%s: a %s pre-tokenizer: not supported (byte-level BPE: ByteLevel, or Split then ByteLevel)",
                         nm, pt.c_str());
    }
  }
  TT_RETURN_IF(!byte_level || !pattern.has_value(), kFailedPrecondition,
               "%s: not a byte-level BPE (no ByteLevel pre-tokenizer with a pattern)", nm);
  t.pattern_ = *pattern;
  if (const json* n = member(j, "normalizer"); n != nullptr)
    for (const json* p : parts_of(*n, "normalizers")) {
      const std::string nt = string_member(*p, "type");
      TT_RETURN_IF(nt != "NFC", kFailedPrecondition, "%s: a %s normalizer: not supported (none, or NFC)", nm,
                   nt.c_str());
      t.nfc_ = true;
    }
  if (const json* d = member(j, "decoder"); d != nullptr)
    for (const json* p : parts_of(*d, "decoders"))
      TT_RETURN_IF(string_member(*p, "type") != "ByteLevel", kFailedPrecondition,
                   "%s: a %s decoder: not supported (ByteLevel)", nm, string_member(*p, "type").c_str());
  t.ignore_merges_ = bool_member(*model, "ignore_merges");

  // The vocabulary, then the added tokens over it (an added token's id may be beyond it, as Llama 3's are).
  const json* vocab = member(*model, "vocab");
  TT_RETURN_IF(vocab == nullptr || !vocab->is_object() || vocab->empty(), kDataLoss,
               "%s: the model has no vocab (an object token -> id)", nm);
  constexpr uint64_t kMaxId = 1u << 24;
  const auto id_of = [&](const json& v, const std::string& what) -> Result<int32_t> {
    TT_RETURN_IF(!v.is_number_unsigned() || v.get<uint64_t>() >= kMaxId, kDataLoss, "%s: %s has id %s", nm,
                 what.c_str(), v.dump().c_str());
    return static_cast<int32_t>(v.get<uint64_t>());
  };
  std::vector<std::pair<std::string, int32_t>> entries;
  int32_t top = -1;
  for (const auto& [token, v] : vocab->items()) {
    TT_ASSIGN_OR_RETURN(int32_t id, id_of(v, "token '" + token + "'"));
    entries.emplace_back(token, id);
    top = std::max(top, id);
  }
  const json* added = member(j, "added_tokens");
  TT_RETURN_IF(added != nullptr && !added->is_array(), kDataLoss, "%s: added_tokens is not a list", nm);
  if (added != nullptr)
    for (const json& a : *added) {
      const json* content = member(a, "content");
      const json* idv = member(a, "id");
      TT_RETURN_IF(content == nullptr || !content->is_string() || content->get<std::string>().empty() ||
                       idv == nullptr,
                   kDataLoss, "%s: an added token without content or id: %s", nm, a.dump().substr(0, 200).c_str());
      TT_ASSIGN_OR_RETURN(int32_t id, id_of(*idv, "added token " + content->dump()));
      TT_RETURN_IF(bool_member(a, "single_word"), kFailedPrecondition,
                   "%s: added token %s is single_word: not supported", nm, content->dump().c_str());
      t.added_.push_back({content->get<std::string>(), id, bool_member(a, "lstrip"), bool_member(a, "rstrip")});
      top = std::max(top, id);
    }
  t.bytes_of_.assign(static_cast<size_t>(top) + 1, std::string());
  t.is_added_.assign(static_cast<size_t>(top) + 1, false);
  for (const Added& a : t.added_) {
    TT_RETURN_IF(t.is_added_[static_cast<size_t>(a.id)], kDataLoss, "%s: id %d is given to two added tokens", nm,
                 a.id);
    t.is_added_[static_cast<size_t>(a.id)] = true;
    t.bytes_of_[static_cast<size_t>(a.id)] = a.text;
  }
  for (const auto& [token, id] : entries) {
    if (t.is_added_[static_cast<size_t>(id)]) continue;  // an added token's text is its own (GPT-2's <|endoftext|>)
    TT_RETURN_IF(!t.bytes_of_[static_cast<size_t>(id)].empty(), kDataLoss, "%s: id %d is given to two tokens", nm,
                 id);
    TT_ASSIGN_OR_RETURN(t.bytes_of_[static_cast<size_t>(id)], bytes_of_token(token, nm, "token " + std::to_string(id)));
    TT_RETURN_IF(t.bytes_of_[static_cast<size_t>(id)].empty(), kDataLoss, "%s: token %d is empty", nm, id);
  }
  TT_TRY(t.finish(name));

  // The merges: "a b" strings, or [a, b] pairs (tokenizers 0.20 on).
  const json* merges = member(*model, "merges");
  TT_RETURN_IF(merges == nullptr || !merges->is_array(), kDataLoss, "%s: the model has no merges (a list)", nm);
  int32_t rank = 0;
  for (const json& m : *merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t sp = line.find(' ');
      TT_RETURN_IF(sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != line.npos,
                   kDataLoss, "%s: merge %d, '%s', is not two tokens separated by a space", nm, rank, line.c_str());
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    } else {
      TT_RETURN_IF(!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string(), kDataLoss,
                   "%s: merge %d, %s, is not two tokens", nm, rank, m.dump().substr(0, 200).c_str());
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    const std::string what = "merge " + std::to_string(rank);
    TT_ASSIGN_OR_RETURN(std::string ab, bytes_of_token(a, nm, what));
    TT_ASSIGN_OR_RETURN(std::string bb, bytes_of_token(b, nm, what));
    const auto ia = t.id_of_.find(ab), ib = t.id_of_.find(bb), im = t.id_of_.find(ab + bb);
    TT_RETURN_IF(ia == t.id_of_.end() || ib == t.id_of_.end() || im == t.id_of_.end(), kDataLoss,
                 "%s: merge %d ('%s' '%s') joins tokens that the vocabulary does not have", nm, rank, a.c_str(),
                 b.c_str());
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    t.merges_.emplace(key, Merge{rank++, im->second});
  }

  // The template's tokens around a single text (TemplateProcessing; Llama 3's <|begin_of_text|> $A).
  if (const json* post = member(j, "post_processor"); post != nullptr)
    for (const json* p : parts_of(*post, "processors")) {
      const std::string pt = string_member(*p, "type");
      if (pt == "ByteLevel") continue;
      TT_RETURN_IF(pt != "TemplateProcessing", kFailedPrecondition,
                   "%s: a %s post-processor: not supported (ByteLevel, TemplateProcessing)", nm, pt.c_str());
      const json* single = member(*p, "single");
      const json* specials = member(*p, "special_tokens");
      TT_RETURN_IF(single == nullptr || !single->is_array(), kDataLoss, "%s: TemplateProcessing without \"single\"",
                   nm);
      bool text_seen = false;
      for (const json& item : *single) {
        if (member(item, "Sequence") != nullptr) {
          text_seen = true;
          continue;
        }
        const json* sp = member(item, "SpecialToken");
        const std::string sid = sp != nullptr ? string_member(*sp, "id") : std::string();
        const json* entry = specials != nullptr && !sid.empty() ? member(*specials, sid.c_str()) : nullptr;
        const json* ids = entry != nullptr ? member(*entry, "ids") : nullptr;
        TT_RETURN_IF(ids == nullptr || !ids->is_array(), kDataLoss,
                     "%s: the template names %s, which its special_tokens do not give ids", nm,
                     item.dump().substr(0, 200).c_str());
        for (const json& v : *ids) {
          TT_ASSIGN_OR_RETURN(int32_t id, id_of(v, "template token " + sid));
          TT_RETURN_IF(id > top, kDataLoss, "%s: the template's %s is id %d, past the vocabulary", nm, sid.c_str(),
                       id);
          (text_seen ? t.suffix_ : t.prefix_).push_back(id);
        }
      }
    }
  t.document_start_ = !t.prefix_.empty() ? t.prefix_[0] : t.added_token("<|endoftext|>");
  const int added_count = static_cast<int>(t.added_.size());
  t.describe_ = name + ": byte-level BPE, " + t.pattern_.describe() + (t.nfc_ ? ", NFC" : "") + ", " +
                std::to_string(t.vocab()) + " tokens (" + std::to_string(added_count) + " added), " +
                std::to_string(rank) + " merges";
  return t;
}

Status Tokenizer::read_config(const std::string& path) {
  TT_ASSIGN_OR_RETURN(std::string text, read_text(path, "tokenizer config"));
  const json j = json::parse(text, nullptr, false);
  TT_RETURN_IF(j.is_discarded() || !j.is_object(), kDataLoss, "%s: not a JSON object", path.c_str());
  // A token is named by its text, or by an object with its "content".
  const auto token_text = [&](const char* key) {
    const json* v = member(j, key);
    if (v != nullptr && v->is_object()) v = member(*v, "content");
    return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
  };
  if (const std::string eos = token_text("eos_token"); !eos.empty()) {
    const auto it = id_of_.find(eos);
    end_of_text_ = added_token(eos) >= 0 ? added_token(eos) : it != id_of_.end() ? it->second : -1;
    TT_RETURN_IF(end_of_text_ < 0, kDataLoss, "%s: eos_token '%s' is no token of the tokenizer", path.c_str(),
                 eos.c_str());
  }
  bos_text_ = token_text("bos_token");
  // chat_template: a string, or a list of named templates ({"name": "default", "template": ...}).
  if (const json* c = member(j, "chat_template"); c != nullptr) {
    if (c->is_string()) chat_template_ = c->get<std::string>();
    else if (c->is_array())
      for (const json& named : *c)
        if (string_member(named, "name") == "default") chat_template_ = string_member(named, "template");
  }
  return Status::ok();
}

Status Tokenizer::finish(const std::string& name) {
  id_of_.clear();
  for (size_t i = 0; i < bytes_of_.size(); ++i)
    if (!is_added_[i] && !bytes_of_[i].empty()) id_of_.emplace(bytes_of_[i], static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of_.find(std::string(1, static_cast<char>(b)));
    TT_RETURN_IF(it == id_of_.end(), kDataLoss,
                 "%s: byte 0x%02X is no token (a byte-level vocabulary has all 256)", name.c_str(), b);
    byte_id_[b] = it->second;
  }
  std::sort(added_.begin(), added_.end(), [](const Added& a, const Added& b) {
    return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
  });
  added_index_.clear();
  added_lengths_.clear();
  std::fill(std::begin(added_first_byte_), std::end(added_first_byte_), false);
  end_of_text_ = -1;
  for (const char* eos : {"<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>"})
    for (const Added& a : added_)
      if (end_of_text_ < 0 && a.text == eos) end_of_text_ = a.id;
  cuts_at_newlines_ = true;
  lossless_ = !nfc_;
  for (size_t i = 0; i < added_.size(); ++i) {
    const std::string& s = added_[i].text;
    TT_RETURN_IF(!added_index_.emplace(s, i).second, kDataLoss, "%s: two added tokens are '%s'", name.c_str(),
                 s.c_str());
    if (added_lengths_.empty() || added_lengths_.back() != s.size()) added_lengths_.push_back(s.size());
    added_first_byte_[static_cast<unsigned char>(s[0])] = true;
    // Note [tokenize in blocks]: a cut after a newline is safe only where no added token holds one, nor takes in
    // the whitespace around it.
    if (s.find('\n') != std::string::npos || added_[i].lstrip || added_[i].rstrip) cuts_at_newlines_ = false;
    if (added_[i].lstrip || added_[i].rstrip) lossless_ = false;
  }
  return Status::ok();
}

int32_t Tokenizer::added_token(std::string_view text) const {
  const auto it = added_index_.find(text);
  return it == added_index_.end() ? -1 : added_[it->second].id;
}

void Tokenizer::split_each(const Pattern& p, std::string_view text,
                           const std::function<void(std::string_view)>& piece) {
  if (p.kind == Pattern::kGpt2) split_gpt2(text, piece);
  else split_llama3(text, std::max(1, p.max_digits), piece);
}

std::vector<std::string_view> Tokenizer::split(const Pattern& p, std::string_view text) {
  std::vector<std::string_view> out;
  split_each(p, text, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

// Note [byte-level BPE]: the merges as `tokenizers` applies them: a queue of the adjacent pairs that have a rank,
// lowest rank first and leftmost among equals; a pair popped that no longer stands (a side merged away) is skipped;
// each merge queues the new pairs on its two sides. O(n log n) in the piece's bytes (GPT-2's encoder.py merges every
// occurrence of the best pair per pass, O(n^2); the same tokens where, as in trained merges, a merge's product merges
// only at a higher rank).
void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() == 1) {
    out->push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = id_of_.find(piece); it != id_of_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const int n = static_cast<int>(piece.size());
  std::vector<int32_t> id(static_cast<size_t>(n)), prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<bool> gone(static_cast<size_t>(n), false);
  for (int i = 0; i < n; ++i) {
    id[static_cast<size_t>(i)] = byte_id_[static_cast<unsigned char>(piece[static_cast<size_t>(i)])];
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  using Candidate = std::tuple<int32_t, int32_t, int32_t>;  // rank, position of the left token, merged id
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](int left) {
    const int right = next[static_cast<size_t>(left)];
    if (left < 0 || right < 0) return;
    const auto it = merges_.find((static_cast<uint64_t>(id[static_cast<size_t>(left)]) << 32) |
                                 static_cast<uint32_t>(id[static_cast<size_t>(right)]));
    if (it != merges_.end()) queue.emplace(it->second.rank, left, it->second.id);
  };
  for (int i = 0; i + 1 < n; ++i) offer(i);
  while (!queue.empty()) {
    const auto [rank, left, merged] = queue.top();
    queue.pop();
    const size_t l = static_cast<size_t>(left);
    if (gone[l] || next[l] < 0) continue;
    const size_t r = static_cast<size_t>(next[l]);
    const auto it = merges_.find((static_cast<uint64_t>(id[l]) << 32) | static_cast<uint32_t>(id[r]));
    if (it == merges_.end() || it->second.id != merged || it->second.rank != rank) continue;  // no longer stands
    id[l] = merged;
    gone[r] = true;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = left;
    if (prev[l] >= 0) offer(prev[l]);
    offer(left);
  }
  for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)]) out->push_back(id[static_cast<size_t>(i)]);
}

void Tokenizer::encode_stretch(std::string_view text, PieceCache* cache, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string normal;
  if (nfc_ && std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    normal = nfc(text);
    text = normal;
  }
  split_each(pattern_, text, [&](std::string_view piece) {
    if (cache == nullptr) {
      encode_piece(piece, out);
      return;
    }
    auto it = cache->find(piece);
    if (it == cache->end()) {
      if (cache->size() >= 1000000) cache->clear();
      std::vector<int32_t> ids;
      encode_piece(piece, &ids);
      it = cache->emplace(std::string(piece), std::move(ids)).first;
    }
    out->insert(out->end(), it->second.begin(), it->second.end());
  });
}

namespace {

// The code point that ends at s[end] (its first byte's offset in *begin), or 0xFFFFFFFF for a stray byte.
uint32_t code_point_before(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && end - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t len = 0;
  const uint32_t cp = next_code_point(s, b, &len);
  if (b + len != end) {
    *begin = end - 1;
    return 0xFFFFFFFFu;
  }
  *begin = b;
  return cp;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, PieceCache* cache, bool add_special) const {
  std::vector<int32_t> out;
  if (add_special) out = prefix_;
  // The added tokens, leftmost first and the longest of those that start there.
  size_t start = 0;  // the stretch not yet encoded
  for (size_t i = 0; i < text.size();) {
    if (!added_first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const Added* a = nullptr;
    for (size_t len : added_lengths_) {
      if (i + len > text.size()) continue;
      if (const auto it = added_index_.find(text.substr(i, len)); it != added_index_.end()) {
        a = &added_[it->second];
        break;
      }
    }
    if (a == nullptr) {
      ++i;
      continue;
    }
    size_t before = i, after = i + a->text.size();
    if (a->lstrip)
      for (size_t b = 0; before > start && is_space(code_point_before(text, before, &b));) before = b;
    if (a->rstrip)
      for (size_t l = 0; after < text.size() && is_space(next_code_point(text, after, &l));) after += l;
    encode_stretch(text.substr(start, before - start), cache, &out);
    out.push_back(a->id);
    start = i = after;
  }
  encode_stretch(text.substr(start), cache, &out);
  if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

Result<std::string> Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    TT_RETURN_IF(id < 0 || id >= vocab() || bytes_of_[static_cast<size_t>(id)].empty(), kInvalidArgument,
                 "token %d is not in the tokenizer's vocabulary (%d tokens)", id, vocab());
    out += bytes_of_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace tt
