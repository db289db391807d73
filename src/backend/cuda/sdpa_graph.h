// backend/cuda/sdpa_graph: the cuDNN operation graphs of causal attention (forward: 14 operations; backward: 21,
// deterministic, or 22 with d(q) accumulated in fp32, Note [non-deterministic backward]) as plain data: tensors with their uids, dims and strides, and operations naming tensors by uid. No
// cuDNN call here: cudnn_sdpa.cc lowers a graph to backend descriptors, and tests/backend/cudnn_test.cc checks the data
// against the tables of docs/design/cudnn-attention.md §1 without any library.
//
//   const SdpaGraph g = sdpa_backward_graph({.B = 16, .T = 1024, .H = 12, .hs = 64});
//   for (const SdpaOp& op : g.ops) ... g.tensor(op.x) ...
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_api.h"

namespace tt::cudnn {

struct SdpaDims {
  int64_t B = 0, T = 0, H = 0, hs = 0;
  int64_t KV = 0;  // key/value heads (grouped-query attention); 0: H
  int64_t C() const { return H * hs; }
  int64_t kv() const { return KV > 0 ? KV : H; }
  int64_t Cq() const { return C() + 2 * kv() * hs; }  // a row of qkv: [q (C) | k (KV hs) | v (KV hs)]
};

// Note [sdpa layout]
// q, k, v are read straight out of our interleaved qkv [B, T, Cq] by strides (q of token t, head h at
// qkv[(b T + t) Cq + h hs], k of key/value head g at + C + g hs, v at + C + KV hs + g hs; multi-head: KV = H, Cq = 3C),
// and dq, dk, dv written straight into dqkv the same way; out and dout [B, T, C]. As [B, heads, T, hs] tensors: q
// strides {Cq T, hs, Cq, 1}; k is given transposed, [B, KV, hs, T] with strides {Cq T, hs, 1, Cq} (the first
// matmul's B operand), and so is v in the backward. With grouped-query attention (KV < H) the matmuls take K and V
// of KV heads against Q of H (query head h reads key/value head h / (H / KV), as cudnn-frontend expresses it), and
// the backward writes d(k) and d(v) of all H query heads to virtual bf16 tensors [B, H, T, hs] that a sum reduction
// brings to the KV heads of dqkv (23 operations instead of 21). Stats [B, H, T, 1] fp32 with strides
// {HT, T, 1, 1} is exactly our lse [B, H, T]: the natural log of the sum of exp of the scaled scores. The uids below
// are the ones the variant pack binds pointers to; virtual intermediates are numbered from kFirstVirtualUid in the
// order they are made.
enum Uid : int64_t {
  kUidQ = 1,
  kUidK = 2,  // transposed view [B, H, hs, T]
  kUidV = 3,  // [B, H, T, hs] in the forward, transposed [B, H, hs, T] in the backward
  kUidO = 4,
  kUidStats = 5,
  kUidDO = 6,
  kUidDQ = 7,
  kUidDK = 8,
  kUidDV = 9,
  kUidDsum = 10,   // fp32 [B, H, T, 1]: row sums of dO * O (the backward writes them; our rowsum scratch)
  kUidScale = 11,  // by value: 1 / sqrt(hs)
  kUidNegInf = 12, // by value: the masked score
  kUidOne = 13,    // by value: 1.0
  kUidDQAcc = 14,  // fp32 [B, H, T, hs] contiguous: the non-deterministic backward's d(q) accumulator (workspace)
  kFirstVirtualUid = 100,
};

struct SdpaTensor {
  int64_t uid = 0;
  std::string name;
  DataType dtype = kFloat;
  std::array<int64_t, 4> dims{}, strides{};
  bool is_virtual = false;
  bool by_value = false;  // a host scalar passed in the variant pack
};

enum class SdpaOpKind { kMatmul, kPointwise, kReduction, kReshape };

struct SdpaOp {
  SdpaOpKind kind = SdpaOpKind::kPointwise;
  PointwiseMode mode = kPwIdentity;  // kPointwise
  ReduceOp reduce = kReduceAdd;       // kReduction
  DataType prec = kFloat;             // pointwise math precision; matmul and reduction compute type
  int64_t axis = -1;                  // kPwGenIndex
  // Pointwise: y = mode(x, b), binary select y = t ? x : b. Matmul: y = x @ b. Reduction, reshape: y = f(x).
  int64_t x = 0, b = 0, t = 0, y = 0;  // uids; 0: none
};

struct SdpaGraph {
  std::vector<SdpaTensor> tensors;
  std::vector<SdpaOp> ops;
  const SdpaTensor& tensor(int64_t uid) const;  // aborts on an unknown uid
};

// Note [non-deterministic backward]
// cuDNN's backward comes in two forms, told apart by the graph alone (docs/design/cudnn-attention.md §2). The
// deterministic one (our default) writes d(q) with a plain matmul, for which the engine keeps dP in a workspace of
// B H T^2 bf16 values; it repeats bit for bit. The other, cuDNN's default and what PyTorch's SDPA runs, accumulates
// d(q) over key tiles with fp32 atomics into a non-virtual accumulator [B, H, T, hs] (kUidDQAcc, which we place at the
// start of the workspace; cuDNN 9.6 and later clear it themselves) that a pointwise identity brings to dq: no T^2
// workspace, faster, and its bits vary from run to run in the last places. Knob attention_deterministic=false picks
// it (AttentionOptions::deterministic); resume and the plans are then equal only up to that rounding.
SdpaGraph sdpa_forward_graph(const SdpaDims& d);
SdpaGraph sdpa_backward_graph(const SdpaDims& d, bool deterministic = true);

// Bytes of the non-deterministic backward's d(q) accumulator (B H T hs floats), rounded up to 256.
int64_t sdpa_dq_accumulator_bytes(const SdpaDims& d);

// Bytes the backward's workspace is bounded by (§3: dP in bf16 with T padded to 128, plus 1 MiB; grouped-query: the
// scores twice over and the full-head d(k), d(v) in fp32, plus 16 MiB; non-deterministic: the d(q) accumulator plus
// 1 MiB, grouped-query plus the full-head d(k), d(v) in fp32 and 16 MiB), checked against the plan's own figure when
// it is built (a plan that asks more runs our kernels instead, logged).
int64_t sdpa_backward_workspace_bound(const SdpaDims& d, bool deterministic = true);

}  // namespace tt::cudnn
