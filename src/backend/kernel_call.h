// backend/kernel_call: one call of a Backend compute op, described by its op and sizes instead of its tensors. The
// model lists the calls of each of its passes (model/model.h model_kernel_calls), the calibration times calls on a
// backend (perf/calibrate.h) and the performance model prices them (perf/profile.h), so that all three name the
// same work the same way.
//
//   KernelCall c{KernelOp::kMatmulForward, DType::kBF16, {B * T, 3 * C, C, 1}};
//   c.flops();   // 2 N OC C
//   c.bytes();   // what the op reads and writes, estimated
//
// dims, by op (unused trailing dims are 0):
//   embedding_forward, embedding_backward           {B, T, C, padded vocab}
//   layernorm_forward, layernorm_backward,
//   residual_layernorm_forward, rmsnorm_forward,
//   rmsnorm_backward, residual_rmsnorm_forward      {N rows, C}
//   matmul_forward, matmul_backward                 {N, OC, C, 1 with a bias else 0}   out[N,OC] = inp[N,C] w[OC,C]^T
//   matmul_gelu_forward, matmul_backward_gelu       {N, OC, C}
//   attention_forward, attention_backward           {B, T, heads, head size, key/value heads (0: heads)}
//   rope                                            {B T rows, q and k heads, head size, 1 for the backward}
//   swiglu_forward, swiglu_backward                 {N rows, F (the output's width)}
//   softmax_xent_forward, softmax_xent_fused        {N rows, padded vocab}
//   xent_local_max, xent_local_sums, xent_finish    {N rows, local columns, 1 when xent_finish writes dlogits}
//   residual_forward, gelu_forward, fill_zero,
//   convert, sum_squares, copy_d2d                  {elements}   (dtype: of the tensor written or read)
//   adamw_update                                    {elements, 1 when it writes a bf16 copy too (2: a master in two
//                                                   halves), 1 when it reads bf16 gradients}   (dtype: master's)
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace tt {

enum class KernelOp : int {
  kEmbeddingForward = 0,
  kEmbeddingBackward,
  kLayernormForward,
  kLayernormBackward,
  kResidualLayernormForward,
  kMatmulForward,
  kMatmulBackward,
  kMatmulGeluForward,
  kMatmulBackwardGelu,
  kAttentionForward,
  kAttentionBackward,
  kSoftmaxXentForward,
  kSoftmaxXentFused,
  kResidualForward,
  kFillZero,
  kConvert,
  kSumSquares,
  kAdamWUpdate,
  kCopyD2D,
  kXentLocalMax,
  kXentLocalSums,
  kXentFinish,
  kGeluForward,
  kRmsnormForward,
  kRmsnormBackward,
  kRope,
  kSwigluForward,
  kSwigluBackward,
  kResidualRmsnormForward,
};
constexpr int kNumKernelOps = 29;
// The Backend method's name: "matmul_forward".
const char* kernel_op_name(KernelOp op);
Result<KernelOp> parse_kernel_op(const std::string& name);

struct KernelCall {
  KernelOp op = KernelOp::kFillZero;
  DType dtype = DType::kF32;  // the compute dtype of the op's activations (of the tensor, for element-wise ops)
  std::array<int64_t, 5> dims{};

  // Floating-point operations (multiply-adds count 2; causal attention counts the half of the scores it computes).
  double flops() const;
  // Bytes read and written, estimated from the shapes (the memory-bound ops' work).
  double bytes() const;
  // Whether the op's time follows its FLOPs (GEMMs, attention) rather than its bytes.
  bool compute_bound() const;
  // flops() for compute-bound ops, else bytes(): what a rate multiplies.
  double work() const { return compute_bound() ? flops() : bytes(); }
  // Attention's key/value heads (dims[4], or the query heads when 0).
  int64_t kv() const { return dims[4] != 0 ? dims[4] : dims[2]; }
  // "matmul_forward bf16 [16384, 2304, 768, 1]"
  std::string describe() const;
  bool operator==(const KernelCall&) const = default;
  auto operator<=>(const KernelCall&) const = default;
};

}  // namespace tt
