// backend/cuda/attention.cu: causal multi-head attention that never holds T x T scores in memory (flash attention:
// an online softmax in the forward, which saves only the log-sum-exp per query row; the backward rebuilds the
// probabilities tile by tile from q, k and that log-sum-exp).
//
// Two implementations behind one launcher:
//   - tensor-core kernels for bf16 with head size 64 or 128: mma.sync m16n8k16 (bf16 in, fp32 accumulate), tiles of
//     64 query rows x 64 keys staged in shared memory with cp.async; four warps, each owning 16 rows. The forward
//     double-buffers the key tiles it walks: the next one is copied while the current one is used (Note [tile
//     pipeline]); the causal mask is applied on the diagonal tile only;
//   - general kernels for fp32 (the exact-comparison mode) and any other head size up to 256: one warp per row, 32
//     keys (or queries) at a time, one per lane.
// The backward is deterministic: no atomics. d(k) and d(v) come from a kernel that owns a tile of keys and walks the
// queries after it; d(q) from a second kernel that owns a tile of queries and walks the keys before it (the scores
// are rebuilt twice, the price of not summing d(q) with atomics as FlashAttention-2 does). Together they write every
// element of dqkv (Backend::attention_backward's contract, which cuDNN's engines also meet).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace tt::cuda {
namespace {

using flash::kLog2e;

using dev::allow_smem;
using dev::cp_async16;
using dev::cp_async_commit;
using dev::cp_async_wait;
using dev::ld;
using dev::smem_addr;
using dev::st;
using dev::warp_max;
using dev::warp_sum;

// Where the (b, h) slices of a row live (Note [grouped-query attention]): q of query t of batch b, head h is at
// qkv[(b T + t) ld + h hs], its k at + k_col(h), its v at + v_col(h); out, dout at [(b T + t) C + h hs]; lse and D at
// [(b H + h) T + t].
struct Dims {
  int B, T, C, H, hs;
  float scale;
  int KV;      // key/value heads; H / KV query heads share each
  int64_t ld;  // a row of qkv: C + 2 KV hs (3C for multi-head attention)
  __host__ __device__ int group() const { return H / KV; }
  __host__ __device__ int64_t k_col(int h) const { return C + static_cast<int64_t>(h / group()) * hs; }
  __host__ __device__ int64_t v_col(int h) const { return k_col(h) + static_cast<int64_t>(KV) * hs; }
};
// Note [grouped-query attention]
// A row of qkv is [q of H heads | k of KV heads | v of KV heads], hs values a head; query head h reads key/value head
// h / (H / KV) (Llama's grouped-query attention; KV = H is multi-head attention, the layout [q | k | v] of C each).
// The forward and d(q) kernels run per query head as before, reading their group's k and v. The d(k), d(v) kernels
// run per key/value head: a block owns a tile of keys of one KV head and walks the queries of each of the group's
// query heads in turn (head order, then query order), summing into the same registers: the sum over the group is
// deterministic and needs no atomics or second pass. With KV = H the loops and their order are the ones of
// multi-head attention, bit for bit.

// ---------------------------------------------------------------------------------------------------------------------
// D[row] = sum_c dout[row, c] * out[row, c]: the row sums of P * dP the softmax backward needs (FlashAttention-2's
// trick: equal to sum over keys of p * dp). One warp per (b, h, t) row.

template <typename X>
__global__ void attention_rowdot_kernel(float* D, const X* __restrict__ dout, const X* __restrict__ out, Dims d) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= static_cast<int64_t>(d.B) * d.H * d.T) return;
  const int t = static_cast<int>(row % d.T);
  const int64_t bh = row / d.T;
  const int b = static_cast<int>(bh / d.H), h = static_cast<int>(bh % d.H);
  const int64_t off = (static_cast<int64_t>(b) * d.T + t) * d.C + static_cast<int64_t>(h) * d.hs;
  float s = 0.0f;
  for (int c = lane; c < d.hs; c += 32) s += ld(dout[off + c]) * ld(out[off + c]);
  s = warp_sum(s);
  if (lane == 0) D[row] = s;
}

// ---------------------------------------------------------------------------------------------------------------------
// General kernels: a block of kGeneralWarps warps takes kGeneralWarps consecutive rows of one (b, h) pair, one row per
// warp; the rows the warps walk (keys, or queries for d(k) and d(v)) are staged in shared memory kChunk at a time by
// the whole block, padded to hs + 1 floats per row so that lane l reading row l hits bank (l + c) % 32. Lane l scores
// row l of a chunk; the head dimension of the accumulators is spread over the lanes (kPerLane values each).

constexpr int kMaxHs = 256;
constexpr int kPerLane = kMaxHs / 32;
constexpr int kGeneralWarps = 8;
constexpr int kChunk = 32;

// Shared memory of a general kernel: two row vectors per warp and two staged chunks.
int general_smem_bytes(int hs) {
  return static_cast<int>(sizeof(float)) * (2 * kGeneralWarps * hs + 2 * kChunk * (hs + 1));
}

// Stages rows r0.. (kChunk of them; zeros past T) of two [T, *] matrices a and b (rows lda, ldb apart) into ca, cb.
template <typename X>
__device__ void stage_chunk(float* ca, float* cb, const X* a, int64_t lda, const X* b, int64_t ldb, int r0, int T,
                            int hs) {
  for (int i = threadIdx.x; i < kChunk * hs; i += blockDim.x) {
    const int r = i / hs, c = i - r * hs;
    const bool in = r0 + r < T;
    ca[r * (hs + 1) + c] = in ? ld(a[static_cast<int64_t>(r0 + r) * lda + c]) : 0.0f;
    cb[r * (hs + 1) + c] = in ? ld(b[static_cast<int64_t>(r0 + r) * ldb + c]) : 0.0f;
  }
}

