// backend/cuda/attention_tf32.cu: causal attention in f32 on tensor cores, each fp32 product as three TF32 products
// (3xTF32), fused as the bf16 flash kernels of attention.cu are: the T x T scores never leave registers
// (Note [3xTF32 attention]; the plan and the numbers it was built against: docs/design/f32-attention.md).
//
// Note [3xTF32 attention]
// f32 is the exact-comparison mode: no product may round its operands to TF32's 10-bit mantissa. 3xTF32 keeps fp32's
// accuracy on TF32 tensor cores: an operand x is split into big(x) = tf32(x) (round to nearest) and small(x) =
// x - big(x) (exact), and a b = big(a) big(b) + big(a) small(b) + small(a) big(b) up to the dropped small(a) small(b)
// (~2^-22 relative), the tensor core's truncation of small to TF32 (< 2^-21) and the fp32 accumulation: three
// mma.sync.m16n8k8.tf32 a product, small terms first.
//
// The kernels are those of attention.cu's tensor-core path (64 x 64 tiles, four warps of 16 rows, online softmax in
// the log2 domain, the mask on the diagonal tile only, a deterministic backward as a d(k)/d(v) kernel over key tiles
// and a d(q) kernel over query tiles, no atomics), with what TF32 fragments change:
//   - fragments of m16n8k8 (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), g = lane / 4, q = lane % 4:
//       A 16x8: a0 = (g, q), a1 = (g + 8, q), a2 = (g, q + 4), a3 = (g + 8, q + 4)
//       B 8x8:  b0 = (k q, n g), b1 = (k q + 4, n g)
//       C 16x8: c0, c1 = (g, 2q .. 2q + 1), c2, c3 = (g + 8, 2q .. 2q + 1)
//   - every product sums over its k index in any order, so k is permuted: "k = q" is column 2q of the 8, "k = q + 4"
//     column 2q + 1. In the products over the head dimension (Q K^T, dO V^T) that makes the two values a lane needs
//     of a row adjacent: one 8-byte load. In the products over keys (P V, dS K) or queries (P^T dO, dS^T Q) it makes
//     a C tile (columns 2q, 2q + 1 of rows g, g + 8) the A fragment {c0, c2, c1, c3} of the next product as it
//     stands: the probabilities go on without shuffles; B's rows are read in the same order (b0 = row 2q, b1 = row
//     2q + 1);
//   - tiles in shared memory are fp32 without padding, swizzled (Tile::index) so that each of those loads falls on
//     distinct banks, and 16-byte runs of four columns stay together for cp.async;
//   - operands are split when a fragment is loaded from shared memory, probabilities once per C tile.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace tt::cuda {
namespace {

using dev::allow_smem;
using dev::cp_async16;
using dev::cp_async_commit;
using dev::cp_async_wait;
using flash::kLog2e;
constexpr int kWarps = 4;
constexpr int64_t kLeastPartialsChunk = 32;  // (b, h) pairs (attention_tf32x3_workspace_for)
// The loops over a product's k steps whose index only addresses shared memory (Q K^T, dO V^T, dS K from shared dS^T)
// in the backward kernels are not unrolled: fully unrolled, the d(k)/d(v) kernel's code outgrew the instruction cache
// (ncu: warps waiting for instruction fetches), and the rolled loops make the backward faster at head sizes 64 and
// 128 (docs/benchmarks/2026-12-03-h200-engine-dq-partials/).
// Loops whose index selects a register array (the C tiles of P and dS) stay unrolled; so does the forward's (its
// code fits: not unrolling it was no faster).
constexpr int kUnrollK = 1;
constexpr int kRows = 16 * kWarps;  // rows of a tile: queries (forward, d(q)) or keys (d(k), d(v))
constexpr int kCols = 64;           // the other side's tile: keys (forward, d(q)) or queries (d(k), d(v))
static_assert(kRows == kCols, "a block's own tile and the tiles it walks are the same size");

struct Dims {
  int B, T, C, H;
  float scale;
};

// A tile of kRows rows of HS floats in shared memory (Note [3xTF32 attention]: swizzled, unpadded).
template <int HS>
struct Tile {
  float* p;
  // Column c of row r is at c ^ 8 h(r) in the row, h(r) = (r / 2 % 4) ^ 2 (r % 2): h is one to one on rows 0..3 and
  // on 4..7 (the 8-byte loads of A and B fragments, rows g, 16 lanes a phase), and on even and on odd rows (the
  // 4-byte loads of permuted B fragments, rows 2q + e, columns g).
  __device__ __forceinline__ int index(int r, int c) const {
    return r * HS + (c ^ ((((r >> 1) & 3) ^ ((r & 1) << 1)) << 3));
  }
  __device__ __forceinline__ float at(int r, int c) const { return p[index(r, c)]; }
  __device__ __forceinline__ float2 pair(int r, int c) const {  // columns c, c + 1 (c even)
    return *reinterpret_cast<const float2*>(p + index(r, c));
  }
};
template <int HS>
constexpr int tile_bytes() {
  return kRows * HS * static_cast<int>(sizeof(float));
}

// Copies rows r0 .. r0 + kRows - 1 of a [T, *] f32 matrix (rows `ld` floats apart) into a tile; rows at or past T
// are zero. Issues cp.async copies; the caller commits and waits.
template <int HS>
__device__ void load_tile(Tile<HS> t, const float* base, int64_t ld, int r0, int T) {
  constexpr int kChunks = HS / 4;  // 16-byte runs a row
  for (int i = threadIdx.x; i < kRows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = (i % kChunks) * 4;
    float* dst = t.p + t.index(r, c);
    if (r0 + r < T) {
      cp_async16(dst, base + static_cast<int64_t>(r0 + r) * ld + c);
    } else {
      *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// An operand split into its TF32 big and small parts (Note [3xTF32 attention]).
template <int N>
struct Split {
  uint32_t big[N], small[N];
};
// small(x) goes to the tensor core unrounded: it reads the top 19 bits, truncating, an error below 2^-10 |small(x)|
// <= 2^-21 |x| (the dropped small(a) small(b) is ~2^-22): one cvt an element fewer.
template <int N>
__device__ __forceinline__ Split<N> split(const float (&x)[N]) {
  Split<N> s;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    s.big[i] = to_tf32(x[i]);
    s.small[i] = __float_as_uint(x[i] - __uint_as_float(s.big[i]));
  }
  return s;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// c += a b to fp32 accuracy: the small terms first.
__device__ __forceinline__ void mma3(float (&c)[4], const Split<4>& a, const Split<2>& b) {
  mma_tf32(c, a.small, b.big);
  mma_tf32(c, a.big, b.small);
  mma_tf32(c, a.big, b.big);
}

// The A fragment of rows r0 .. r0 + 15, columns k0 .. k0 + 7 of a tile, in the permuted k order (k = q is column
// 2q, k = q + 4 column 2q + 1: a product over the head dimension sums in any order, and the pair is one load).
template <int HS>
__device__ __forceinline__ Split<4> load_a(Tile<HS> t, int r0, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const float2 top = t.pair(r0 + g, k0 + 2 * q), bottom = t.pair(r0 + g + 8, k0 + 2 * q);
  const float x[4] = {top.x, bottom.x, top.y, bottom.y};
  return split(x);
}
// The B fragment of n0 .. n0 + 7 over k0 .. k0 + 7 where the tile holds B transposed (row n, column k): K in Q K^T.
// The same permuted k order as load_a.
template <int HS>
__device__ __forceinline__ Split<2> load_b_nk(Tile<HS> t, int n0, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const float2 v = t.pair(n0 + g, k0 + 2 * q);
  const float x[2] = {v.x, v.y};
  return split(x);
}
// The B fragment of n0 .. n0 + 7 over rows k0 .. k0 + 7 of a tile holding B itself (row k, column n), in the
// permuted k order of a_from_c: V in P V.
template <int HS>
__device__ __forceinline__ Split<2> load_b_kn(Tile<HS> t, int k0, int n0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const float x[2] = {t.at(k0 + 2 * q, n0 + g), t.at(k0 + 2 * q + 1, n0 + g)};
  return split(x);
}
// A C tile (16 rows x 8 columns) as the A fragment of the next product over those 8 columns, permuted.
__device__ __forceinline__ Split<4> a_from_c(const float (&c)[4]) {
  const float x[4] = {c[0], c[2], c[1], c[3]};
  return split(x);
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Stores a warp's 16 x HS accumulator (times `scale`) as rows r0 .. of an f32 matrix (rows `ld` apart; rows at or
// past T skipped).
template <int HS>
__device__ void store_rows(float* base, int64_t ld, int r0, int T, const float (&acc)[HS / 8][4], float scale0,
                           float scale1) {
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int n = 0; n < HS / 8; ++n) {
    const int c = n * 8 + 2 * q;
    if (r0 + g < T)
      *reinterpret_cast<float2*>(base + static_cast<int64_t>(r0 + g) * ld + c) =
          make_float2(acc[n][0] * scale0, acc[n][1] * scale0);
    if (r0 + g + 8 < T)
      *reinterpret_cast<float2*>(base + static_cast<int64_t>(r0 + g + 8) * ld + c) =
          make_float2(acc[n][2] * scale1, acc[n][3] * scale1);
  }
}

// Forward: block (query tile, b h); warp w owns queries q0 + 16 w ..; the key tiles are double-buffered as in the
// bf16 forward (Note [tile pipeline] in attention.cu).
template <int HS>
__global__ void __launch_bounds__(kWarps * 32, 2)
    attention_forward_tf32_kernel(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ qkv,
                                  Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kRows * HS;
  const Tile<HS> qs{reinterpret_cast<float*>(smem)};
  float* const kbuf = qs.p + kTile;      // two key tiles
  float* const vbuf = kbuf + 2 * kTile;  // two value tiles
  const int warp = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2;
  const int tiles = (d.T + kRows - 1) / kRows;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int64_t C3 = 3 * static_cast<int64_t>(d.C);
  const float* base = qkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  const int q0 = qt * kRows;
  load_tile(qs, base, C3, q0, d.T);
  load_tile(Tile<HS>{kbuf}, base + d.C, C3, 0, d.T);
  load_tile(Tile<HS>{vbuf}, base + 2 * d.C, C3, 0, d.T);
  cp_async_commit();
  cp_async_wait<0>();

  const float sl2 = d.scale * kLog2e;
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;  // this thread's two query rows
  flash::Rows rows;
  float o[HS / 8][4];
  zero(o);
  const int key_end = min(q0 + kRows, d.T);  // keys 0 .. key_end - 1 can be seen by this tile's rows
  for (int k0 = 0, it = 0; k0 < key_end; k0 += kCols, ++it) {
    const Tile<HS> ks{kbuf + (it & 1) * kTile}, vs{vbuf + (it & 1) * kTile};
    __syncthreads();  // the other buffers' tile (the previous iteration's) is consumed
    if (k0 + kCols < key_end) {
      load_tile(Tile<HS>{kbuf + (~it & 1) * kTile}, base + d.C, C3, k0 + kCols, d.T);
      load_tile(Tile<HS>{vbuf + (~it & 1) * kTile}, base + 2 * d.C, C3, k0 + kCols, d.T);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this iteration's tile has landed
    __syncthreads();
    const bool unmasked = k0 + kCols <= q0 && k0 + kCols <= d.T;  // every tile but the diagonal one
    float s[kCols / 8][4];
    zero(s);
#pragma unroll  // the forward's code fits the instruction cache (kUnrollK above)
    for (int kk = 0; kk < HS / 8; ++kk) {
      const Split<4> qa = load_a(qs, warp * 16, kk * 8);
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n) mma3(s[n], qa, load_b_nk(ks, n * 8, kk * 8));
    }
    const float2 corr = flash::softmax_tile(s, rows, k0, row0, row1, d.T, unmasked, sl2);
    flash::rescale(o, corr);
    // o += P V, over the keys of each C tile of P
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const Split<4> pa = a_from_c(s[j]);
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) mma3(o[n], pa, load_b_kn(vs, j * 8, n * 8));
    }
  }
  const float2 inv = flash::finish(rows);
  float* ob = out + static_cast<int64_t>(b) * d.T * d.C + static_cast<int64_t>(h) * HS;
  store_rows<HS>(ob, d.C, q0 + warp * 16, d.T, o, inv.x, inv.y);
  flash::store_lse(rows, lse + static_cast<int64_t>(bh) * d.T, row0, row1, d.T);
}

// Note [d(q) from the key tiles]
// Each query tile's d(q) is the sum over key tiles kt <= qt of dS(qt, kt) K(kt). The d(k)/d(v) kernel has dS (as
// dS^T, keys as rows) of every pair in registers, so with a workspace it also computes dS K there (through shared
// memory: the product runs over its keys, spread across the warps) and stores it, a 64 x HS fp32 tile a pair; a
// second kernel adds each query tile's partials in key-tile order (deterministic, no atomics) and scales. The d(q)
// kernel below, which rebuilds S and dP from Q, K, V and dO for the same product, then does not run: 5 products a
// pair instead of 7. Partials of (kt, qt) sit at pair_index(kt, qt) within a (b, h)'s pair_count(T) tiles: a query
// tile's key tiles are adjacent, in order. The workspace holds a chunk of (b, h) pairs' partials at a time
// (attention_tf32x3_workspace_for); without one, the d(q) kernel runs.
__host__ __device__ __forceinline__ int64_t pair_index(int kt, int qt) {
  return static_cast<int64_t>(qt) * (qt + 1) / 2 + kt;
}
__host__ __device__ __forceinline__ int64_t pair_count(int T) {
  const int tiles = (T + kRows - 1) / kRows;
  return static_cast<int64_t>(tiles) * (tiles + 1) / 2;
}

// d(k), d(v): block (key tile, b h0 + blockIdx.y); warp w owns keys k0 + 16 w ..; walks the query tiles from the
// diagonal on. Computed transposed (keys as rows): S^T = K Q^T, dP^T = V dO^T, dV = P^T dO, dK = dS^T Q.
// kPartials (Note [d(q) from the key tiles]): also dS K, this key tile's share of the query tile's d(q), into
// partials (unscaled; one 64 x HS tile a (key tile, query tile) pair, pair_index order).
template <int HS, bool kPartials>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dkv_tf32_kernel(float* __restrict__ dqkv, float* __restrict__ partials, const float* __restrict__ dout,
                              const float* __restrict__ qkv, const float* __restrict__ lse,
                              const float* __restrict__ D, Dims d, int bh0) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kRows * HS;
  const Tile<HS> ks{reinterpret_cast<float*>(smem)};
  const Tile<HS> vs{ks.p + kTile};
  const Tile<HS> qs{vs.p + kTile};
  const Tile<HS> dos{qs.p + kTile};
  float* lse_s = dos.p + kTile;  // log2 units
  float* D_s = lse_s + kCols;
  const Tile<kCols> dst{D_s + kCols};  // kPartials: dS^T of the query tile (rows keys, columns queries)
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int kt = static_cast<int>(blockIdx.x);  // the earliest keys (the most queries) first
  const int bh = bh0 + static_cast<int>(blockIdx.y), b = bh / d.H, h = bh % d.H;
  const int64_t C3 = 3 * static_cast<int64_t>(d.C);
  const float* base = qkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  const float* dob = dout + static_cast<int64_t>(b) * d.T * d.C + static_cast<int64_t>(h) * HS;
  const float* lb = lse + static_cast<int64_t>(bh) * d.T;
  const float* Db = D + static_cast<int64_t>(bh) * d.T;
  const int k0 = kt * kRows;
  load_tile(ks, base + d.C, C3, k0, d.T);
  load_tile(vs, base + 2 * d.C, C3, k0, d.T);
  const float sl2 = d.scale * kLog2e;
  const int key0 = k0 + warp * 16 + g, key1 = key0 + 8;  // this thread's two key rows
  float dk[HS / 8][4], dv[HS / 8][4];
  zero(dk);
  zero(dv);
  for (int i0 = k0 / kCols * kCols; i0 < d.T; i0 += kCols) {
    __syncthreads();  // the previous query tile is consumed
    load_tile(qs, base, C3, i0, d.T);
    load_tile(dos, dob, d.C, i0, d.T);
    for (int i = threadIdx.x; i < kCols; i += blockDim.x) {
      const bool in = i0 + i < d.T;
      lse_s[i] = in ? lb[i0 + i] * kLog2e : FLT_MAX;  // rows past T: p = 0
      D_s[i] = in ? Db[i0 + i] : 0.0f;
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const bool unmasked = i0 >= k0 + kRows;  // queries after the tile's last key see all of it
    float s[kCols / 8][4], dp[kCols / 8][4];
    zero(s);
    zero(dp);
#pragma unroll kUnrollK
    for (int kk = 0; kk < HS / 8; ++kk) {
      const Split<4> ka = load_a(ks, warp * 16, kk * 8), va = load_a(vs, warp * 16, kk * 8);
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n) {
        mma3(s[n], ka, load_b_nk(qs, n * 8, kk * 8));
        mma3(dp[n], va, load_b_nk(dos, n * 8, kk * 8));
      }
    }
    // P^T = exp2(S^T sl2 - lse2[query]) where query >= key; dS^T = P^T (dP^T - D[query])
    flash::probs_by_key(s, dp, i0, key0, key1, unmasked, sl2, lse_s, D_s);
    if constexpr (kPartials) {
      // dS^T to shared memory: the d(q) product below reads it by query rows, across the warps' keys.
      const int r = warp * 16 + g;
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j) {
        *reinterpret_cast<float2*>(dst.p + dst.index(r, j * 8 + 2 * q)) = make_float2(dp[j][0], dp[j][1]);
        *reinterpret_cast<float2*>(dst.p + dst.index(r + 8, j * 8 + 2 * q)) = make_float2(dp[j][2], dp[j][3]);
      }
    }
    // dV += P^T dO; dK += dS^T Q, over the queries of each C tile
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const Split<4> pa = a_from_c(s[j]), da = a_from_c(dp[j]);
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        mma3(dv[n], pa, load_b_kn(dos, j * 8, n * 8));
        mma3(dk[n], da, load_b_kn(qs, j * 8, n * 8));
      }
    }
    if constexpr (kPartials) {
      __syncthreads();  // dS^T complete
      // dQ (warp w: the tile's queries 16 w ..) = dS K over this tile's keys, k in the permuted order of load_b_kn:
      // A element (query r, k = q) is dS^T (key 2q, query r), (r, q + 4) is (2q + 1, r).
      const int r0 = warp * 16;
      float dq[HS / 8][4];
      zero(dq);
#pragma unroll kUnrollK
      for (int kk = 0; kk < kCols / 8; ++kk) {
        const int k = kk * 8 + 2 * q;
        const float x[4] = {dst.at(k, r0 + g), dst.at(k, r0 + g + 8), dst.at(k + 1, r0 + g), dst.at(k + 1, r0 + g + 8)};
        const Split<4> a = split(x);
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) mma3(dq[n], a, load_b_kn(ks, kk * 8, n * 8));
      }
      const int qt = i0 / kCols;
      float* tile = partials + (static_cast<int64_t>(blockIdx.y) * pair_count(d.T) + pair_index(kt, qt)) * kRows * HS;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        const int c = n * 8 + 2 * q;
        *reinterpret_cast<float2*>(tile + (r0 + g) * HS + c) = make_float2(dq[n][0], dq[n][1]);
        *reinterpret_cast<float2*>(tile + (r0 + g + 8) * HS + c) = make_float2(dq[n][2], dq[n][3]);
      }
    }
  }
  float* dbase = dqkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  store_rows<HS>(dbase + d.C, C3, k0 + warp * 16, d.T, dk, d.scale, d.scale);
  store_rows<HS>(dbase + 2 * d.C, C3, k0 + warp * 16, d.T, dv, 1.0f, 1.0f);
}

