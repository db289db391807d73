#include "backend/kernel_call.h"


namespace tt {

namespace {
constexpr const char* kNames[kNumKernelOps] = {
    "embedding_forward",   "embedding_backward",  "layernorm_forward",    "layernorm_backward",
    "residual_layernorm_forward", "matmul_forward", "matmul_backward",   "matmul_gelu_forward",
    "matmul_backward_gelu", "attention_forward",  "attention_backward",   "softmax_xent_forward",
    "softmax_xent_fused",  "residual_forward",    "fill_zero",            "convert",
    "sum_squares",         "adamw_update",        "copy_d2d",             "xent_local_max",
    "xent_local_sums",     "xent_finish",         "gelu_forward",         "rmsnorm_forward",
    "rmsnorm_backward",    "rope",                "swiglu_forward",       "swiglu_backward",
    "residual_rmsnorm_forward",
};
static_assert(static_cast<int>(KernelOp::kResidualRmsnormForward) + 1 == kNumKernelOps);
}  // namespace

const char* kernel_op_name(KernelOp op) { return kNames[static_cast<int>(op)]; }

Result<KernelOp> parse_kernel_op(const std::string& name) {
  for (int i = 0; i < kNumKernelOps; ++i)
    if (name == kNames[i]) return static_cast<KernelOp>(i);
  return make_status(StatusCode::kInvalidArgument, "unknown kernel op '%s'", name.c_str());
}

bool KernelCall::compute_bound() const {
  switch (op) {
    case KernelOp::kMatmulForward:
    case KernelOp::kMatmulBackward:
    case KernelOp::kMatmulGeluForward:
    case KernelOp::kMatmulBackwardGelu:
    case KernelOp::kAttentionForward:
    case KernelOp::kAttentionBackward:
      return true;
    default:
      return false;
  }
}

double KernelCall::flops() const {
  const double a = static_cast<double>(dims[0]), b = static_cast<double>(dims[1]), c = static_cast<double>(dims[2]),
               d = static_cast<double>(dims[3]);
  switch (op) {
    case KernelOp::kMatmulForward:
    case KernelOp::kMatmulGeluForward:
      return 2 * a * b * c;
    case KernelOp::kMatmulBackward:
    case KernelOp::kMatmulBackwardGelu:
      return 4 * a * b * c;
    case KernelOp::kAttentionForward:
      // QK^T and PV over the causal half: 2 * (2 B H T^2 hs) / 2.
      return 2 * a * b * b * c * d;
    case KernelOp::kAttentionBackward:
      // The scores rebuilt, then dV, dP, dQ, dK: five products over the causal half.
      return 5 * a * b * b * c * d;
    default:
      return bytes() / 4;  // element-wise work: about one operation per element
  }
}

double KernelCall::bytes() const {
  const double e = static_cast<double>(dtype_size(dtype));
  const double a = static_cast<double>(dims[0]), b = static_cast<double>(dims[1]), c = static_cast<double>(dims[2]),
               d = static_cast<double>(dims[3]);
  switch (op) {
    case KernelOp::kEmbeddingForward: return a * b * c * e;                 // the output, and as many rows read
    case KernelOp::kEmbeddingBackward: return 2 * a * b * c * e;
    case KernelOp::kLayernormForward: return 2 * a * b * e;
    case KernelOp::kLayernormBackward: return 4 * a * b * e;
    case KernelOp::kResidualLayernormForward: return 4 * a * b * e;
    case KernelOp::kMatmulForward:
    case KernelOp::kMatmulGeluForward: return (a * c + b * c + a * b) * e;
    case KernelOp::kMatmulBackward:
    case KernelOp::kMatmulBackwardGelu: return 2 * (a * c + b * c + a * b) * e;
    // qkv in, out; with grouped-query heads (dims[4] key/value heads) k and v are that much narrower.
    case KernelOp::kAttentionForward: return (2 * a * b * c * d + 2 * a * b * kv() * d) * e;
    case KernelOp::kAttentionBackward: return 2 * (2 * a * b * c * d + 2 * a * b * kv() * d) * e;
    case KernelOp::kRmsnormForward: return 2 * a * b * e;
    case KernelOp::kResidualRmsnormForward: return 4 * a * b * e;
    case KernelOp::kRmsnormBackward: return 4 * a * b * e;
    case KernelOp::kRope: return 2 * a * b * c * e;                        // the q and k heads, read and written
    case KernelOp::kSwigluForward: return 3 * a * b * e;
    case KernelOp::kSwigluBackward: return 5 * a * b * e;
    case KernelOp::kSoftmaxXentForward:
    case KernelOp::kSoftmaxXentFused: return 2 * a * b * e;
    case KernelOp::kResidualForward: return 3 * a * e;
    case KernelOp::kGeluForward: return 2 * a * e;
    case KernelOp::kFillZero: return a * e;
    case KernelOp::kConvert: return a * (4 + e);
    case KernelOp::kSumSquares: return a * e;
    // p, g, m, v read; p, m, v (and the bf16 copy, b 1) written; a master in two halves (b 2) is as many bytes; bf16
    // gradients (c 1) two bytes an element.
    case KernelOp::kAdamWUpdate: return a * e * 7 + (b == 1 ? a * 2 : 0) - (c == 1 ? a * (e - 2) : 0);
    case KernelOp::kCopyD2D: return 2 * a * e;
    case KernelOp::kXentLocalMax:
    case KernelOp::kXentLocalSums: return a * b * e;
    case KernelOp::kXentFinish: return (c != 0 ? 2 : 0) * a * b * e;
  }
  return 0;
}

std::string KernelCall::describe() const {
  std::string s = str_format("%s %s [%lld, %lld, %lld, %lld", kernel_op_name(op), dtype_name(dtype),
                             static_cast<long long>(dims[0]), static_cast<long long>(dims[1]),
                             static_cast<long long>(dims[2]), static_cast<long long>(dims[3]));
  if (dims[4] != 0) s += str_format(", %lld", static_cast<long long>(dims[4]));
  return s + "]";
}

}  // namespace tt