struct GeneralRow {
  int t;  // this warp's row; may be >= T (then the warp only helps staging)
  int b, h;
  int64_t bh;
};
__device__ GeneralRow general_row(const Dims& d) {
  GeneralRow r;
  r.bh = blockIdx.y;
  r.b = static_cast<int>(r.bh / d.H);
  r.h = static_cast<int>(r.bh % d.H);
  r.t = static_cast<int>(blockIdx.x) * kGeneralWarps + static_cast<int>(threadIdx.x / 32);
  return r;
}

// Forward: warp w has query t; keys j <= t in chunks, online softmax across chunks.
template <typename X>
__global__ void __launch_bounds__(kGeneralWarps * 32)
    attention_forward_general_kernel(X* __restrict__ out, float* __restrict__ lse, const X* __restrict__ qkv, Dims d) {
  extern __shared__ float sm[];
  const int hs = d.hs, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  float* qs = sm + warp * hs;
  float* kc = sm + 2 * kGeneralWarps * hs;
  float* vc = kc + kChunk * (hs + 1);
  const GeneralRow r = general_row(d);
  const int t = r.t;
  const bool valid = t < d.T;
  const int64_t C3 = d.ld, hoff = static_cast<int64_t>(r.h) * hs;
  const X* kb = qkv + static_cast<int64_t>(r.b) * d.T * C3 + d.k_col(r.h);
  const X* vb = qkv + static_cast<int64_t>(r.b) * d.T * C3 + d.v_col(r.h);
  if (valid)
    for (int c = lane; c < hs; c += 32) qs[c] = ld(qkv[(static_cast<int64_t>(r.b) * d.T + t) * C3 + hoff + c]) * d.scale;
  float m = -FLT_MAX, l = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  const int last = min(static_cast<int>(blockIdx.x) * kGeneralWarps + kGeneralWarps, d.T) - 1;  // the block's last row
  for (int j0 = 0; j0 <= last; j0 += kChunk) {
    __syncthreads();
    stage_chunk(kc, vc, kb, C3, vb, C3, j0, d.T, hs);
    __syncthreads();
    if (!valid || j0 > t) continue;
    const int j = j0 + lane;
    float s = -FLT_MAX;
    if (j <= t) {
      const float* kr = kc + lane * (hs + 1);
      s = 0.0f;
      for (int c = 0; c < hs; ++c) s += qs[c] * kr[c];
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= t is in this chunk
    const float corr = expf(m - m_new);
    const float p = j <= t ? expf(s - m_new) : 0.0f;
    l = l * corr + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
    const int n = min(kChunk, t - j0 + 1);
    for (int jj = 0; jj < n; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const float* vr = vc + jj * (hs + 1);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < hs) acc[i] += pj * vr[c];
      }
    }
  }
  if (!valid) return;
  X* op = out + (static_cast<int64_t>(r.b) * d.T + t) * d.C + hoff;
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < hs) op[c] = st<X>(acc[i] * inv);
  }
  if (lane == 0) lse[r.bh * d.T + t] = m + logf(l);
}

// d(q): warp w has query t; keys j <= t in chunks (lane l: key j0 + l).
template <typename X>
__global__ void __launch_bounds__(kGeneralWarps * 32)
    attention_dq_general_kernel(X* __restrict__ dqkv, const X* __restrict__ dout, const X* __restrict__ qkv,
                                const float* __restrict__ lse, const float* __restrict__ D, Dims d) {
  extern __shared__ float sm[];
  const int hs = d.hs, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  float* qs = sm + warp * hs;
  float* dos = sm + (kGeneralWarps + warp) * hs;
  float* kc = sm + 2 * kGeneralWarps * hs;
  float* vc = kc + kChunk * (hs + 1);
  const GeneralRow r = general_row(d);
  const int t = r.t;
  const bool valid = t < d.T;
  const int64_t C3 = d.ld, hoff = static_cast<int64_t>(r.h) * hs;
  const int64_t qoff = (static_cast<int64_t>(r.b) * d.T + t) * C3 + hoff;
  const X* kb = qkv + static_cast<int64_t>(r.b) * d.T * C3 + d.k_col(r.h);
  const X* vb = qkv + static_cast<int64_t>(r.b) * d.T * C3 + d.v_col(r.h);
  float li = 0.0f, Di = 0.0f;
  if (valid) {
    const X* dop = dout + (static_cast<int64_t>(r.b) * d.T + t) * d.C + hoff;
    for (int c = lane; c < hs; c += 32) {
      qs[c] = ld(qkv[qoff + c]) * d.scale;
      dos[c] = ld(dop[c]);
    }
    li = lse[r.bh * d.T + t];
    Di = D[r.bh * d.T + t];
  }
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  const int last = min(static_cast<int>(blockIdx.x) * kGeneralWarps + kGeneralWarps, d.T) - 1;
  for (int j0 = 0; j0 <= last; j0 += kChunk) {
    __syncthreads();
    stage_chunk(kc, vc, kb, C3, vb, C3, j0, d.T, hs);
    __syncthreads();
    if (!valid || j0 > t) continue;
    const int j = j0 + lane;
    float ds = 0.0f;
    if (j <= t) {
      const float* kr = kc + lane * (hs + 1);
      const float* vr = vc + lane * (hs + 1);
      float s = 0.0f, dp = 0.0f;
      for (int c = 0; c < hs; ++c) {
        s += qs[c] * kr[c];
        dp += dos[c] * vr[c];
      }
      ds = expf(s - li) * (dp - Di);
    }
    const int n = min(kChunk, t - j0 + 1);
    for (int jj = 0; jj < n; ++jj) {
      const float dsj = __shfl_sync(0xffffffffu, ds, jj);
      const float* kr = kc + jj * (hs + 1);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < hs) acc[i] += dsj * kr[c];
      }
    }
  }
  if (!valid) return;
  X* dq = dqkv + qoff;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < hs) dq[c] = st<X>(acc[i] * d.scale);
  }
}