// Note [d(q) from the key tiles]: d(q) of (b, h) = bh0 + chunk-local index, row t, four columns a thread: the sum of
// its query tile's partials in key-tile order, times the scale.
template <int HS>
__global__ void attention_dq_sum_tf32_kernel(float* __restrict__ dqkv, const float* __restrict__ partials, Dims d,
                                             int bh0, int pairs_here) {
  constexpr int kQuads = HS / 4;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<int64_t>(pairs_here) * d.T * kQuads) return;
  const int c = static_cast<int>(i % kQuads) * 4;
  const int t = static_cast<int>(i / kQuads % d.T);
  const int local = static_cast<int>(i / kQuads / d.T);
  const int bh = bh0 + local, b = bh / d.H, h = bh % d.H;
  const int qt = t / kRows, row = t % kRows;
  const float* p = partials + (static_cast<int64_t>(local) * pair_count(d.T) + pair_index(0, qt)) * kRows * HS +
                   row * HS + c;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int kt = 0; kt <= qt; ++kt, p += kRows * HS) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  float* out = dqkv + (static_cast<int64_t>(b) * d.T + t) * 3 * d.C + static_cast<int64_t>(h) * HS + c;
  *reinterpret_cast<float4*>(out) = make_float4(acc.x * d.scale, acc.y * d.scale, acc.z * d.scale, acc.w * d.scale);
}

