// core/tensor: a non-owning, typed, shaped view of memory on one device, labelled with the TensorClass that memory
// policies and statistics are kept by.
//
// Memory is owned by the pools in memory/; a Tensor only describes it. Every allocation names its class:
//
//   Tensor w = pool.allocate_tensor({768, 768}, DType::kF32, TensorClass::kParam, "h.0.attn.proj.w");
//   float* p = w.data<float>();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"

namespace tt {

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }

// What a tensor is for. Memory statistics and placement policies are kept per class.
enum class TensorClass : uint8_t {
  kParam = 0,    // model parameters (fp32 master weights)
  kGrad,         // parameter gradients
  kOptimState,   // optimizer moments
  kActivation,   // forward outputs saved for the backward pass
  kWorkspace,    // scratch that lives within one op or one pass (activation gradients, logits)
  kInput,        // token ids and targets
};
constexpr int kNumTensorClasses = 6;
const char* tensor_class_name(TensorClass cls);
Result<TensorClass> parse_tensor_class(const std::string& name);

// Up to four dimensions, row-major.
class Shape {
 public:
  static constexpr int kMaxRank = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string to_string() const;  // "[4, 64, 256]"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype, TensorClass cls, Device device)
      : data_(data), shape_(shape), dtype_(dtype), cls_(cls), device_(device) {}

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    TT_CHECK(dtype_ == dtype_of<T>(), "tensor is %s, accessed as %s", dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_);
  }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  TensorClass tensor_class() const { return cls_; }
  Device device() const { return device_; }

  // A view of `shape.numel()` elements starting `elem_offset` elements in; must stay inside this tensor.
  Tensor view(int64_t elem_offset, Shape shape) const;
  // Same memory, another shape with the same element count.
  Tensor reshape(Shape shape) const;

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  TensorClass cls_ = TensorClass::kWorkspace;
  Device device_;
};

}  // namespace tt