// d(k), d(v): block (key rows, b KV-head); warp w has key j; for each query head of the group, queries i >= j in
// chunks (lane l: query i0 + l), starting at the block's first key.
template <typename X>
__global__ void __launch_bounds__(kGeneralWarps * 32)
    attention_dkv_general_kernel(X* __restrict__ dqkv, const X* __restrict__ dout, const X* __restrict__ qkv,
                                 const float* __restrict__ lse, const float* __restrict__ D, Dims d) {
  extern __shared__ float sm[];
  __shared__ float lse_c[kChunk], D_c[kChunk];
  const int hs = d.hs, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  float* ks = sm + warp * hs;
  float* vs = sm + (kGeneralWarps + warp) * hs;
  float* qc = sm + 2 * kGeneralWarps * hs;
  float* dc = qc + kChunk * (hs + 1);
  const int b = static_cast<int>(blockIdx.y) / d.KV, kvh = static_cast<int>(blockIdx.y) % d.KV;
  const int j = static_cast<int>(blockIdx.x) * kGeneralWarps + warp;
  const bool valid = j < d.T;
  const int64_t C3 = d.ld;
  const int64_t koff = (static_cast<int64_t>(b) * d.T + j) * C3 + d.k_col(kvh * d.group());
  const int64_t voff = koff + static_cast<int64_t>(d.KV) * hs;
  if (valid)
    for (int c = lane; c < hs; c += 32) {
      ks[c] = ld(qkv[koff + c]) * d.scale;
      vs[c] = ld(qkv[voff + c]);
    }
  float dk[kPerLane], dv[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dk[i] = dv[i] = 0.0f;
  for (int h = kvh * d.group(); h < (kvh + 1) * d.group(); ++h) {
    const int64_t hoff = static_cast<int64_t>(h) * hs, bh = static_cast<int64_t>(b) * d.H + h;
    const X* qb = qkv + static_cast<int64_t>(b) * d.T * C3 + hoff;
    const X* dob = dout + static_cast<int64_t>(b) * d.T * d.C + hoff;
    const float* lb = lse + bh * d.T;
    const float* Db = D + bh * d.T;
    for (int i0 = static_cast<int>(blockIdx.x) * kGeneralWarps; i0 < d.T; i0 += kChunk) {
      __syncthreads();
      stage_chunk(qc, dc, qb, C3, dob, static_cast<int64_t>(d.C), i0, d.T, hs);
      if (threadIdx.x < kChunk) {
        const int i = i0 + static_cast<int>(threadIdx.x);
        lse_c[threadIdx.x] = i < d.T ? lb[i] : 0.0f;
        D_c[threadIdx.x] = i < d.T ? Db[i] : 0.0f;
      }
      __syncthreads();
      if (!valid || i0 + kChunk <= j) continue;
      const int i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i >= j && i < d.T) {
        const float* qr = qc + lane * (hs + 1);
        const float* dr = dc + lane * (hs + 1);
        float s = 0.0f, dp = 0.0f;
        for (int c = 0; c < hs; ++c) {
          s += ks[c] * qr[c];
          dp += vs[c] * dr[c];
        }
        p = expf(s - lse_c[lane]);
        ds = p * (dp - D_c[lane]);
      }
      const int n = min(kChunk, d.T - i0);
      for (int ii = 0; ii < n; ++ii) {
        const float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
        const float* qr = qc + ii * (hs + 1);
        const float* dr = dc + ii * (hs + 1);
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
          const int c = lane + 32 * k;
          if (c < hs) {
            dv[k] += pi * dr[c];
            dk[k] += dsi * qr[c];
          }
        }
      }
    }
  }
  if (!valid) return;
  X* dkp = dqkv + koff;
  X* dvp = dqkv + voff;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int c = lane + 32 * k;
    if (c < hs) {
      dkp[c] = st<X>(dk[k] * d.scale);
      dvp[c] = st<X>(dv[k]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Tensor-core kernels (bf16, head size HS in {64, 128}).
//
// mma.sync.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4, q = lane % 4:
//   A 16x16: a0 = (g, 2q..2q+1), a1 = (g+8, 2q..), a2 = (g, 2q+8..), a3 = (g+8, 2q+8..)
//   B 16x8:  b0 = (k 2q..2q+1, n g), b1 = (k 2q+8.., n g)
//   C 16x8:  c0, c1 = (g, 2q..2q+1), c2, c3 = (g+8, 2q..2q+1)
// Two C tiles side by side (n 0..7, 8..15) are, packed to bf16 pairs, exactly an A fragment over k 0..15: the
// probabilities go from one product into the next without leaving registers.

constexpr int kTcWarps = 4;
constexpr int kTcRows = 16 * kTcWarps;  // rows of a tile (queries in the forward and d(q); keys in d(k), d(v))
constexpr int kTcCols = 64;             // columns of a tile (keys; queries in d(k), d(v))

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::);
}
// Note [tile pipeline]: the forward walks its key tiles through two shared-memory buffers.
// Iteration i: a barrier (every warp is done with buffer (i+1)%2, which held tile i-1), the copies of tile i+1 into
// it are issued and committed as one group, then cp.async.wait_group 1 (every group but that newest one complete:
// tile i has landed) and a barrier; then tile i is used from buffer i%2 while tile i+1 is in flight. Before the loop,
// tile 0 is copied and waited for. Tiles are 64 x (HS + 8) bf16 values, so the forward takes 5 (q, two k, two v):
// 46 KB (HS 64) or 87 KB (HS 128); the forward is faster for the overlap. The same pipeline in the two backward
// kernels (6 tiles each) made them slower (the d(k), d(v) kernel holds 254 registers a thread at HS 64: two blocks
// an SM, and the larger shared memory did not pay), so they load each tile and wait for it (cp.async helpers:
// device_util.cuh).

// A tile of `rows` rows of HS bf16 values in shared memory, rows padded by 8 values (16 bytes) so that the eight
// row addresses of an ldmatrix fall in distinct banks.
template <int HS>
struct Tile {
  static constexpr int kStride = HS + 8;
  bf16* p;
  __device__ bf16* row(int r) const { return p + r * kStride; }
};