// d(q): block (query tile, b h); warp w owns queries q0 + 16 w ..; walks the key tiles up to the diagonal.
// S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ = dS K.
template <int HS>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dq_tf32_kernel(float* __restrict__ dqkv, const float* __restrict__ dout, const float* __restrict__ qkv,
                             const float* __restrict__ lse, const float* __restrict__ D, Dims d) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kTile = kRows * HS;
  const Tile<HS> qs{reinterpret_cast<float*>(smem)};
  const Tile<HS> dos{qs.p + kTile};
  const Tile<HS> ks{dos.p + kTile};
  const Tile<HS> vs{ks.p + kTile};
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2;
  const int tiles = (d.T + kRows - 1) / kRows;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int64_t C3 = 3 * static_cast<int64_t>(d.C);
  const float* base = qkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  const float* dob = dout + static_cast<int64_t>(b) * d.T * d.C + static_cast<int64_t>(h) * HS;
  const int q0 = qt * kRows;
  load_tile(qs, base, C3, q0, d.T);
  load_tile(dos, dob, d.C, q0, d.T);
  const float sl2 = d.scale * kLog2e;
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const float* lb = lse + static_cast<int64_t>(bh) * d.T;
  const float* Db = D + static_cast<int64_t>(bh) * d.T;
  const float lse0 = row0 < d.T ? lb[row0] * kLog2e : FLT_MAX, lse1 = row1 < d.T ? lb[row1] * kLog2e : FLT_MAX;
  const float D0 = row0 < d.T ? Db[row0] : 0.0f, D1 = row1 < d.T ? Db[row1] : 0.0f;
  float dq[HS / 8][4];
  zero(dq);
  const int key_end = min(q0 + kRows, d.T);
  for (int k0 = 0; k0 < key_end; k0 += kCols) {
    __syncthreads();  // the previous key tile is consumed
    load_tile(ks, base + d.C, C3, k0, d.T);
    load_tile(vs, base + 2 * d.C, C3, k0, d.T);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const bool unmasked = k0 + kCols <= q0 && k0 + kCols <= d.T;  // every tile but the diagonal one
    float s[kCols / 8][4], dp[kCols / 8][4];
    zero(s);
    zero(dp);
#pragma unroll kUnrollK
    for (int kk = 0; kk < HS / 8; ++kk) {
      const Split<4> qa = load_a(qs, warp * 16, kk * 8), da = load_a(dos, warp * 16, kk * 8);
#pragma unroll
      for (int n = 0; n < kCols / 8; ++n) {
        mma3(s[n], qa, load_b_nk(ks, n * 8, kk * 8));
        mma3(dp[n], da, load_b_nk(vs, n * 8, kk * 8));
      }
    }
    flash::grads_by_query(s, dp, k0, row0, row1, d.T, unmasked, sl2, lse0, lse1, D0, D1);
    // dQ += dS K, over the keys of each C tile
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) {
      const Split<4> da = a_from_c(dp[j]);
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) mma3(dq[n], da, load_b_kn(ks, j * 8, n * 8));
    }
  }
  float* dbase = dqkv + static_cast<int64_t>(b) * d.T * C3 + static_cast<int64_t>(h) * HS;
  store_rows<HS>(dbase, C3, q0 + warp * 16, d.T, dq, d.scale, d.scale);
}

