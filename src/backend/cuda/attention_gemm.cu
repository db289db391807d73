// backend/cuda/attention_gemm.cu: causal attention in f32 through cuBLAS's batched fp32 GEMMs, over a workspace
// that bounds the T x T matrices it holds (Note [f32 attention by GEMMs]).
//
// Note [f32 attention by GEMMs]
// f32 is the exact-comparison mode: no TF32, no bf16 operands. Our general (SIMT, one warp a row) flash kernels in
// attention.cu made a GPT-2 124M step about twice as slow as PyTorch fp32's, whose "math" attention is cuBLAS SGEMMs
// over the whole T x T matrix (docs/benchmarks/README.md, history). Here the same GEMMs run, a chunk of (batch, head)
// pairs at a time:
//   forward:  S = scale Q K^T (rows i, keys j), P = softmax over j <= i (lse saved, as the flash kernels save it),
//             out = P V;
//   backward: S = scale Q K^T and dP = dO V^T again, then in one pass per row P = exp(S - lse) (0 past the
//             diagonal) and dS = P (dP - D) with D = dO . out of the row, then dV = P^T dO, dQ = scale dS K,
//             dK = scale dS^T Q.
// The causal half is skipped in blocks: the queries are cut into n equal ranges [r0, r1) (n at most
// kDefaultBlocks = 4, ranges of at least kMinBlockRows), and a range's GEMMs see only keys [0, r1): (n + 1) / 2n of
// the full product's work, 5/8 at four ranges (T >= 512). Four is the default: fewer ranges do more of the masked
// work, and more ranges' smaller GEMMs lose more than the work they skip (docs/benchmarks/README.md, history);
// TIERTRAIN_F32_ATTENTION_RANGES (1 to kBlocks = 8; core/env.h) overrides the 4 to time the others. d(K) and d(V) of
// keys [0, r1) are summed over the ranges that see them, last range first (it sees every key: beta = 0 there), so each
// element of dqkv is written by one fixed sequence of GEMMs: deterministic, and every element of dqkv is written
// (Backend::attention_backward's contract).
// The workspace holds, per pair of a chunk, two T x T f32 matrices (S or P, and dP or dS), and the pointer arrays of
// the batched GEMMs; attention_gemm_workspace_for sizes it for a run (at most the cap, at least one pair, or 0 where
// one pair does not fit: then the general kernels run). Pairs are b-major: pair p is batch p / H, head p % H.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "core/env.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"
#include "core/status.h"

namespace tt::cuda {
namespace {

using dev::warp_max;
using dev::warp_sum;

constexpr int kBlocks = 8;          // query ranges at most (pointer arrays are sized for this many)
constexpr int kDefaultBlocks = 4;   // query ranges of a long sequence (the causal blocks above)
constexpr int kMinBlockRows = 128;  // fewer ranges for short sequences: a range keeps at least this many queries
constexpr int kArrays = 9;          // pointer arrays a chunk needs (GemmArray)
constexpr int kRowWarps = 8;        // warps (rows) a block of the row kernels

// The ranges a long sequence is cut into: kDefaultBlocks, or TIERTRAIN_F32_ATTENTION_RANGES (read once).
int max_blocks() {
  static const int n = [] {
    const char* e = tt::env::get("TIERTRAIN_F32_ATTENTION_RANGES");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v >= 1 && v <= kBlocks ? v : kDefaultBlocks;
  }();
  return n;
}

int blocks_for_length(int64_t T) {
  return static_cast<int>(std::clamp<int64_t>(T / kMinBlockRows, 1, max_blocks()));
}

// Query range qb of nb over T rows: [r0, r1).
__host__ __device__ inline int range_begin(int qb, int nb, int T) {
  return static_cast<int>((static_cast<int64_t>(T) * qb) / nb);
}

struct Shape {
  int B, T, C, H, hs;
  float scale;
};

// The pointer arrays of one chunk: array a (of kArrays) for query range qb at ptrs[(a * nb + qb) * pairs + k] for
// the chunk's k-th pair. q/o/dq point at the range's first row; k/v/dk/dv at row 0; s/ds at the range's first row of
// the pair's T x T matrices.
enum GemmArray { kQ, kK, kV, kO, kDQ, kDK, kDV, kS, kDS };

__global__ void fill_pointers_kernel(float** ptrs, float* qkv, float* o, float* dqkv, float* s, float* ds, int p0,
                                     int pairs, int nb, Shape d) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= pairs * nb) return;
  const int qb = idx / pairs, k = idx % pairs, p = p0 + k;
  const int b = p / d.H, h = p % d.H;
  const int64_t r0 = range_begin(qb, nb, d.T);
  const int64_t C3 = 3 * static_cast<int64_t>(d.C), hoff = static_cast<int64_t>(h) * d.hs;
  const int64_t row0 = static_cast<int64_t>(b) * d.T;  // the pair's first token
  const int64_t tt = static_cast<int64_t>(d.T) * d.T;
  auto at = [&](GemmArray a) -> float*& { return ptrs[(static_cast<int64_t>(a) * nb + qb) * pairs + k]; };
  at(kQ) = qkv + (row0 + r0) * C3 + hoff;
  at(kK) = qkv + row0 * C3 + d.C + hoff;
  at(kV) = qkv + row0 * C3 + 2 * d.C + hoff;
  at(kO) = o + (row0 + r0) * d.C + hoff;
  at(kDQ) = dqkv ? dqkv + (row0 + r0) * C3 + hoff : nullptr;
  at(kDK) = dqkv ? dqkv + row0 * C3 + d.C + hoff : nullptr;
  at(kDV) = dqkv ? dqkv + row0 * C3 + 2 * d.C + hoff : nullptr;
  at(kS) = s + k * tt + r0 * d.T;
  at(kDS) = ds ? ds + k * tt + r0 * d.T : nullptr;
}

