// core/dtype: the element types of tiertrain, one enum for tensors, checkpoints, kernels and collectives. Tensor files
// store a dtype by its name (dtype_name), never by its number.
//
//   DType d = DType::kBF16;
//   size_t bytes = n * dtype_size(d);             // 2 a value
//   TT_ASSIGN_OR_RETURN(DType e, parse_dtype("f32"));
//
// Which ops take which dtype is each user's contract: the backends compute in f32 and bf16 (f64 on the CPU, for
// gradient checks), the collectives move and reduce all of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace tt {

enum class DType : uint8_t {
  kF32 = 0,
  kBF16,
  kI32,
  kF64,
  kU8,   // bytes: token ids of a byte model, and byte buffers of the collectives
  kF16,  // collectives only
  kI64,  // collectives only
};
inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kI32, DType::kF64,
                                       DType::kU8,  DType::kF16,  DType::kI64};

size_t dtype_size(DType dtype);
// "f32", "bf16", "i32", "f64", "u8", "f16", "i64".
const char* dtype_name(DType dtype);
// The inverse of dtype_name; an unknown name is an error that lists the names.
Result<DType> parse_dtype(const std::string& name);

}  // namespace tt
