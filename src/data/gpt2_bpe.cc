#include "data/gpt2_bpe.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tt {
namespace {

struct CodeRange {
  uint32_t first, last;
};
#include "data/unicode_classes.inc"

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
                 "%s: %s has a character (U+%04X) that stands for no byte: not GPT-2's byte-level vocabulary",
                 file.c_str(), what.c_str(), cp);
    bytes.push_back(static_cast<char>(it->second));
  }
  return bytes;
}

Result<std::string> read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TT_RETURN_IF(!in, kNotFound, "%s %s: cannot open (%s)", what, path.c_str(), std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Result<std::vector<std::string>> load_gpt2_vocab(const std::string& where) {
  std::string path = where;
  std::error_code ec;
  if (std::filesystem::is_directory(where, ec)) {
    for (const char* n : {"encoder.json", "vocab.json"})
      if (path == where && std::filesystem::exists(std::filesystem::path(where) / n, ec))
        path = (std::filesystem::path(where) / n).string();
    TT_RETURN_IF(path == where, kNotFound, "--vocab %s: no encoder.json or vocab.json in this folder", where.c_str());
  }
  TT_ASSIGN_OR_RETURN(std::string text, read_text(path, "--vocab"));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
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

Result<Gpt2Bpe> Gpt2Bpe::load(const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool folder = fs::is_directory(where, ec);
  const fs::path dir = folder ? fs::path(where) : fs::path(where).parent_path();
  auto first_of = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (fs::exists(dir / n, ec)) return (dir / n).string();
    return {};
  };
  const std::string encoder = folder ? first_of({"encoder.json", "vocab.json"}) : where;
  const std::string merges = first_of({"vocab.bpe", "merges.txt"});
  TT_RETURN_IF(encoder.empty(), kNotFound, "--vocab %s: no encoder.json or vocab.json in this folder", where.c_str());
  TT_RETURN_IF(merges.empty(), kNotFound,
               "--vocab %s: no vocab.bpe or merges.txt in %s (GPT-2's merges, published with encoder.json)",
               where.c_str(), dir.string().c_str());
  Gpt2Bpe bpe;
  TT_ASSIGN_OR_RETURN(bpe.bytes_of_, load_gpt2_vocab(encoder));
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t i = 0; i < bpe.bytes_of_.size(); ++i) {
    if (bpe.bytes_of_[i] == "<|endoftext|>") bpe.end_of_text_ = static_cast<int32_t>(i);
    else if (!bpe.bytes_of_[i].empty()) id_of.emplace(bpe.bytes_of_[i], static_cast<int32_t>(i));
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(1, static_cast<char>(b)));
    TT_RETURN_IF(it == id_of.end(), kDataLoss, "--vocab %s: byte 0x%02X is no token (a byte-level vocabulary has all "
                 "256)", encoder.c_str(), b);
    bpe.byte_id_[b] = it->second;
  }
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
    const auto ia = id_of.find(a), ib = id_of.find(b), im = id_of.find(a + b);
    TT_RETURN_IF(ia == id_of.end() || ib == id_of.end() || im == id_of.end(), kDataLoss,
                 "%s line %lld: '%s' merges tokens that %s does not have", merges.c_str(),
                 static_cast<long long>(number), line.c_str(), encoder.c_str());
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    bpe.merges_.emplace(key, Merge{rank++, im->second});  // a repeated pair keeps its first (lowest) rank
  }
  TT_RETURN_IF(rank == 0, kDataLoss, "%s holds no merges", merges.c_str());
  return bpe;
}

void Gpt2Bpe::split_each(std::string_view s, const std::function<void(std::string_view)>& piece) {
  // Over byte offsets, each code point decoded where it is looked at: nothing the size of the text is kept (a
  // corpus file of gigabytes is tokenized in place).
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

std::vector<std::string_view> Gpt2Bpe::split(std::string_view text) {
  std::vector<std::string_view> out;
  split_each(text, [&](std::string_view p) { out.push_back(p); });
  return out;
}

std::vector<int32_t> Gpt2Bpe::encode_piece(std::string_view piece) const {
  std::vector<int32_t> parts;
  parts.reserve(piece.size());
  for (char c : piece) parts.push_back(byte_id_[static_cast<unsigned char>(c)]);
  std::vector<int32_t> next;
  while (parts.size() > 1) {
    // The adjacent pair of lowest rank; then every occurrence of it merged, left to right (encoder.py's bpe()).
    int32_t best = std::numeric_limits<int32_t>::max();
    Merge m{0, -1};
    int32_t left = -1, right = -1;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto it = merges_.find((static_cast<uint64_t>(parts[i]) << 32) | static_cast<uint32_t>(parts[i + 1]));
      if (it != merges_.end() && it->second.rank < best) {
        best = it->second.rank;
        m = it->second;
        left = parts[i];
        right = parts[i + 1];
      }
    }
    if (m.id < 0) break;
    next.clear();
    for (size_t i = 0; i < parts.size();) {
      if (i + 1 < parts.size() && parts[i] == left && parts[i + 1] == right) {
        next.push_back(m.id);
        i += 2;
      } else {
        next.push_back(parts[i++]);
      }
    }
    parts.swap(next);
  }
  return parts;
}

std::vector<int32_t> Gpt2Bpe::encode(std::string_view text, PieceCache* cache) const {
  static constexpr std::string_view kEnd = "<|endoftext|>";
  std::vector<int32_t> out;
  while (!text.empty()) {
    const size_t special = end_of_text_ >= 0 ? text.find(kEnd) : std::string_view::npos;
    split_each(text.substr(0, special), [&](std::string_view piece) {
      if (cache == nullptr) {
        for (int32_t id : encode_piece(piece)) out.push_back(id);
        return;
      }
      auto it = cache->find(piece);
      if (it == cache->end()) {
        if (cache->size() >= 1000000) cache->clear();
        it = cache->emplace(std::string(piece), encode_piece(piece)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    });
    if (special == std::string_view::npos) break;
    out.push_back(end_of_text_);
    text.remove_prefix(special + kEnd.size());
  }
  return out;
}

Result<std::string> Gpt2Bpe::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    TT_RETURN_IF(id < 0 || id >= vocab(), kInvalidArgument, "token %d is not in GPT-2's vocabulary of %d", id,
                 vocab());
    out += bytes_of_[static_cast<size_t>(id)];
  }
  return out;
}

}  // namespace tt
