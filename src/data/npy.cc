#include "data/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/atomic_file.h"

namespace tt::data {
namespace {

size_t descr_size(const std::string& d) {
  if (d == "<f4" || d == "<i4") return 4;
  if (d == "<f8" || d == "<i8") return 8;
  if (d == "|u1" || d == "|i1") return 1;
  return 0;
}

// The value of 'key' in the header's dict, as written (a quoted string, True/False, or a tuple), or "".
std::string dict_value(std::string_view h, const std::string& key) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string_view::npos) return "";
  size_t p = h.find(':', k);
  if (p == std::string_view::npos) return "";
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p >= h.size()) return "";
  size_t end;
  if (h[p] == '\'') {
    end = h.find('\'', p + 1);
    return end == std::string_view::npos ? "" : std::string(h.substr(p + 1, end - p - 1));
  }
  if (h[p] == '(') {
    end = h.find(')', p);
    return end == std::string_view::npos ? "" : std::string(h.substr(p, end - p + 1));
  }
  end = h.find_first_of(",}", p);
  return std::string(h.substr(p, end - p));
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

NpyArray::NpyArray(NpyArray&& o) noexcept { *this = std::move(o); }

NpyArray& NpyArray::operator=(NpyArray&& o) noexcept {
  if (this != &o) {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), bytes_);
    path_ = std::move(o.path_);
    descr_ = std::move(o.descr_);
    shape_ = std::move(o.shape_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    offset_ = o.offset_;
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

NpyArray::~NpyArray() {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), bytes_);
}

Result<NpyArray> NpyArray::open(const std::string& path) {
  TT_TRY(require_regular_file(path, ".npy file"));  // (a FIFO would block the open)
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TT_RETURN_IF(fd < 0, kNotFound, "%s: %s", path.c_str(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 12) {
    ::close(fd);
    return make_status(StatusCode::kDataLoss, "%s: not a .npy file (too short)", path.c_str());
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  TT_RETURN_IF(m == MAP_FAILED, kIoError, "%s: mmap: %s", path.c_str(), std::strerror(errno));
  NpyArray a;
  a.path_ = path;
  a.base_ = static_cast<const unsigned char*>(m);
  a.bytes_ = static_cast<size_t>(st.st_size);
  const unsigned char* b = a.base_;
  TT_RETURN_IF(std::memcmp(b, "\x93NUMPY", 6) != 0, kDataLoss, "%s: not a .npy file (no magic)", path.c_str());
  const int major = b[6];
  size_t header_len, start;
  if (major == 1) {
    header_len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    header_len = static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8 | static_cast<size_t>(b[10]) << 16 |
                 static_cast<size_t>(b[11]) << 24;
    start = 12;
  } else {
    return make_status(StatusCode::kDataLoss, "%s: .npy version %d is not known", path.c_str(), major);
  }
  TT_RETURN_IF(start + header_len > a.bytes_, kDataLoss, "%s: the header runs past the file", path.c_str());
  const std::string_view h(reinterpret_cast<const char*>(b + start), header_len);
  a.descr_ = dict_value(h, "descr");
  TT_RETURN_IF(descr_size(a.descr_) == 0, kDataLoss, "%s: dtype '%s' is not supported (<f4, <i4, <f8, <i8)",
               path.c_str(), a.descr_.c_str());
  TT_RETURN_IF(dict_value(h, "fortran_order") != "False", kDataLoss,
               "%s: Fortran-order arrays are not supported (save it with np.ascontiguousarray)", path.c_str());
  const std::string shape = dict_value(h, "shape");
  TT_RETURN_IF(shape.empty(), kDataLoss, "%s: no shape in the header", path.c_str());
  for (size_t p = 1; p < shape.size();) {
    while (p < shape.size() && (shape[p] == ' ' || shape[p] == ',')) ++p;
    if (p >= shape.size() || shape[p] == ')') break;
    char* end = nullptr;
    const long long v = std::strtoll(shape.c_str() + p, &end, 10);
    TT_RETURN_IF(end == shape.c_str() + p || v < 0, kDataLoss, "%s: shape %s", path.c_str(), shape.c_str());
    a.shape_.push_back(v);
    p = static_cast<size_t>(end - shape.c_str());
  }
  a.offset_ = start + header_len;
  const size_t want = static_cast<size_t>(a.numel()) * descr_size(a.descr_);
  TT_RETURN_IF(a.bytes_ - a.offset_ != want, kDataLoss, "%s: %zu bytes of data, the header's %s %s needs %zu",
               path.c_str(), a.bytes_ - a.offset_, a.descr_.c_str(), shape.c_str(), want);
  return a;
}

Result<std::string> npy_header(const std::string& descr, const std::vector<int64_t>& shape) {
  TT_RETURN_IF(descr_size(descr) == 0, kInvalidArgument, "an .npy array of dtype '%s' (<f4, <i4, <f8, <i8 are written)",
               descr.c_str());
  // numpy's tuple: "(6,)" for one dimension, "(6, 5)" for more.
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Version 1.0: the magic, the version, the header's length, the header padded with spaces to a multiple of 64
  // bytes with the newline last.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header;
}

Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                 const void* data) {
  TT_ASSIGN_OR_RETURN(std::string out, npy_header(descr, shape));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  out.append(static_cast<const char*>(data), static_cast<size_t>(n) * descr_size(descr));
  return write_file_atomically(path, out);
}

}  // namespace tt::data