// Row (k, i) of a chunk: one warp. The keys a row's GEMMs wrote are [0, r1) of its query range.
struct Row {
  int k, i, r1;
  bool valid;
};
__device__ Row chunk_row(int pairs, int nb, const Shape& d) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowWarps + threadIdx.x / 32;
  Row row;
  row.valid = r < static_cast<int64_t>(pairs) * d.T;
  row.k = static_cast<int>(r / d.T);
  row.i = static_cast<int>(r % d.T);
  const int qb = min(nb - 1, static_cast<int>((static_cast<int64_t>(row.i) * nb) / d.T));
  // range_begin rounds down, so the row's range is qb or the next one.
  const int q = row.i >= range_begin(qb + 1, nb, d.T) ? qb + 1 : qb;
  row.r1 = range_begin(q + 1, nb, d.T);
  return row;
}

// Forward: s holds scale q_i . k_j for j < r1; P overwrites it (0 for i < j < r1) and lse gets the row's
// log-sum-exp.
__global__ void __launch_bounds__(kRowWarps * 32)
    softmax_rows_kernel(float* __restrict__ s, float* __restrict__ lse, int p0, int pairs, int nb, Shape d) {
  const Row r = chunk_row(pairs, nb, d);
  if (!r.valid) return;
  const int lane = threadIdx.x & 31;
  float* row = s + (static_cast<int64_t>(r.k) * d.T + r.i) * d.T;
  float m = -FLT_MAX, l = 0.0f;
  for (int j = lane; j <= r.i; j += 32) {
    const float x = row[j];
    if (x > m) {
      l = l * expf(m - x) + 1.0f;
      m = x;
    } else {
      l += expf(x - m);
    }
  }
  const float top = warp_max(m);  // finite: key 0 is in every row
  l = warp_sum(l * expf(m - top));
  const float inv = 1.0f / l;
  for (int j = lane; j < r.r1; j += 32) row[j] = j <= r.i ? expf(row[j] - top) * inv : 0.0f;
  if (lane == 0) lse[static_cast<int64_t>(p0 + r.k) * d.T + r.i] = top + logf(l);
}

// Backward: s holds scale q_i . k_j and dp holds do_i . v_j for j < r1. Writes P into s and dS = P (dP - D) into dp,
// with D = do_i . out_i (FlashAttention-2's row sum, equal to sum_j P dP).
__global__ void __launch_bounds__(kRowWarps * 32)
    softmax_backward_rows_kernel(float* __restrict__ s, float* __restrict__ dp, const float* __restrict__ lse,
                                 const float* __restrict__ dout, const float* __restrict__ out, int p0, int pairs,
                                 int nb, Shape d) {
  const Row r = chunk_row(pairs, nb, d);
  if (!r.valid) return;
  const int lane = threadIdx.x & 31;
  const int p = p0 + r.k, b = p / d.H, h = p % d.H;
  const int64_t off = (static_cast<int64_t>(b) * d.T + r.i) * d.C + static_cast<int64_t>(h) * d.hs;
  float D = 0.0f;
  for (int c = lane; c < d.hs; c += 32) D += dout[off + c] * out[off + c];
  D = warp_sum(D);
  const float li = lse[static_cast<int64_t>(p) * d.T + r.i];
  const int64_t base = (static_cast<int64_t>(r.k) * d.T + r.i) * d.T;
  float* srow = s + base;
  float* drow = dp + base;
  for (int j = lane; j < r.r1; j += 32) {
    const float pj = j <= r.i ? expf(srow[j] - li) : 0.0f;
    srow[j] = pj;
    drow[j] = pj * (drow[j] - D);
  }
}