// Copies `rows` rows starting at row r0 of a [T, *] matrix (rows `ld` elements apart) into a tile; rows at or past T
// are zero.
template <int HS>
__device__ void load_tile(Tile<HS> tile, const bf16* base, int64_t ld, int r0, int rows, int T) {
  constexpr int kChunks = HS / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < rows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    bf16* dst = tile.row(r) + c;
    if (r0 + r < T) {
      cp_async16(dst, base + static_cast<int64_t>(r0 + r) * ld + c);
    } else {
      *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
    }
  }
}

// A fragment of rows r0..r0+15, columns k0..k0+15 of a tile.
template <int HS>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], Tile<HS> t, int r0, int k0) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4(a, t.row(r0 + (lane & 7) + ((lane >> 3) & 1) * 8) + k0 + (lane >> 4) * 8);
}
// B fragments of two 8-wide n tiles (n0..n0+7 in b[0], b[1]; n0+8..15 in b[2], b[3]) over k0..k0+15, where the tile
// holds B transposed (row n, column k): the K of q K^T.
template <int HS>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], Tile<HS> t, int n0, int k0) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4(b, t.row(n0 + (lane & 7) + (lane >> 4) * 8) + k0 + ((lane >> 3) & 1) * 8);
}
// The same where the tile holds B itself (row k, column n): the V of P V.
template <int HS>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], Tile<HS> t, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldmatrix_x4_trans(b, t.row(k0 + (lane & 7) + ((lane >> 3) & 1) * 8) + n0 + (lane >> 4) * 8);
}

template <int HS>
constexpr int tc_smem_bytes(int tiles) {
  static_assert(kTcRows == kTcCols, "tiles of rows and of columns are the same size");
  return tiles * kTcRows * Tile<HS>::kStride * static_cast<int>(sizeof(bf16)) + 2 * kTcRows * static_cast<int>(sizeof(float));
}

// Forward: block (query tile, b h); 4 warps of 16 query rows. Online softmax in the log2 domain.
template <int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_forward_tc_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv, Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kTcRows * Tile<HS>::kStride;  // elements of a tile
  const Tile<HS> qs{reinterpret_cast<bf16*>(smem)};
  bf16* const kbuf = qs.p + kTile;      // two key tiles
  bf16* const vbuf = kbuf + 2 * kTile;  // two value tiles
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
  const int tiles = (d.T + kTcRows - 1) / kTcRows;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int64_t C3 = d.ld;
  const bf16* row = qkv + static_cast<int64_t>(b) * d.T * C3;
  const bf16* base = row + static_cast<int64_t>(h) * HS;
  const bf16* kbase = row + d.k_col(h);
  const bf16* vbase = row + d.v_col(h);
  const int q0 = qt * kTcRows;
  load_tile(qs, base, C3, q0, kTcRows, d.T);
  load_tile(Tile<HS>{kbuf}, kbase, C3, 0, kTcCols, d.T);
  load_tile(Tile<HS>{vbuf}, vbase, C3, 0, kTcCols, d.T);
  cp_async_wait_all();
  __syncthreads();
  uint32_t qa[HS / 16][4];
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) load_a(qa[kk], qs, warp * 16, kk * 16);

  const float sl2 = d.scale * kLog2e;
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;  // this thread's two query rows
  flash::Rows rows;
  float o[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const int key_end = min(q0 + kTcRows, d.T);  // keys 0..key_end-1 can be seen by this tile's rows
  for (int k0 = 0, it = 0; k0 < key_end; k0 += kTcCols, ++it) {
    const Tile<HS> ks{kbuf + (it & 1) * kTile}, vs{vbuf + (it & 1) * kTile};
    __syncthreads();  // the other buffers' tile (the previous iteration's) is consumed
    if (k0 + kTcCols < key_end) {
      load_tile(Tile<HS>{kbuf + (~it & 1) * kTile}, kbase, C3, k0 + kTcCols, kTcCols, d.T);
      load_tile(Tile<HS>{vbuf + (~it & 1) * kTile}, vbase, C3, k0 + kTcCols, kTcCols, d.T);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this iteration's tile has landed
    __syncthreads();
    // Keys before the tile's first query and inside T need no mask (every tile but the diagonal one).
    const bool unmasked = k0 + kTcCols <= q0 && k0 + kTcCols <= d.T;
    float s[kTcCols / 8][4];
#pragma unroll
    for (int n = 0; n < kTcCols / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
#pragma unroll
      for (int n2 = 0; n2 < kTcCols / 16; ++n2) {
        uint32_t bb[4];
        load_b_nk(bb, ks, n2 * 16, kk * 16);
        mma(s[2 * n2], qa[kk], bb[0], bb[1]);
        mma(s[2 * n2 + 1], qa[kk], bb[2], bb[3]);
      }
    }
    // Scale to log2 units and mask: a key after the query, or past T, gets -inf (as -FLT_MAX: exp2 gives 0).
    const float2 corr = flash::softmax_tile(s, rows, k0, row0, row1, d.T, unmasked, sl2);
    flash::rescale(o, corr);
    // o += P V
#pragma unroll
    for (int kk = 0; kk < kTcCols / 16; ++kk) {
      const uint32_t pa[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                              pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n2 = 0; n2 < HS / 16; ++n2) {
        uint32_t bb[4];
        load_b_kn(bb, vs, kk * 16, n2 * 16);
        mma(o[2 * n2], pa, bb[0], bb[1]);
        mma(o[2 * n2 + 1], pa, bb[2], bb[3]);
      }
    }
  }
  const float2 inv = flash::finish(rows);
  bf16* ob = out + static_cast<int64_t>(b) * d.T * d.C + static_cast<int64_t>(h) * HS;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    const int c = n * 8 + 2 * q4;
    if (row0 < d.T)
      *reinterpret_cast<__nv_bfloat162*>(ob + static_cast<int64_t>(row0) * d.C + c) =
          __floats2bfloat162_rn(o[n][0] * inv.x, o[n][1] * inv.x);
    if (row1 < d.T)
      *reinterpret_cast<__nv_bfloat162*>(ob + static_cast<int64_t>(row1) * d.C + c) =
          __floats2bfloat162_rn(o[n][2] * inv.y, o[n][3] * inv.y);
  }
  flash::store_lse(rows, lse + static_cast<int64_t>(bh) * d.T, row0, row1, d.T);
}

