#include "core/dtype.h"

namespace tt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kF64: return 8;
    case DType::kU8: return 1;
    case DType::kF16: return 2;
    case DType::kI64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kF64: return "f64";
    case DType::kU8: return "u8";
    case DType::kF16: return "f16";
    case DType::kI64: return "i64";
  }
  return "?";
}

Result<DType> parse_dtype(const std::string& name) {
  for (DType d : kAllDTypes)
    if (name == dtype_name(d)) return d;
  return make_status(StatusCode::kInvalidArgument, "unknown dtype '%s' (f32, bf16, i32, f64, u8, f16 or i64)",
                     name.c_str());
}

}  // namespace tt
