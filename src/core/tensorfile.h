// core/tensorfile: the `.ttf` container of named tensors plus JSON metadata (docs/FORMATS.md), used for checkpoints
// and for the PyTorch golden references. Writes are atomic (temp file, fsync, rename, fsync of the directory);
// reads check magic, size, header CRC and each tensor's CRC, and name the first thing that does not match.
//
//   TensorFileWriter w;
//   w.set_meta({{"step", 10}});
//   w.add("wte", DType::kF32, {256, 64}, host_ptr);
//   TT_TRY(w.write_atomic("/ckpt/step_000010.ttf"));
//
//   TT_ASSIGN_OR_RETURN(TensorFileReader r, TensorFileReader::open(path));
//   TT_TRY(r.read("wte", DType::kF32, {256, 64}, dst));
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/tensor.h"

namespace tt {

struct TensorFileEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

uint32_t crc32_of(const void* data, size_t bytes);
std::string shape_to_string(const std::vector<int64_t>& shape);

class TensorFileWriter {
 public:
  void set_meta(nlohmann::json meta) { meta_ = std::move(meta); }
  // Records a tensor; `data` must stay valid until write_atomic returns.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  Status write_atomic(const std::string& path) const;

 private:
  struct Item {
    TensorFileEntry entry;
    const void* data;
  };
  nlohmann::json meta_ = nlohmann::json::object();
  std::vector<Item> items_;
};

class TensorFileReader {
 public:
  static Result<TensorFileReader> open(const std::string& path);

  const nlohmann::json& meta() const { return meta_; }
  const std::vector<TensorFileEntry>& entries() const { return entries_; }
  const TensorFileEntry* find(const std::string& name) const;
  const std::string& path() const { return path_; }

  // Reads a tensor into dst after checking that dtype and shape are as expected, and its CRC.
  Status read(const std::string& name, DType dtype, const std::vector<int64_t>& shape, void* dst) const;
  // Checks a tensor's bytes against its CRC without keeping them (read in pieces of a few MiB).
  Status verify(const std::string& name) const;
  // Reads a tensor of any shape into a vector of T (dtype must match T).
  template <typename T>
  Result<std::vector<T>> read_all(const std::string& name) const {
    const TensorFileEntry* e = find(name);
    if (e == nullptr) return make_status(StatusCode::kNotFound, "%s: no tensor '%s'", path_.c_str(), name.c_str());
    std::vector<T> out(e->bytes / sizeof(T));
    TT_TRY(read(name, dtype_of<T>(), e->shape, out.data()));
    return out;
  }

 private:
  std::string path_;
  nlohmann::json meta_;
  std::vector<TensorFileEntry> entries_;
  uint64_t data_start_ = 0;
  std::shared_ptr<FILE> file_;
};

}  // namespace tt