Dims make_dims(int B, int T, int C, int H) {
  return Dims{B, T, C, H, 1.0f / std::sqrt(static_cast<float>(C / H))};
}

template <int HS>
void forward(cudaStream_t s, float* out, float* lse, const float* qkv, const Dims& d) {
  constexpr int smem = 5 * tile_bytes<HS>();  // q, two k, two v
  allow_smem(attention_forward_tf32_kernel<HS>, smem);
  const dim3 grid((d.T + kRows - 1) / kRows, d.B * d.H);
  attention_forward_tf32_kernel<HS><<<grid, kWarps * 32, smem, s>>>(out, lse, qkv, d);
  TT_CUDA_CHECK_LAUNCH();
}

template <int HS>
int64_t partials_bytes_per_pair(int T) {  // a (b, h) pair's partials (Note [d(q) from the key tiles])
  return pair_count(T) * kRows * HS * static_cast<int64_t>(sizeof(float));
}

template <int HS>
bool backward(cudaStream_t s, float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
              const Dims& d, float* ws, int64_t ws_bytes) {
  constexpr int smem = 4 * tile_bytes<HS>() + 2 * kCols * static_cast<int>(sizeof(float));  // + lse, D of a tile
  constexpr int smem_partials = smem + kCols * kCols * static_cast<int>(sizeof(float));      // + dS^T
  const int BH = d.B * d.H;
  const int64_t per_pair = partials_bytes_per_pair<HS>(d.T);
  const int chunk = ws != nullptr ? static_cast<int>(std::min<int64_t>(BH, ws_bytes / per_pair)) : 0;
  const int tiles = (d.T + kRows - 1) / kRows;
  if (chunk >= 1) {  // Note [d(q) from the key tiles]
    allow_smem(attention_dkv_tf32_kernel<HS, true>, smem_partials);
    for (int bh0 = 0; bh0 < BH; bh0 += chunk) {
      const int n = std::min(chunk, BH - bh0);
      attention_dkv_tf32_kernel<HS, true>
          <<<dim3(tiles, n), kWarps * 32, smem_partials, s>>>(dqkv, ws, dout, qkv, lse, D, d, bh0);
      TT_CUDA_CHECK_LAUNCH();
      const int64_t threads = static_cast<int64_t>(n) * d.T * (HS / 4);
      attention_dq_sum_tf32_kernel<HS><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(dqkv, ws, d, bh0,
                                                                                                  n);
      TT_CUDA_CHECK_LAUNCH();
    }
    return true;
  }
  allow_smem(attention_dkv_tf32_kernel<HS, false>, smem);
  allow_smem(attention_dq_tf32_kernel<HS>, smem);
  const dim3 grid(tiles, BH);
  attention_dkv_tf32_kernel<HS, false><<<grid, kWarps * 32, smem, s>>>(dqkv, nullptr, dout, qkv, lse, D, d, 0);
  TT_CUDA_CHECK_LAUNCH();
  attention_dq_tf32_kernel<HS><<<grid, kWarps * 32, smem, s>>>(dqkv, dout, qkv, lse, D, d);
  TT_CUDA_CHECK_LAUNCH();
  return false;
}

}  // namespace