// Stores a warp's 16 x HS fp32 accumulator (times `scale`) as rows r0.. of a bf16 matrix (rows `ld` apart, rows at
// or past T skipped).
template <int HS>
__device__ void store_rows(bf16* base, int64_t ld, int r0, int T, const float (&acc)[HS / 8][4], float scale) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    const int c = n * 8 + 2 * q4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r0 + g + half * 8;
      if (r >= T) continue;
      auto* p = reinterpret_cast<__nv_bfloat162*>(base + static_cast<int64_t>(r) * ld + c);
      *p = __floats2bfloat162_rn(acc[n][2 * half] * scale, acc[n][2 * half + 1] * scale);
    }
  }
}

// d(k), d(v): block (key tile, b KV-head); warp w owns keys k0 + 16 w ..; for each query head of the group, walks the
// query tiles from the diagonal on (Note [grouped-query attention]).
// Everything is computed transposed (keys as rows): S^T = K Q^T, dV = P^T dO, dP^T = V dO^T, dK = dS^T Q.
template <int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_dkv_tc_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                            const float* __restrict__ lse, const float* __restrict__ D, Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kStride = Tile<HS>::kStride;
  const Tile<HS> ks{reinterpret_cast<bf16*>(smem)};
  const Tile<HS> vs{ks.p + kTcRows * kStride};
  const Tile<HS> qs{vs.p + kTcRows * kStride};
  const Tile<HS> dos{qs.p + kTcCols * kStride};
  float* lse_s = reinterpret_cast<float*>(dos.p + kTcCols * kStride);  // log2 units
  float* D_s = lse_s + kTcCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2;
  const int kt = static_cast<int>(blockIdx.x);  // the earliest keys (the most queries) first
  const int b = static_cast<int>(blockIdx.y) / d.KV, kvh = static_cast<int>(blockIdx.y) % d.KV;
  const int64_t C3 = d.ld;
  const bf16* row = qkv + static_cast<int64_t>(b) * d.T * C3;
  const int64_t kcol = d.k_col(kvh * d.group()), vcol = d.v_col(kvh * d.group());
  const int k0 = kt * kTcRows;
  load_tile(ks, row + kcol, C3, k0, kTcRows, d.T);
  load_tile(vs, row + vcol, C3, k0, kTcRows, d.T);
  const float sl2 = d.scale * kLog2e;
  const int key0 = k0 + warp * 16 + g, key1 = key0 + 8;  // this thread's two key rows
  float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  for (int h = kvh * d.group(); h < (kvh + 1) * d.group(); ++h) {
    const int bh = b * d.H + h;
    const bf16* base = row + static_cast<int64_t>(h) * HS;
    const bf16* dob = dout + static_cast<int64_t>(b) * d.T * d.C + static_cast<int64_t>(h) * HS;
    const float* lb = lse + static_cast<int64_t>(bh) * d.T;
    const float* Db = D + static_cast<int64_t>(bh) * d.T;
    for (int i0 = k0 / kTcCols * kTcCols; i0 < d.T; i0 += kTcCols) {
      __syncthreads();  // the previous query tile is consumed
      load_tile(qs, base, C3, i0, kTcCols, d.T);
      load_tile(dos, dob, d.C, i0, kTcCols, d.T);
      for (int i = threadIdx.x; i < kTcCols; i += blockDim.x) {
        const bool in = i0 + i < d.T;
        lse_s[i] = in ? lb[i0 + i] * kLog2e : FLT_MAX;  // rows past T: p = 0
        D_s[i] = in ? Db[i0 + i] : 0.0f;
      }
      cp_async_wait_all();
      __syncthreads();
      // Queries after the tile's last key see every key of it: the mask is for the diagonal tile only.
      const bool unmasked = i0 >= k0 + kTcRows;
      // S^T = K Q^T (16 keys x 64 queries per warp)
      float s[kTcCols / 8][4], dp[kTcCols / 8][4];
#pragma unroll
      for (int n = 0; n < kTcCols / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
        uint32_t ka[4], va[4];
        load_a(ka, ks, warp * 16, kk * 16);
        load_a(va, vs, warp * 16, kk * 16);
#pragma unroll
        for (int n2 = 0; n2 < kTcCols / 16; ++n2) {
          uint32_t bq[4], bd[4];
          load_b_nk(bq, qs, n2 * 16, kk * 16);
          mma(s[2 * n2], ka, bq[0], bq[1]);
          mma(s[2 * n2 + 1], ka, bq[2], bq[3]);
          load_b_nk(bd, dos, n2 * 16, kk * 16);
          mma(dp[2 * n2], va, bd[0], bd[1]);
          mma(dp[2 * n2 + 1], va, bd[2], bd[3]);
        }
      }
      // P^T = exp2(S^T sl2 - lse2[query]) where query >= key; dS^T = P^T (dP^T - D[query])
      flash::probs_by_key(s, dp, i0, key0, key1, unmasked, sl2, lse_s, D_s);
      // dV += P^T dO; dK += dS^T Q over the query tiles (k = queries)
#pragma unroll
      for (int kk = 0; kk < kTcCols / 16; ++kk) {
        const uint32_t pa[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                                pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
        const uint32_t da[4] = {pack(dp[2 * kk][0], dp[2 * kk][1]), pack(dp[2 * kk][2], dp[2 * kk][3]),
                                pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]), pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
        for (int n2 = 0; n2 < HS / 16; ++n2) {
          uint32_t bd[4], bq[4];
          load_b_kn(bd, dos, kk * 16, n2 * 16);
          mma(dv[2 * n2], pa, bd[0], bd[1]);
          mma(dv[2 * n2 + 1], pa, bd[2], bd[3]);
          load_b_kn(bq, qs, kk * 16, n2 * 16);
          mma(dk[2 * n2], da, bq[0], bq[1]);
          mma(dk[2 * n2 + 1], da, bq[2], bq[3]);
        }
      }
    }
  }
  bf16* dbase = dqkv + static_cast<int64_t>(b) * d.T * C3;
  store_rows<HS>(dbase + kcol, C3, k0 + warp * 16, d.T, dk, d.scale);
  store_rows<HS>(dbase + vcol, C3, k0 + warp * 16, d.T, dv, 1.0f);
}

