#include "core/tensorfile.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/atomic_file.h"

namespace tt {
namespace {

constexpr char kMagic[8] = {'T', 'T', 'T', 'E', 'N', 'S', 'R', '1'};
constexpr char kTrailerMagic[8] = {'T', 'T', 'E', 'N', 'D', '0', '0', '1'};
constexpr uint64_t kAlign = 64;
constexpr uint64_t kPrefixBytes = 24;
constexpr uint64_t kTrailerBytes = 16;

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    TT_RETURN_IF(n < 0, kIoError, "writing '%s' failed: %s", path.c_str(), std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

// A fuzzing build (tests/fuzz, FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION as OSS-Fuzz defines it) reads past CRC
// mismatches: a mutated header would otherwise never get past its CRC, and the JSON behind it would go unfuzzed.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kCheckCrcs = false;
#else
constexpr bool kCheckCrcs = true;
#endif

}  // namespace

uint32_t crc32_of(const void* data, size_t bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const Bytef* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    uInt chunk = static_cast<uInt>(bytes > (1u << 30) ? (1u << 30) : bytes);
    crc = ::crc32(crc, p, chunk);
    p += chunk;
    bytes -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void TensorFileWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
  Item item;
  item.entry.name = name;
  item.entry.dtype = dtype;
  item.entry.shape = std::move(shape);
  item.entry.bytes = numel * dtype_size(dtype);
  item.data = data;
  uint64_t offset = 0;
  if (!items_.empty()) offset = align_up(items_.back().entry.offset + items_.back().entry.bytes);
  item.entry.offset = offset;
  items_.push_back(std::move(item));
}

Status TensorFileWriter::write_atomic(const std::string& path) const {
  nlohmann::json header;
  header["format"] = "tiertrain-tensors";
  header["version"] = 1;
  header["meta"] = meta_;
  header["tensors"] = nlohmann::json::array();
  for (const auto& it : items_) {
    const TensorFileEntry& e = it.entry;
    header["tensors"].push_back({{"name", e.name},
                                 {"dtype", dtype_name(e.dtype)},
                                 {"shape", e.shape},
                                 {"offset", e.offset},
                                 {"bytes", e.bytes},
                                 {"crc32", crc32_of(it.data, e.bytes)}});
  }
  // Strings in the metadata (paths) need not be UTF-8: invalid bytes are written as U+FFFD rather than throwing.
  const std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const uint64_t header_bytes = text.size();
  const uint32_t header_crc = crc32_of(text.data(), text.size());
  const uint64_t data_start = align_up(kPrefixBytes + header_bytes);
  const uint64_t data_bytes = items_.empty() ? 0 : items_.back().entry.offset + items_.back().entry.bytes;
  const uint64_t total = data_start + data_bytes + kTrailerBytes;

  const std::string tmp = temporary_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TT_RETURN_IF(fd < 0, kIoError, "cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  char prefix[kPrefixBytes] = {};
  std::memcpy(prefix, kMagic, 8);
  std::memcpy(prefix + 8, &header_bytes, 8);
  std::memcpy(prefix + 16, &header_crc, 4);
  const char zeros[kAlign] = {};
  Status s = write_all(fd, prefix, kPrefixBytes, tmp);
  if (s.is_ok()) s = write_all(fd, text.data(), text.size(), tmp);
  if (s.is_ok()) s = write_all(fd, zeros, data_start - kPrefixBytes - header_bytes, tmp);
  uint64_t pos = 0;
  for (const auto& it : items_) {
    if (!s.is_ok()) break;
    s = write_all(fd, zeros, it.entry.offset - pos, tmp);
    if (s.is_ok()) s = write_all(fd, it.data, it.entry.bytes, tmp);
    pos = it.entry.offset + it.entry.bytes;
  }
  if (s.is_ok()) {
    char trailer[kTrailerBytes];
    std::memcpy(trailer, kTrailerMagic, 8);
    std::memcpy(trailer + 8, &total, 8);
    s = write_all(fd, trailer, kTrailerBytes, tmp);
  }
  if (!s.is_ok()) return fail(s);
  if (::fsync(fd) != 0) return fail(make_status(StatusCode::kIoError, "fsync of '%s' failed: %s", tmp.c_str(),
                                                std::strerror(errno)));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return make_status(StatusCode::kIoError, "closing '%s' failed: %s", tmp.c_str(), std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return make_status(StatusCode::kIoError, "renaming '%s' to '%s' failed: %s", tmp.c_str(), path.c_str(),
                       std::strerror(err));
  }
  int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

Result<TensorFileReader> TensorFileReader::open(const std::string& path) {
  TT_TRY(require_regular_file(path, "tensor file"));
  FILE* raw = std::fopen(path.c_str(), "rb");
  TT_RETURN_IF(raw == nullptr, kNotFound, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
  TensorFileReader r;
  r.path_ = path;
  r.file_ = std::shared_ptr<FILE>(raw, [](FILE* f) { std::fclose(f); });
  struct stat st {};
  TT_RETURN_IF(fstat(fileno(raw), &st) != 0, kIoError, "cannot stat '%s': %s", path.c_str(), std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  TT_RETURN_IF(size < kPrefixBytes + kTrailerBytes, kDataLoss,
               "'%s' is truncated or not a tensor file: %llu bytes, smaller than the %llu-byte frame", path.c_str(),
               static_cast<unsigned long long>(size), static_cast<unsigned long long>(kPrefixBytes + kTrailerBytes));
  char prefix[kPrefixBytes];
  TT_RETURN_IF(std::fread(prefix, 1, kPrefixBytes, raw) != kPrefixBytes, kIoError, "reading '%s' failed",
               path.c_str());
  TT_RETURN_IF(std::memcmp(prefix, kMagic, 8) != 0, kDataLoss, "'%s' is not a tiertrain tensor file (bad magic)",
               path.c_str());
  uint64_t header_bytes;
  uint32_t header_crc, reserved;
  std::memcpy(&header_bytes, prefix + 8, 8);
  std::memcpy(&header_crc, prefix + 16, 4);
  std::memcpy(&reserved, prefix + 20, 4);
  TT_RETURN_IF(reserved != 0, kDataLoss,
               "'%s': the reserved word of its prefix (bytes 20-23) is %u, not 0: damaged, or a format this build "
               "does not know", path.c_str(), reserved);
  TT_RETURN_IF(header_bytes > size - kPrefixBytes - kTrailerBytes, kDataLoss,
               "'%s' is truncated: header of %llu bytes does not fit in a %llu-byte file", path.c_str(),
               static_cast<unsigned long long>(header_bytes), static_cast<unsigned long long>(size));
  char trailer[kTrailerBytes];
  TT_RETURN_IF(std::fseek(raw, static_cast<long>(size - kTrailerBytes), SEEK_SET) != 0 ||
                   std::fread(trailer, 1, kTrailerBytes, raw) != kTrailerBytes,
               kIoError, "reading the trailer of '%s' failed", path.c_str());
  uint64_t recorded_size;
  std::memcpy(&recorded_size, trailer + 8, 8);
  TT_RETURN_IF(std::memcmp(trailer, kTrailerMagic, 8) != 0, kDataLoss,
               "'%s' is truncated or was not completely written (its last 16 bytes are not a tensor file's trailer)",
               path.c_str());
  TT_RETURN_IF(recorded_size != size, kDataLoss,
               "'%s' is truncated or was not completely written (%llu bytes, its trailer records %llu)",
               path.c_str(), static_cast<unsigned long long>(size), static_cast<unsigned long long>(recorded_size));
  std::string text(header_bytes, '\0');
  TT_RETURN_IF(std::fseek(raw, static_cast<long>(kPrefixBytes), SEEK_SET) != 0 ||
                   std::fread(text.data(), 1, header_bytes, raw) != header_bytes,
               kIoError, "reading the header of '%s' failed", path.c_str());
  TT_RETURN_IF(kCheckCrcs && crc32_of(text.data(), text.size()) != header_crc, kDataLoss, "'%s' is corrupt: header CRC mismatch",
               path.c_str());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
    TT_RETURN_IF(header.value("format", "") != "tiertrain-tensors", kDataLoss, "'%s': unknown format '%s'",
                 path.c_str(), header.value("format", "").c_str());
    TT_RETURN_IF(header.value("version", 0) != 1, kDataLoss, "'%s': unsupported tensor-file version %d",
                 path.c_str(), header.value("version", 0));
    r.meta_ = header.value("meta", nlohmann::json::object());
    r.data_start_ = align_up(kPrefixBytes + header_bytes);
    TT_RETURN_IF(!header.contains("tensors") || !header.at("tensors").is_array(), kDataLoss,
                 "'%s': header field 'tensors' must be an array of tensor entries", path.c_str());
    std::set<std::string> names;
    size_t index = 0;
    for (const auto& t : header.at("tensors")) {
      // Each field checked by itself, so that the error names the entry, the field and what it must be.
      const std::string at = str_format("'%s': tensor entry %zu", path.c_str(), index++);
      TT_RETURN_IF(!t.is_object(), kDataLoss, "%s must be an object", at.c_str());
      auto field = [&](const char* key) -> const nlohmann::json* {
        auto it = t.find(key);
        return it == t.end() ? nullptr : &*it;
      };
      auto unsigned_field = [&](const char* key, uint64_t max, uint64_t* out) -> Status {
        const nlohmann::json* v = field(key);
        TT_RETURN_IF(v == nullptr || !v->is_number_unsigned() || v->get<uint64_t>() > max, kDataLoss,
                     "%s: field '%s' must be an integer from 0 to %llu", at.c_str(), key,
                     static_cast<unsigned long long>(max));
        *out = v->get<uint64_t>();
        return Status::ok();
      };
      TensorFileEntry e;
      const nlohmann::json* name = field("name");
      TT_RETURN_IF(name == nullptr || !name->is_string() || name->get<std::string>().empty(), kDataLoss,
                   "%s: field 'name' must be a non-empty string", at.c_str());
      e.name = name->get<std::string>();
      TT_RETURN_IF(!names.insert(e.name).second, kDataLoss, "%s: tensor '%s' appears twice in the file", at.c_str(),
                   e.name.c_str());
      const nlohmann::json* dtype = field("dtype");
      TT_RETURN_IF(dtype == nullptr || !dtype->is_string(), kDataLoss, "%s ('%s'): field 'dtype' must be a string",
                   at.c_str(), e.name.c_str());
      auto dt = parse_dtype(dtype->get<std::string>());
      TT_RETURN_IF(!dt.is_ok(), kDataLoss, "%s ('%s'): dtype '%s' is not one this build reads", at.c_str(),
                   e.name.c_str(), dtype->get<std::string>().c_str());
      e.dtype = dt.value();
      const nlohmann::json* shape = field("shape");
      TT_RETURN_IF(shape == nullptr || !shape->is_array() || shape->size() > 8, kDataLoss,
                   "%s ('%s'): field 'shape' must be an array of at most 8 dimensions", at.c_str(), e.name.c_str());
      uint64_t numel = 1;
      for (const auto& d : *shape) {
        // Each dimension and the product below 2^48 elements: no overflow in the byte count below.
        TT_RETURN_IF(!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 48) ||
                         (d.get<uint64_t>() > 0 && numel > (uint64_t(1) << 48) / d.get<uint64_t>()),
                     kDataLoss, "%s ('%s'): field 'shape' must hold integers >= 0 of at most 2^48 elements in all",
                     at.c_str(), e.name.c_str());
        e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
        numel *= d.get<uint64_t>();
      }
      uint64_t crc = 0;
      TT_TRY(unsigned_field("offset", size, &e.offset));
      TT_TRY(unsigned_field("bytes", size, &e.bytes));
      TT_TRY(unsigned_field("crc32", UINT32_MAX, &crc));
      e.crc32 = static_cast<uint32_t>(crc);
      TT_RETURN_IF(numel * dtype_size(e.dtype) != e.bytes, kDataLoss,
                   "'%s': tensor '%s' declares %llu bytes but shape %s of %s needs %llu", path.c_str(),
                   e.name.c_str(), static_cast<unsigned long long>(e.bytes), shape_to_string(e.shape).c_str(),
                   dtype_name(e.dtype), static_cast<unsigned long long>(numel * dtype_size(e.dtype)));
      TT_RETURN_IF(r.data_start_ + e.offset + e.bytes > size - kTrailerBytes, kDataLoss,
                   "'%s' is truncated: tensor '%s' extends past the end of the data", path.c_str(), e.name.c_str());
      r.entries_.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    return make_status(StatusCode::kDataLoss, "'%s': malformed header: %s", path.c_str(), e.what());
  }
  return r;
}

const TensorFileEntry* TensorFileReader::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Status TensorFileReader::verify(const std::string& name) const {
  const TensorFileEntry* e = find(name);
  TT_RETURN_IF(e == nullptr, kNotFound, "'%s' has no tensor '%s'", path_.c_str(), name.c_str());
  if (!kCheckCrcs) return Status::ok();
  FILE* f = file_.get();
  TT_RETURN_IF(std::fseek(f, static_cast<long>(data_start_ + e->offset), SEEK_SET) != 0, kIoError,
               "reading tensor '%s' from '%s' failed", name.c_str(), path_.c_str());
  std::vector<unsigned char> piece(std::min<uint64_t>(e->bytes, uint64_t(8) << 20));
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (uint64_t left = e->bytes; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, piece.size()));
    TT_RETURN_IF(std::fread(piece.data(), 1, n, f) != n, kIoError, "reading tensor '%s' from '%s' failed",
                 name.c_str(), path_.c_str());
    crc = ::crc32(crc, piece.data(), static_cast<uInt>(n));
    left -= n;
  }
  TT_RETURN_IF(static_cast<uint32_t>(crc) != e->crc32, kDataLoss, "'%s' is corrupt: CRC mismatch in tensor '%s'",
               path_.c_str(), name.c_str());
  return Status::ok();
}

Status TensorFileReader::read(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                              void* dst) const {
  const TensorFileEntry* e = find(name);
  TT_RETURN_IF(e == nullptr, kNotFound, "'%s' has no tensor '%s'", path_.c_str(), name.c_str());
  TT_RETURN_IF(e->dtype != dtype || e->shape != shape, kFailedPrecondition,
               "'%s': tensor '%s' is %s %s in the file but %s %s is expected", path_.c_str(), name.c_str(),
               dtype_name(e->dtype), shape_to_string(e->shape).c_str(), dtype_name(dtype),
               shape_to_string(shape).c_str());
  FILE* f = file_.get();
  TT_RETURN_IF(std::fseek(f, static_cast<long>(data_start_ + e->offset), SEEK_SET) != 0 ||
                   std::fread(dst, 1, e->bytes, f) != e->bytes,
               kIoError, "reading tensor '%s' from '%s' failed", name.c_str(), path_.c_str());
  TT_RETURN_IF(kCheckCrcs && crc32_of(dst, e->bytes) != e->crc32, kDataLoss, "'%s' is corrupt: CRC mismatch in tensor '%s'",
               path_.c_str(), name.c_str());
  return Status::ok();
}

}  // namespace tt