bool attention_tf32x3_takes(int B, int C, int H, std::initializer_list<const void*> ptrs) {
  if (H <= 0 || C % H != 0) return false;
  const int hs = C / H;
  const bool aligned = C % 4 == 0 && dev::aligned16(ptrs);  // rows of qkv, out and dout start on 16 bytes
  return (hs == 64 || hs == 128) && aligned && static_cast<int64_t>(B) * H <= 65535;
}

void attention_forward_tf32x3(cudaStream_t s, float* out, float* lse, const float* qkv, int B, int T, int C, int H) {
  TT_CHECK(attention_tf32x3_takes(B, C, H, {out, qkv}), "attention_forward_tf32x3: B %d C %d H %d not taken", B, C, H);
  if (T == 0 || B == 0) return;
  const Dims d = make_dims(B, T, C, H);
  if (C / H == 64) return forward<64>(s, out, lse, qkv, d);
  forward<128>(s, out, lse, qkv, d);
}

int64_t attention_tf32x3_workspace_for(int64_t B, int64_t T, int64_t H, int64_t hs, int64_t cap) {
  if ((hs != 64 && hs != 128) || B <= 0 || H <= 0 || T <= 0 || T > INT32_MAX) return 0;
  const int64_t per_pair = hs == 64 ? partials_bytes_per_pair<64>(static_cast<int>(T))
                                    : partials_bytes_per_pair<128>(static_cast<int>(T));
  // Chunks of fewer pairs than this leave the GPU idle between them: slower than the d(q) kernel.
  const int64_t least = std::min<int64_t>(B * H, kLeastPartialsChunk);
  const int64_t pairs = std::min<int64_t>(B * H, cap / per_pair);
  return pairs >= least ? pairs * per_pair : 0;
}