// d(q): block (query tile, b h); warp w owns queries q0 + 16 w ..; walks the key tiles up to the diagonal.
// S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ = dS K.
template <int HS>
__global__ void __launch_bounds__(kTcWarps * 32)
    attention_dq_tc_kernel(bf16* __restrict__ dqkv, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
                           const float* __restrict__ lse, const float* __restrict__ D, Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kStride = Tile<HS>::kStride;
  const Tile<HS> qs{reinterpret_cast<bf16*>(smem)};
  const Tile<HS> dos{qs.p + kTcRows * kStride};
  const Tile<HS> ks{dos.p + kTcRows * kStride};
  const Tile<HS> vs{ks.p + kTcCols * kStride};
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2;
  const int tiles = (d.T + kTcRows - 1) / kTcRows;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int64_t C3 = d.ld;
  const bf16* base = qkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  const bf16* kbase = qkv + static_cast<int64_t>(b) * d.T * C3 + d.k_col(h);
  const bf16* vbase = qkv + static_cast<int64_t>(b) * d.T * C3 + d.v_col(h);
  const bf16* dob = dout + static_cast<int64_t>(b) * d.T * d.C + static_cast<int64_t>(h) * HS;
  const int q0 = qt * kTcRows;
  load_tile(qs, base, C3, q0, kTcRows, d.T);
  load_tile(dos, dob, d.C, q0, kTcRows, d.T);
  const float sl2 = d.scale * kLog2e;
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const float* lb = lse + static_cast<int64_t>(bh) * d.T;
  const float* Db = D + static_cast<int64_t>(bh) * d.T;
  const float lse0 = row0 < d.T ? lb[row0] * kLog2e : FLT_MAX, lse1 = row1 < d.T ? lb[row1] * kLog2e : FLT_MAX;
  const float D0 = row0 < d.T ? Db[row0] : 0.0f, D1 = row1 < d.T ? Db[row1] : 0.0f;
  float dq[HS / 8][4];
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
  const int key_end = min(q0 + kTcRows, d.T);
  for (int k0 = 0; k0 < key_end; k0 += kTcCols) {
    __syncthreads();
    load_tile(ks, kbase, C3, k0, kTcCols, d.T);
    load_tile(vs, vbase, C3, k0, kTcCols, d.T);
    cp_async_wait_all();
    __syncthreads();
    const bool unmasked = k0 + kTcCols <= q0 && k0 + kTcCols <= d.T;  // every tile but the diagonal one
    float s[kTcCols / 8][4], dp[kTcCols / 8][4];
#pragma unroll
    for (int n = 0; n < kTcCols / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      uint32_t qa[4], da[4];
      load_a(qa, qs, warp * 16, kk * 16);
      load_a(da, dos, warp * 16, kk * 16);
#pragma unroll
      for (int n2 = 0; n2 < kTcCols / 16; ++n2) {
        uint32_t bk[4], bv[4];
        load_b_nk(bk, ks, n2 * 16, kk * 16);
        mma(s[2 * n2], qa, bk[0], bk[1]);
        mma(s[2 * n2 + 1], qa, bk[2], bk[3]);
        load_b_nk(bv, vs, n2 * 16, kk * 16);
        mma(dp[2 * n2], da, bv[0], bv[1]);
        mma(dp[2 * n2 + 1], da, bv[2], bv[3]);
      }
    }
    flash::grads_by_query(s, dp, k0, row0, row1, d.T, unmasked, sl2, lse0, lse1, D0, D1);
    // dQ += dS K (k = keys)
#pragma unroll
    for (int kk = 0; kk < kTcCols / 16; ++kk) {
      const uint32_t da[4] = {pack(dp[2 * kk][0], dp[2 * kk][1]), pack(dp[2 * kk][2], dp[2 * kk][3]),
                              pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]), pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int n2 = 0; n2 < HS / 16; ++n2) {
        uint32_t bk[4];
        load_b_kn(bk, ks, kk * 16, n2 * 16);
        mma(dq[2 * n2], da, bk[0], bk[1]);
        mma(dq[2 * n2 + 1], da, bk[2], bk[3]);
      }
    }
  }
  bf16* dbase = dqkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  store_rows<HS>(dbase, C3, q0 + warp * 16, d.T, dq, d.scale);
}

// Whether the tensor-core kernels apply: bf16, a head size they are built for, and 16-byte aligned rows (cp.async).
template <typename X>
bool use_tensor_cores(const Dims& d, std::initializer_list<const void*> ptrs) {
  if constexpr (!std::is_same_v<X, bf16>) {
    return false;
  } else {
    return (d.hs == 64 || d.hs == 128) && d.C % 8 == 0 && d.ld % 8 == 0 && dev::aligned16(ptrs);
  }
}


template <int HS>
void forward_tc(cudaStream_t s, bf16* out, float* lse, const bf16* qkv, const Dims& d) {
  constexpr int smem = tc_smem_bytes<HS>(5);  // q, two k, two v
  allow_smem(attention_forward_tc_kernel<HS>, smem);
  const dim3 grid((d.T + kTcRows - 1) / kTcRows, d.B * d.H);
  attention_forward_tc_kernel<HS><<<grid, kTcWarps * 32, smem, s>>>(out, lse, qkv, d);
  TT_CUDA_CHECK_LAUNCH();
}