struct Chunking {
  int nb;       // query ranges
  int pairs;    // pairs a chunk
  float** ptrs;  // kArrays * nb * pairs pointers
  float* s;     // pairs T x T matrices
  float* ds;    // pairs T x T matrices
};

int64_t pointer_bytes(int64_t pairs) {
  return (kArrays * kBlocks * pairs * static_cast<int64_t>(sizeof(float*)) + 255) / 256 * 256;
}
int64_t bytes_per_pair(int64_t T) { return 2 * T * T * static_cast<int64_t>(sizeof(float)); }

Chunking chunking(void* ws, int64_t ws_bytes, const Shape& d) {
  Chunking c{};
  c.nb = blocks_for_length(d.T);
  const int64_t all = static_cast<int64_t>(d.B) * d.H;
  int64_t pairs = std::min<int64_t>(all, ws_bytes / (bytes_per_pair(d.T) + kArrays * kBlocks * sizeof(float*)));
  while (pairs > 0 && pointer_bytes(pairs) + pairs * bytes_per_pair(d.T) > ws_bytes) --pairs;
  TT_CHECK(pairs > 0, "attention (f32 GEMMs): a workspace of %lld bytes holds no (batch, head) pair at T %d",
           static_cast<long long>(ws_bytes), d.T);
  c.pairs = static_cast<int>(pairs);
  char* base = static_cast<char*>(ws);
  c.ptrs = reinterpret_cast<float**>(base);
  c.s = reinterpret_cast<float*>(base + pointer_bytes(pairs));
  c.ds = c.s + pairs * static_cast<int64_t>(d.T) * d.T;
  return c;
}

float* const* arr(const Chunking& c, GemmArray a, int qb, int pairs) {
  return c.ptrs + (static_cast<int64_t>(a) * c.nb + qb) * pairs;
}

// C = alpha op(A) op(B) + beta C, column-major, over `count` pointer triples.
void batched(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha, float* const* a, int lda,
             float* const* b, int ldb, float beta, float* const* c, int ldc, int count) {
  if (m == 0 || n == 0) return;
  TT_CUBLAS_ASSERT(cublasSgemmBatched(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                      &alpha, a, lda, b, ldb, &beta, c, ldc, count));
}

Shape make_shape(int B, int T, int C, int H) {
  const int hs = C / H;
  return Shape{B, T, C, H, hs, 1.0f / std::sqrt(static_cast<float>(hs))};
}

void fill_pointers(cudaStream_t st, const Chunking& c, float* qkv, float* o, float* dqkv, int p0, int pairs,
                   const Shape& d) {
  const int n = pairs * c.nb;
  fill_pointers_kernel<<<(n + 255) / 256, 256, 0, st>>>(c.ptrs, qkv, o, dqkv, c.s, dqkv ? c.ds : nullptr, p0, pairs,
                                                       c.nb, d);
  TT_CUDA_CHECK_LAUNCH();
}

unsigned row_blocks(int pairs, const Shape& d) {
  return static_cast<unsigned>((static_cast<int64_t>(pairs) * d.T + kRowWarps - 1) / kRowWarps);
}

// The column-major views (ld = the row stride of the row-major data): q_i, k_j, v_j are columns of hs x T matrices
// with ld 3C; out and dout rows are columns with ld C; S row i is column i of a T x T matrix with ld T (so S as
// stored is S^T column-major).
void scores(cublasHandle_t h, const Chunking& c, int qb, int pairs, const Shape& d, GemmArray rows, int ld_rows,
            GemmArray cols, int ld_cols, float alpha, GemmArray out) {
  const int r0 = range_begin(qb, c.nb, d.T), r1 = range_begin(qb + 1, c.nb, d.T);
  // out^T[j, i] = cols_j . rows_i for keys j < r1 and the range's queries i: m = r1, n = r1 - r0, k = hs.
  batched(h, true, false, r1, r1 - r0, d.hs, alpha, arr(c, cols, qb, pairs), ld_cols, arr(c, rows, qb, pairs), ld_rows,
          0.0f, arr(c, out, qb, pairs), d.T, pairs);
}

}  // namespace

bool attention_gemm_fits(int64_t ws_bytes, int64_t T) { return pointer_bytes(1) + bytes_per_pair(T) <= ws_bytes; }