bool attention_backward_tf32x3(cudaStream_t s, const Scratch& scratch, void* ws, int64_t ws_bytes, float* dqkv,
                               const float* dout, const float* qkv, const float* out, const float* lse, int B, int T,
                               int C, int H) {
  TT_CHECK(attention_tf32x3_takes(B, C, H, {dqkv, dout, qkv}), "attention_backward_tf32x3: B %d C %d H %d not taken",
           B, C, H);
  if (T == 0 || B == 0) return false;
  TT_CHECK(static_cast<size_t>(attention_scratch_bytes(B, T, H)) <= scratch.bytes,
           "attention_backward_tf32x3: B %d T %d H %d needs %lld scratch bytes, the CUDA scratch has %zu", B, T, H,
           static_cast<long long>(attention_scratch_bytes(B, T, H)), scratch.bytes);
  float* D = static_cast<float*>(scratch.ptr);
  attention_row_dots<float>(s, D, dout, out, B, T, C, H);
  const Dims d = make_dims(B, T, C, H);
  float* partials = static_cast<float*>(ws);
  if (C / H == 64) return backward<64>(s, dqkv, dout, qkv, lse, D, d, partials, ws_bytes);
  return backward<128>(s, dqkv, dout, qkv, lse, D, d, partials, ws_bytes);
}

}  // namespace tt::cuda