template <int HS>
void backward_tc(cudaStream_t s, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                 const Dims& d) {
  constexpr int smem = tc_smem_bytes<HS>(4);  // k, v, q, d(out)
  allow_smem(attention_dkv_tc_kernel<HS>, smem);
  allow_smem(attention_dq_tc_kernel<HS>, smem);
  const int tiles = (d.T + kTcRows - 1) / kTcRows;
  attention_dkv_tc_kernel<HS><<<dim3(tiles, d.B * d.KV), kTcWarps * 32, smem, s>>>(dqkv, dout, qkv, lse, D, d);
  TT_CUDA_CHECK_LAUNCH();
  attention_dq_tc_kernel<HS><<<dim3(tiles, d.B * d.H), kTcWarps * 32, smem, s>>>(dqkv, dout, qkv, lse, D, d);
  TT_CUDA_CHECK_LAUNCH();
}

// KV: key/value heads (0: H, multi-head attention).
Dims make_dims(int B, int T, int C, int H, int KV = 0) {
  const int hs = C / H;
  if (KV == 0) KV = H;
  TT_CHECK(KV > 0 && H % KV == 0, "attention: %d query heads over %d key/value heads", H, KV);
  return Dims{B, T, C, H, hs, 1.0f / std::sqrt(static_cast<float>(hs)), KV, C + 2 * static_cast<int64_t>(KV) * hs};
}

// One warp per (b, h, t) row, for the row sums.
unsigned rows_grid(const Dims& d) {
  const int64_t rows = static_cast<int64_t>(d.B) * d.H * d.T;
  return static_cast<unsigned>((rows + kGeneralWarps - 1) / kGeneralWarps);
}
// The general kernels: kGeneralWarps rows of one (b, h) pair per block (of one (b, key/value head) pair: heads KV).
dim3 general_grid(const Dims& d, int heads) { return dim3((d.T + kGeneralWarps - 1) / kGeneralWarps, d.B * heads); }

// ---------------------------------------------------------------------------------------------------------------------
// Note [KV cache]: one query per sequence (its new row, at position pos[b]) over the cache's rows 0..pos[b]. One block
// per (b, h) pair: it first writes its head's q of the new row into the cache and, the first head of its key/value
// group only, the group's k and v (Note [grouped-query attention]; no other block reads the new row from the cache:
// every block of the group takes its k and v from shared memory), then its warps take tiles of 32 keys in turn (warp w tiles w, w + warps, ...). In a tile each lane scores one key
// (the whole dot product over the head, the query from shared memory), the warp updates its online softmax (maximum
// and sum over the tile), then the lanes, each holding head dimensions lane, lane + 32, ..., add the tile's 32
// weighted value rows (coalesced). The block merges its warps' states at the end. A key a lane (not a key an
// iteration) keeps the loop's dependent global loads to two per tile: one warp walking keys one by one was
// latency-bound, whatever the dtype.
constexpr int kDecodeWarps = 8;

template <typename X>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    attention_decode_kernel(X* __restrict__ out, X* __restrict__ cache, const X* __restrict__ qkv,
                            const int32_t* __restrict__ pos, Dims d) {
  constexpr int kPerLane = kMaxHs / 32;
  __shared__ float s_q[kMaxHs], s_k[kMaxHs], s_v[kMaxHs];  // the new row's q (scaled), k and v
  __shared__ float s_max[kDecodeWarps], s_sum[kDecodeWarps];
  __shared__ float s_acc[kDecodeWarps][kMaxHs];
  const int b = blockIdx.x / d.H, h = blockIdx.x % d.H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t C3 = d.ld;
  const int n = pos[b] + 1;  // d.T is the cache's length; the caller keeps pos below it
  X* const cb = cache + static_cast<int64_t>(b) * d.T * C3;
  const X* in = qkv + static_cast<int64_t>(b) * C3;
  const int64_t qcol = static_cast<int64_t>(h) * d.hs, kcol = d.k_col(h), vcol = d.v_col(h);
  const bool writes_kv = h % d.group() == 0;
  for (int c = threadIdx.x; c < d.hs; c += blockDim.x) {
    X* row = cb + static_cast<int64_t>(n - 1) * C3;
    const X qc = in[qcol + c], kc = in[kcol + c], vc = in[vcol + c];
    row[qcol + c] = qc;
    if (writes_kv) {
      row[kcol + c] = kc;
      row[vcol + c] = vc;
    }
    s_q[c] = ld(qc) * d.scale;
    s_k[c] = ld(kc);
    s_v[c] = ld(vc);
  }
  __syncthreads();
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int tile = warp * 32; tile < n; tile += kDecodeWarps * 32) {
    const int j = tile + lane;
    float sc = -INFINITY;
    if (j < n - 1) {
      const X* k = cb + j * C3 + kcol;
      float dot = 0.0f;
      for (int c = 0; c < d.hs; ++c) dot += s_q[c] * ld(k[c]);
      sc = dot;
    } else if (j == n - 1) {
      float dot = 0.0f;
      for (int c = 0; c < d.hs; ++c) dot += s_q[c] * s_k[c];
      sc = dot;
    }
    const float mn = fmaxf(m, warp_max(sc));
    const float corr = __expf(m - mn), p = j < n ? __expf(sc - mn) : 0.0f;
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
    const int keys = min(32, n - tile);
    for (int t = 0; t < keys; ++t) {
      const float pt = __shfl_sync(0xffffffffu, p, t);
      const bool last = tile + t == n - 1;
      const X* v = cb + (tile + t) * C3 + vcol;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int c = lane + 32 * i;
        if (c < d.hs) acc[i] += pt * (last ? s_v[c] : ld(v[c]));
      }
    }
    m = mn;
  }
  if (lane == 0) {
    s_max[warp] = m;
    s_sum[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c < d.hs) s_acc[warp][c] = acc[i];
  }
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < kDecodeWarps; ++w) top = fmaxf(top, s_max[w]);
  for (int c = threadIdx.x; c < d.hs; c += blockDim.x) {
    float sum = 0.0f, y = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      if (s_max[w] == -INFINITY) continue;  // a warp that had no key
      const float f = __expf(s_max[w] - top);
      sum += s_sum[w] * f;
      y += s_acc[w][c] * f;
    }
    out[static_cast<int64_t>(b) * d.C + static_cast<int64_t>(h) * d.hs + c] = st<X>(y / sum);
  }
}

}  // namespace

