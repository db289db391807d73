// cuDNN's fused attention without cuDNN (CI): the loader says "unavailable" and why for a missing or bogus library,
// and the graph descriptions (backend/cuda/sdpa_graph.h) hold the operations, uids, dims and strides of the tables in
// docs/design/cudnn-attention.md §1. The runs on a GPU are in backend_ops_test (BackendOps.Attention*).
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/attention_options.h"
#include "backend/cuda/cudnn_loader.h"
#include "backend/cuda/cudnn_sdpa.h"
#include "backend/cuda/sdpa_graph.h"
#include "temp_dir.h"

namespace tt::cudnn {
namespace {

TEST(CudnnLoader, MissingLibraryIsUnavailableWithReason) {
  const auto r = load("/nonexistent/folder/libcudnn.so.9");
  ASSERT_FALSE(r.is_ok());
  const std::string m = r.status().to_string();
  EXPECT_NE(m.find("cuDNN unavailable"), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/folder/libcudnn.so.9"), std::string::npos) << m;
}

TEST(CudnnLoader, BogusLibraryIsUnavailableWithReason) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/libcudnn.so.9";
  std::ofstream(path) << "not a shared library";
  const auto r = load(dir.path());  // a folder: its libcudnn.so.9
  ASSERT_FALSE(r.is_ok());
  const std::string m = r.status().to_string();
  EXPECT_NE(m.find("cuDNN unavailable"), std::string::npos) << m;
  EXPECT_NE(m.find(path), std::string::npos) << m;
}

TEST(CudnnLoader, LibraryWithoutCudnnSymbolsIsRefused) {
  // Any shared library that is not cuDNN: the C library the test already has mapped.
  const auto r = load("libc.so.6");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().to_string().find("no symbol cudnnGetVersion"), std::string::npos) << r.status().to_string();
}

// One line per operation: "kind(mode) inputs -> output", tensors by name.
std::vector<std::string> render(const SdpaGraph& g) {
  std::vector<std::string> out;
  for (const SdpaOp& op : g.ops) {
    std::string s;
    switch (op.kind) {
      case SdpaOpKind::kMatmul: s = "matmul"; break;
      case SdpaOpKind::kReshape: s = "reshape"; break;
      case SdpaOpKind::kReduction: s = op.reduce == kReduceMax ? "reduce_max" : "reduce_add"; break;
      case SdpaOpKind::kPointwise:
        s = "pw" + std::to_string(static_cast<int>(op.mode));
        if (op.axis >= 0) s += " axis " + std::to_string(op.axis);
        if (op.prec == kBoolean) s += " bool";
        break;
    }
    s += " " + g.tensor(op.x).name;
    if (op.b) s += ", " + g.tensor(op.b).name;
    if (op.t) s += " ? " + g.tensor(op.t).name;
    s += " -> " + g.tensor(op.y).name;
    out.push_back(s);
  }
  return out;
}

using A = std::array<int64_t, 4>;
constexpr int64_t B = 2, T = 128, H = 2, hs = 64, C = H * hs;

TEST(SdpaGraph, ForwardHasTheDocumentedOperations) {
  const SdpaGraph g = sdpa_forward_graph({B, T, H, hs});
  const std::vector<std::string> want = {
      "matmul Q, K^T -> S",
      "pw1 S, scale -> S*scale",                       // MUL
      "pw501 axis 3 S*scale -> col",                   // GEN_INDEX
      "pw501 axis 2 S*scale -> row",
      "pw303 bool row, col -> keep",                   // CMP_GE
      "pw601 S*scale, neg_inf ? keep -> masked",       // BINARY_SELECT
      "reduce_max masked -> max",
      "pw9 masked, max -> S-max",                      // SUB
      "pw13 S-max -> exp",                             // EXP
      "reduce_add exp -> sum",
      "pw15 sum -> log sum",                           // LOG
      "pw0 max, log sum -> Stats",                     // ADD
      "pw6 exp, sum -> P",                             // DIV
      "matmul P, V -> O",
  };
  EXPECT_EQ(render(g), want);
  // The tensors we bind: q, k, v straight out of qkv [B, T, 3C], k transposed; O in [B, T, C]; Stats = our lse.
  EXPECT_EQ(g.tensor(kUidQ).dims, (A{B, H, T, hs}));
  EXPECT_EQ(g.tensor(kUidQ).strides, (A{3 * C * T, hs, 3 * C, 1}));
  EXPECT_EQ(g.tensor(kUidK).dims, (A{B, H, hs, T}));
  EXPECT_EQ(g.tensor(kUidK).strides, (A{3 * C * T, hs, 1, 3 * C}));
  EXPECT_EQ(g.tensor(kUidV).strides, (A{3 * C * T, hs, 3 * C, 1}));
  EXPECT_EQ(g.tensor(kUidO).strides, (A{C * T, hs, C, 1}));
  EXPECT_EQ(g.tensor(kUidStats).dims, (A{B, H, T, 1}));
  EXPECT_EQ(g.tensor(kUidStats).strides, (A{H * T, T, 1, 1}));
  EXPECT_EQ(g.tensor(kUidStats).dtype, kFloat);
  EXPECT_TRUE(g.tensor(kUidScale).by_value);
  EXPECT_TRUE(g.tensor(kUidNegInf).by_value);
  // Intermediates: virtual, numbered from 100 in order; P is bf16 (the second matmul's A operand).
  int64_t uid = kFirstVirtualUid;
  for (const SdpaTensor& t : g.tensors) {
    EXPECT_EQ(t.is_virtual, t.uid >= kFirstVirtualUid) << t.name;
    if (t.is_virtual) {
      EXPECT_EQ(t.uid, uid++) << t.name;
    }
  }
  EXPECT_EQ(uid, kFirstVirtualUid + 12);
  const SdpaTensor& s = g.tensor(kFirstVirtualUid);
  EXPECT_EQ(s.name, "S");
  EXPECT_EQ(s.dims, (A{B, H, T, T}));
  EXPECT_EQ(s.strides, (A{H * T * T, T * T, T, 1}));
  EXPECT_EQ(g.tensor(g.ops[12].y).dtype, kBf16);
  EXPECT_EQ(g.tensor(g.ops[2].y).dtype, kInt32);
  EXPECT_EQ(g.tensor(g.ops[4].y).dtype, kBoolean);
}

TEST(SdpaGraph, DeterministicBackwardHasTheDocumentedOperations) {
  const SdpaGraph g = sdpa_backward_graph({B, T, H, hs});
  const std::vector<std::string> want = {
      "matmul dO, V^T -> dP",
      "matmul Q, K^T -> S",
      "pw1 dO, O -> dO*O",
      "reshape K^T -> K",
      "pw1 S, scale -> S*scale",
      "pw9 S*scale, Stats -> S*scale-Stats",
      "pw501 axis 3 S*scale-Stats -> col",
      "pw501 axis 2 S*scale-Stats -> row",
      "pw303 bool row, col -> keep",
      "pw601 S*scale-Stats, neg_inf ? keep -> masked",
      "pw13 masked -> P",
      "reshape P -> P^T",
      "matmul P^T, dO -> dV",
      "reduce_add dO*O -> sum dO*O",
      "pw1 sum dO*O, one -> Dsum",
      "pw9 dP, Dsum -> dP-Dsum",
      "pw1 dP-Dsum, P -> P*(dP-Dsum)",
      "pw1 P*(dP-Dsum), scale -> dS",
      "reshape dS -> dS^T",
      "matmul dS^T, Q -> dK",
      "matmul dS, K -> dQ",
  };
  EXPECT_EQ(render(g), want);
  EXPECT_EQ(g.tensor(kUidV).dims, (A{B, H, hs, T}));
  EXPECT_EQ(g.tensor(kUidV).strides, (A{3 * C * T, hs, 1, 3 * C}));
  EXPECT_EQ(g.tensor(kUidDO).strides, (A{C * T, hs, C, 1}));
  for (int64_t uid : {kUidDQ, kUidDK, kUidDV}) {
    EXPECT_EQ(g.tensor(uid).dims, (A{B, H, T, hs}));
    EXPECT_EQ(g.tensor(uid).strides, (A{3 * C * T, hs, 3 * C, 1}));
    EXPECT_FALSE(g.tensor(uid).is_virtual);
  }
  EXPECT_FALSE(g.tensor(kUidDsum).is_virtual);
  EXPECT_EQ(g.tensor(kUidDsum).strides, (A{H * T, T, 1, 1}));
  const SdpaTensor& kview = g.tensor(g.ops[3].y);
  EXPECT_EQ(kview.dims, (A{B, H, T, hs}));
  EXPECT_EQ(kview.strides, (A{3 * C * T, hs, 3 * C, 1}));
  const SdpaTensor& pt = g.tensor(g.ops[11].y);
  EXPECT_EQ(pt.dtype, kBf16);
  EXPECT_EQ(pt.strides, (A{H * T * T, T * T, 1, T}));
}

// Note [non-deterministic backward]: the same graph but d(q)'s matmul, which writes a non-virtual fp32 accumulator
// [B, H, T, hs] (contiguous, bound by uid) that a pointwise identity brings to dQ; its workspace has no T^2 term.
TEST(SdpaGraph, NonDeterministicBackwardAccumulatesDqInFp32) {
  const SdpaGraph det = sdpa_backward_graph({B, T, H, hs});
  const SdpaGraph g = sdpa_backward_graph({B, T, H, hs}, /*deterministic=*/false);
  std::vector<std::string> want = render(det);
  want.back() = "matmul dS, K -> dQacc";
  want.push_back("pw21 dQacc -> dQ");  // IDENTITY
  EXPECT_EQ(render(g), want);
  const SdpaTensor& acc = g.tensor(kUidDQAcc);
  EXPECT_FALSE(acc.is_virtual);
  EXPECT_FALSE(acc.by_value);
  EXPECT_EQ(acc.dtype, kFloat);
  EXPECT_EQ(acc.dims, (A{B, H, T, hs}));
  EXPECT_EQ(acc.strides, (A{H * T * hs, T * hs, hs, 1}));
  EXPECT_EQ(g.tensor(kUidDQ).strides, (A{3 * C * T, hs, 3 * C, 1}));
  // Grouped-query: the sums of d(k) and d(v) as in the deterministic graph, then the accumulator.
  const std::vector<std::string> gqa = render(sdpa_backward_graph({B, T, H, hs, 1}, false));
  ASSERT_EQ(gqa.size(), 24u);
  EXPECT_EQ(gqa[21], "reduce_add dK of every head -> dK");
  EXPECT_EQ(gqa[22], "matmul dS, K -> dQacc");
  EXPECT_EQ(gqa[23], "pw21 dQacc -> dQ");
  // Workspace: the accumulator (B H T hs floats) and 1 MiB; grouped-query also the full-head d(k), d(v) in fp32 and
  // 16 MiB. The Llama-3.2-1B shape (B 4, 32 query heads over 8) then runs whole where the deterministic form needed
  // chunks of 2 under the 80 GB card's automatic cap.
  EXPECT_EQ(sdpa_dq_accumulator_bytes({16, 1024, 12, 64}), 16LL * 12 * 1024 * 64 * 4);
  EXPECT_EQ(sdpa_dq_accumulator_bytes({1, 3, 1, 8}), 256);  // rounded up to 256 bytes
  EXPECT_EQ(sdpa_backward_workspace_bound({16, 1024, 12, 64}, false), 16LL * 12 * 1024 * 64 * 4 + (1 << 20));
  const SdpaDims llama{4, 2048, 32, 64, 8};
  EXPECT_EQ(sdpa_backward_workspace_bound(llama, false), 3 * 4LL * 32 * 2048 * 64 * 4 + (16 << 20));
  const int64_t cap = int64_t(81559) * (1 << 20) / 64;
  EXPECT_EQ(backward_chunk(llama, cap, false), 4);
  EXPECT_EQ(backward_chunk(llama, cap, true), 2);
  EXPECT_EQ(workspace_bytes_for(llama, cap, false), sdpa_backward_workspace_bound(llama, false));
}

// Grouped-query attention (Note [sdpa layout]): K and V of KV heads in both graphs; the backward's d(v) and d(k)
// matmuls write every query head's gradient to a virtual bf16 tensor that a sum reduction brings to the KV heads.
TEST(SdpaGraph, GroupedQueryReadsFewerHeadsAndSumsTheirGradients) {
  constexpr int64_t kv = 1, cq = C + 2 * kv * hs;
  const SdpaGraph f = sdpa_forward_graph({B, T, H, hs, kv});
  EXPECT_EQ(f.ops.size(), 14u);
  EXPECT_EQ(f.tensor(kUidQ).strides, (A{cq * T, hs, cq, 1}));
  EXPECT_EQ(f.tensor(kUidK).dims, (A{B, kv, hs, T}));
  EXPECT_EQ(f.tensor(kUidK).strides, (A{cq * T, hs, 1, cq}));
  EXPECT_EQ(f.tensor(kUidV).dims, (A{B, kv, T, hs}));
  EXPECT_EQ(f.tensor(kUidO).dims, (A{B, H, T, hs}));
  const SdpaGraph g = sdpa_backward_graph({B, T, H, hs, kv});
  const std::vector<std::string> ops = render(g);
  ASSERT_EQ(ops.size(), 23u);
  EXPECT_EQ(ops[12], "matmul P^T, dO -> dV of every head");
  EXPECT_EQ(ops[13], "reduce_add dV of every head -> dV");
  EXPECT_EQ(ops[20], "matmul dS^T, Q -> dK of every head");
  EXPECT_EQ(ops[21], "reduce_add dK of every head -> dK");
  EXPECT_EQ(ops[22], "matmul dS, K -> dQ");
  for (const int i : {12, 20}) {
    const SdpaTensor& full = g.tensor(g.ops[i].y);
    EXPECT_TRUE(full.is_virtual);
    EXPECT_EQ(full.dtype, kBf16);
    EXPECT_EQ(full.dims, (A{B, H, T, hs}));
    EXPECT_EQ(full.strides, (A{H * T * hs, T * hs, hs, 1}));
  }
  for (int64_t uid : {kUidDK, kUidDV}) {
    EXPECT_EQ(g.tensor(uid).dims, (A{B, kv, T, hs}));
    EXPECT_EQ(g.tensor(uid).strides, (A{cq * T, hs, cq, 1}));
  }
  EXPECT_EQ(g.tensor(kUidDQ).dims, (A{B, H, T, hs}));
  EXPECT_EQ(g.tensor(g.ops[3].y).dims, (A{B, kv, T, hs}));  // the K view of d(q)'s matmul
  // KV = H is the multi-head graph exactly.
  EXPECT_EQ(render(sdpa_backward_graph({B, T, H, hs, H})), render(sdpa_backward_graph({B, T, H, hs})));
}

TEST(SdpaGraph, WorkspaceBoundAndBatchChunks) {
  // §3: B H pad128(T)^2 2 bytes + 1 MiB; GPT-2 B16 T1024 H12 fits the default 512 MiB whole, d4096 B8 T2048 H32 in
  // chunks of one sequence (256 MiB each).
  EXPECT_EQ(sdpa_backward_workspace_bound({16, 1024, 12, 64}), 16LL * 12 * 1024 * 1024 * 2 + (1 << 20));
  EXPECT_EQ(sdpa_backward_workspace_bound({1, 130, 2, 64}), 2LL * 256 * 256 * 2 + (1 << 20));
  const int64_t cap = int64_t(512) << 20;
  EXPECT_EQ(backward_chunk({16, 1024, 12, 64}, cap), 16);
  EXPECT_EQ(backward_chunk({8, 2048, 32, 128}, cap), 1);
  EXPECT_EQ(workspace_bytes_for({8, 2048, 32, 128}, cap), (int64_t(256) << 20) + (1 << 20));
  EXPECT_EQ(backward_chunk({6, 2048, 32, 128}, int64_t(600) << 20), 2);  // the largest divisor of B that fits
  EXPECT_EQ(backward_chunk({8, 2048, 32, 128}, int64_t(100) << 20), 0);
  // Grouped-query (the Llama-3.2-1B shape, 32 query heads over 8): the scores' bytes twice and the full-head d(k), d(v)
  // in fp32, plus 16 MiB; cuDNN 9.19 asked 1.06 GiB at B 2 on an H100, within it. The 80 GB card's automatic cap
  // (1/64) takes chunks of 2 of a batch of 4.
  const SdpaDims llama{2, 2048, 32, 64, 8};
  EXPECT_EQ(sdpa_backward_workspace_bound(llama), 2LL * 32 * 2048 * 2048 * 4 + 2LL * 2 * 32 * 2048 * 64 * 4 + (16 << 20));
  EXPECT_GE(sdpa_backward_workspace_bound(llama), static_cast<int64_t>(1.06 * (int64_t(1) << 30)));
  EXPECT_EQ(backward_chunk({4, 2048, 32, 64, 8}, int64_t(81559) * (1 << 20) / 64), 2);
  EXPECT_EQ(backward_chunk({4, 2048, 32, 64, 32}, int64_t(81559) * (1 << 20) / 64), 4);  // multi-head: whole
}

// Note [automatic attention workspace]: 1/64 of the budget given, else of the device's memory, at least 512 MiB; an
// explicit cap (0 included) is kept.
TEST(SdpaGraph, AutomaticWorkspaceCap) {
  const int64_t gib = int64_t(1) << 30, floor = int64_t(512) << 20;
  const int64_t h200 = int64_t(143771) << 20;  // what an H200 reports
  const int64_t cap = resolve_attention_workspace(kAutoAttentionWorkspace, 0, h200);
  EXPECT_EQ(cap, h200 / 64);
  // d4096 B8 T2048 H32 hs128 then runs its backward whole (8 sequences a call), as measured faster.
  EXPECT_EQ(backward_chunk({8, 2048, 32, 128}, cap), 8);
  // A given budget decides, not the device: an out-of-core budget of 20 GiB keeps the floor (one sequence a call).
  EXPECT_EQ(resolve_attention_workspace(kAutoAttentionWorkspace, 20 * gib, h200), floor);
  EXPECT_EQ(backward_chunk({8, 2048, 32, 128}, resolve_attention_workspace(kAutoAttentionWorkspace, 20 * gib, h200)),
            1);
  EXPECT_EQ(resolve_attention_workspace(kAutoAttentionWorkspace, 0, 0), floor);  // no device memory (the CPU)
  EXPECT_EQ(resolve_attention_workspace(gib, 0, h200), gib);
  EXPECT_EQ(resolve_attention_workspace(0, 0, h200), 0);
}

}  // namespace
}  // namespace tt::cudnn
