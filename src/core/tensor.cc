#include "core/tensor.h"

namespace tt {

const char* tensor_class_name(TensorClass cls) {
  switch (cls) {
    case TensorClass::kParam: return "param";
    case TensorClass::kGrad: return "grad";
    case TensorClass::kOptimState: return "optim_state";
    case TensorClass::kActivation: return "activation";
    case TensorClass::kWorkspace: return "workspace";
    case TensorClass::kInput: return "input";
  }
  return "?";
}

Result<TensorClass> parse_tensor_class(const std::string& name) {
  for (int c = 0; c < kNumTensorClasses; ++c)
    if (name == tensor_class_name(static_cast<TensorClass>(c))) return static_cast<TensorClass>(c);
  return make_status(StatusCode::kInvalidArgument,
                     "unknown tensor class '%s' (param, grad, optim_state, activation, workspace or input)",
                     name.c_str());
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  TT_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), "rank %zu > %d", dims.size(), kMaxRank);
  for (int64_t d : dims) {
    TT_CHECK(d >= 0, "negative dimension %lld", static_cast<long long>(d));
    dims_[static_cast<size_t>(rank_++)] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<size_t>(i)] != other.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

Tensor Tensor::view(int64_t elem_offset, Shape shape) const {
  TT_CHECK(elem_offset >= 0 && elem_offset + shape.numel() <= numel(), "view [%lld, +%lld) outside tensor of %lld",
           static_cast<long long>(elem_offset), static_cast<long long>(shape.numel()),
           static_cast<long long>(numel()));
  char* base = static_cast<char*>(data_) + static_cast<size_t>(elem_offset) * dtype_size(dtype_);
  return Tensor(base, shape, dtype_, cls_, device_);
}

Tensor Tensor::reshape(Shape shape) const {
  TT_CHECK(shape.numel() == numel(), "reshape %s -> %s changes the element count", shape_.to_string().c_str(),
           shape.to_string().c_str());
  return Tensor(data_, shape, dtype_, cls_, device_);
}

}  // namespace tt