int64_t attention_scratch_bytes(int B, int T, int H) { return static_cast<int64_t>(B) * H * T * sizeof(float); }

template <typename X>
void attention_row_dots(cudaStream_t s, float* D, const X* dout, const X* out, int B, int T, int C, int H) {
  const Dims d = make_dims(B, T, C, H);
  attention_rowdot_kernel<X><<<rows_grid(d), kGeneralWarps * 32, 0, s>>>(D, dout, out, d);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void attention_forward(cudaStream_t s, X* out, float* lse, const X* qkv, int B, int T, int C, int H, int KV) {
  const Dims d = make_dims(B, T, C, H, KV);
  TT_CHECK(d.hs <= kMaxHs && static_cast<int64_t>(B) * H <= 65535,
           "attention: head size %d (at most %d) or %d batch x head pairs (at most 65535) beyond the CUDA kernels",
           d.hs, kMaxHs, B * H);
  if (T == 0 || B == 0) return;
  if (use_tensor_cores<X>(d, {qkv, out})) {
    if constexpr (std::is_same_v<X, bf16>) {
      if (d.hs == 64) return forward_tc<64>(s, out, lse, qkv, d);
      return forward_tc<128>(s, out, lse, qkv, d);
    }
  }
  const int smem = general_smem_bytes(d.hs);
  allow_smem(attention_forward_general_kernel<X>, smem);
  attention_forward_general_kernel<X><<<general_grid(d, d.H), kGeneralWarps * 32, smem, s>>>(out, lse, qkv, d);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void attention_backward(cudaStream_t s, const Scratch& scratch, X* dqkv, const X* dout, const X* qkv, const X* out,
                        const float* lse, int B, int T, int C, int H, int KV) {
  const Dims d = make_dims(B, T, C, H, KV);
  TT_CHECK(d.hs <= kMaxHs && static_cast<int64_t>(B) * H <= 65535,
           "attention: head size %d (at most %d) or %d batch x head pairs (at most 65535) beyond the CUDA kernels",
           d.hs, kMaxHs, B * H);
  if (T == 0 || B == 0) return;
  TT_CHECK(static_cast<size_t>(attention_scratch_bytes(B, T, H)) <= scratch.bytes,
           "attention_backward: B %d T %d H %d needs %lld scratch bytes, the CUDA scratch has %zu", B, T, H,
           static_cast<long long>(attention_scratch_bytes(B, T, H)), scratch.bytes);
  float* D = static_cast<float*>(scratch.ptr);
  attention_row_dots<X>(s, D, dout, out, B, T, C, H);
  if (use_tensor_cores<X>(d, {qkv, dout, dqkv})) {
    if constexpr (std::is_same_v<X, bf16>) {
      if (d.hs == 64) return backward_tc<64>(s, dqkv, dout, qkv, lse, D, d);
      return backward_tc<128>(s, dqkv, dout, qkv, lse, D, d);
    }
  }
  const int smem = general_smem_bytes(d.hs);
  allow_smem(attention_dkv_general_kernel<X>, smem);
  allow_smem(attention_dq_general_kernel<X>, smem);
  attention_dkv_general_kernel<X><<<general_grid(d, d.KV), kGeneralWarps * 32, smem, s>>>(dqkv, dout, qkv, lse, D, d);
  TT_CUDA_CHECK_LAUNCH();
  attention_dq_general_kernel<X><<<general_grid(d, d.H), kGeneralWarps * 32, smem, s>>>(dqkv, dout, qkv, lse, D, d);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void attention_decode(cudaStream_t s, X* out, X* cache, const X* qkv, const int32_t* pos, int B, int Tmax, int C,
                      int H, int KV) {
  const Dims d = make_dims(B, Tmax, C, H, KV);
  TT_CHECK(d.hs <= kMaxHs, "attention_decode: head size %d (at most %d) beyond the CUDA kernel", d.hs, kMaxHs);
  if (B == 0) return;
  attention_decode_kernel<X><<<B * H, kDecodeWarps * 32, 0, s>>>(out, cache, qkv, pos, d);
  TT_CUDA_CHECK_LAUNCH();
}

template void attention_decode<float>(cudaStream_t, float*, float*, const float*, const int32_t*, int, int, int, int,
                                      int);
template void attention_decode<bf16>(cudaStream_t, bf16*, bf16*, const bf16*, const int32_t*, int, int, int, int, int);
template void attention_row_dots<float>(cudaStream_t, float*, const float*, const float*, int, int, int, int);
template void attention_row_dots<bf16>(cudaStream_t, float*, const bf16*, const bf16*, int, int, int, int);
template void attention_forward<float>(cudaStream_t, float*, float*, const float*, int, int, int, int, int);
template void attention_forward<bf16>(cudaStream_t, bf16*, float*, const bf16*, int, int, int, int, int);
template void attention_backward<float>(cudaStream_t, const Scratch&, float*, const float*, const float*,
                                        const float*, const float*, int, int, int, int, int);
template void attention_backward<bf16>(cudaStream_t, const Scratch&, bf16*, const bf16*, const bf16*, const bf16*,
                                       const float*, int, int, int, int, int);

}  // namespace tt::cuda
