// data/npy: NumPy's .npy arrays (format 1.0/2.0/3.0, little-endian, C order), read by memory mapping and written
// atomically: the feature arrays of the large-input workload (apps/features.h), which numpy writes and reads as they
// are (`np.load(path, mmap_mode="r")`).
//
//   TT_ASSIGN_OR_RETURN(data::NpyArray x, data::NpyArray::open("features.npy"));   // dtype "<f4", shape {N, D}
//   const float* row = x.data<float>() + i * x.shape()[1];
//   TT_TRY(data::write_npy("labels.npy", "<i4", {N}, labels.data()));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tt::data {

class NpyArray {
 public:
  // Maps the file read-only; checks the header (magic, version, a dict with descr, fortran_order False and shape)
  // and that the file holds exactly the data the header says. Errors name the file and what is wrong.
  static Result<NpyArray> open(const std::string& path);
  NpyArray(NpyArray&& o) noexcept;
  NpyArray& operator=(NpyArray&& o) noexcept;
  NpyArray(const NpyArray&) = delete;
  NpyArray& operator=(const NpyArray&) = delete;
  ~NpyArray();

  const std::string& descr() const { return descr_; }  // "<f4", "<i4", ...
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const;
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(base_ + offset_);
  }
  const std::string& path() const { return path_; }

 private:
  NpyArray() = default;
  std::string path_, descr_;
  std::vector<int64_t> shape_;
  const unsigned char* base_ = nullptr;
  size_t bytes_ = 0, offset_ = 0;
};

// Writes an array of `descr` ("<f4" or "<i4") and `shape` from `data` (C order), atomically (a temporary file
// renamed into place).
Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                 const void* data);

// What precedes the data of such an array (format 1.0), for one written in pieces (AtomicFile in core/atomic_file.h:
// the header, then the data in C order).
Result<std::string> npy_header(const std::string& descr, const std::vector<int64_t>& shape);

}  // namespace tt::data