int64_t attention_gemm_workspace_for(int64_t B, int64_t T, int64_t H, int64_t cap) {
  if (B <= 0 || T <= 0 || H <= 0) return 0;
  const int64_t per_pair = bytes_per_pair(T);
  int64_t pairs = std::min(B * H, cap / per_pair);
  while (pairs > 0 && pointer_bytes(pairs) + pairs * per_pair > cap) --pairs;
  return pairs > 0 ? pointer_bytes(pairs) + pairs * per_pair : 0;
}

void attention_forward_gemm(cublasHandle_t h, cudaStream_t st, void* ws, int64_t ws_bytes, float* out, float* lse,
                            const float* qkv, int B, int T, int C, int H) {
  const Shape d = make_shape(B, T, C, H);
  if (B == 0 || T == 0) return;
  const Chunking c = chunking(ws, ws_bytes, d);
  float* q = const_cast<float*>(qkv);
  const int all = B * H;
  for (int p0 = 0; p0 < all; p0 += c.pairs) {
    const int pairs = std::min(c.pairs, all - p0);
    fill_pointers(st, c, q, out, nullptr, p0, pairs, d);
    for (int qb = 0; qb < c.nb; ++qb) scores(h, c, qb, pairs, d, kQ, 3 * C, kK, 3 * C, d.scale, kS);
    softmax_rows_kernel<<<row_blocks(pairs, d), kRowWarps * 32, 0, st>>>(c.s, lse, p0, pairs, c.nb, d);
    TT_CUDA_CHECK_LAUNCH();
    for (int qb = 0; qb < c.nb; ++qb) {
      const int r0 = range_begin(qb, c.nb, T), r1 = range_begin(qb + 1, c.nb, T);
      // out^T (hs x rows) = V^T (hs x r1) P^T (r1 x rows), P^T being P's rows as stored (ld T).
      batched(h, false, false, d.hs, r1 - r0, r1, 1.0f, arr(c, kV, qb, pairs), 3 * C, arr(c, kS, qb, pairs), T, 0.0f,
              arr(c, kO, qb, pairs), C, pairs);
    }
  }
}

void attention_backward_gemm(cublasHandle_t h, cudaStream_t st, void* ws, int64_t ws_bytes, float* dqkv,
                             const float* dout, const float* qkv, const float* out, const float* lse, int B, int T,
                             int C, int H) {
  const Shape d = make_shape(B, T, C, H);
  if (B == 0 || T == 0) return;
  const Chunking c = chunking(ws, ws_bytes, d);
  float* q = const_cast<float*>(qkv);
  float* dO = const_cast<float*>(dout);
  const int all = B * H;
  for (int p0 = 0; p0 < all; p0 += c.pairs) {
    const int pairs = std::min(c.pairs, all - p0);
    // kO points into dout here: the backward's row operand.
    fill_pointers(st, c, q, dO, dqkv, p0, pairs, d);
    for (int qb = 0; qb < c.nb; ++qb) {
      scores(h, c, qb, pairs, d, kQ, 3 * C, kK, 3 * C, d.scale, kS);  // S
      scores(h, c, qb, pairs, d, kO, C, kV, 3 * C, 1.0f, kDS);       // dP = dO V^T
    }
    softmax_backward_rows_kernel<<<row_blocks(pairs, d), kRowWarps * 32, 0, st>>>(c.s, c.ds, lse, dout, out, p0,
                                                                                   pairs, c.nb, d);
    TT_CUDA_CHECK_LAUNCH();
    for (int qb = c.nb - 1; qb >= 0; --qb) {
      const int r0 = range_begin(qb, c.nb, T), r1 = range_begin(qb + 1, c.nb, T);
      const float beta = qb == c.nb - 1 ? 0.0f : 1.0f;  // the last range sees every key
      auto A = [&](GemmArray a) { return arr(c, a, qb, pairs); };
      // dQ^T (hs x rows) = scale K^T (hs x r1) dS^T (r1 x rows).
      batched(h, false, false, d.hs, r1 - r0, r1, d.scale, A(kK), 3 * C, A(kDS), T, 0.0f, A(kDQ), 3 * C, pairs);
      // dV^T (hs x r1) += dO^T (hs x rows) P (rows x r1): P as stored is P^T column-major, so transposed.
      batched(h, false, true, d.hs, r1, r1 - r0, 1.0f, A(kO), C, A(kS), T, beta, A(kDV), 3 * C, pairs);
      // dK^T (hs x r1) += scale Q^T (hs x rows) dS (rows x r1).
      batched(h, false, true, d.hs, r1, r1 - r0, d.scale, A(kQ), 3 * C, A(kDS), T, beta, A(kDK), 3 * C, pairs);
    }
  }
}

}  // namespace tt::cuda
