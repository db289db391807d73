// backend/cuda/attention_rows: the per-element work of the tensor-core flash kernels (attention.cu's bf16 kernels,
// attention_tf32.cu's f32 kernels) on a warp's tile of scores in mma's accumulator layout: the forward's online
// softmax, the backward's probabilities and score gradients. a thread holds rows
// g and g + 8 of its warp's 16 query rows (g = lane / 4), columns 2q and 2q + 1 of each 8-wide C tile (q = lane % 4),
// so the four threads of a quad share rows.
//
//   flash::Rows rows;                         // before the key loop
//   const float2 corr = flash::softmax_tile(s, rows, k0, row0, row1, T, unmasked, scale * flash::kLog2e);
//   flash::rescale(o, corr);                  // then o += P V with s now holding P
//   const float2 inv = flash::finish(rows);   // after the loop: 1 / the row sums; out = o * inv, then
//   flash::store_lse(rows, lse_of_bh, row0, row1, T);
#pragma once

#include <cfloat>

namespace tt::cuda::flash {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A thread's two rows: running maximum (log2 units) and its own partial sum of exponentials.
struct Rows {
  float m0 = -FLT_MAX, m1 = -FLT_MAX, l0 = 0.0f, l1 = 0.0f;
};

// Turns the scores of one key tile (N C tiles of 8 keys from key k0) into unnormalised probabilities: scaled by sl2
// (log2 units), a key after the row or at or past T masked unless `unmasked`, exponentials against the new running
// maximum. Returns the factors by which the rows' accumulators must be multiplied before this tile's P V is added.
template <int N>
__device__ __forceinline__ float2 softmax_tile(float (&s)[N][4], Rows& r, int k0, int row0, int row1, int T,
                                               bool unmasked, float sl2) {
  const int q4 = threadIdx.x & 3;
  float mx0 = r.m0, mx1 = r.m1;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = k0 + n * 8 + 2 * q4 + (e & 1);
      const int row = e < 2 ? row0 : row1;
      const bool ok = unmasked || (key <= row && key < T);
      s[n][e] = ok ? s[n][e] * sl2 : -FLT_MAX;
    }
    mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
    mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  // A row with every key so far masked (only rows past T, which are not written) keeps max -FLT_MAX; exp2 of
  // -FLT_MAX - -FLT_MAX would be 1, so those rows use a 0 reference instead.
  const float ref0 = mx0 == -FLT_MAX ? 0.0f : mx0, ref1 = mx1 == -FLT_MAX ? 0.0f : mx1;
  const float corr0 = exp2f(r.m0 - ref0), corr1 = exp2f(r.m1 - ref1);
  r.m0 = mx0;
  r.m1 = mx1;
  float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    s[n][0] = exp2f(s[n][0] - ref0);
    s[n][1] = exp2f(s[n][1] - ref0);
    s[n][2] = exp2f(s[n][2] - ref1);
    s[n][3] = exp2f(s[n][3] - ref1);
    rs0 += s[n][0] + s[n][1];
    rs1 += s[n][2] + s[n][3];
  }
  r.l0 = r.l0 * corr0 + rs0;  // per-thread partial sums: corr is the same across the quad
  r.l1 = r.l1 * corr1 + rs1;
  return make_float2(corr0, corr1);
}

template <int N>
__device__ __forceinline__ void rescale(float (&o)[N][4], float2 corr) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    o[n][0] *= corr.x;
    o[n][1] *= corr.x;
    o[n][2] *= corr.y;
    o[n][3] *= corr.y;
  }
}

// After the last key tile: sums the rows' partial sums over the quad and returns 1 / the row sums.
__device__ __forceinline__ float2 finish(Rows& r) {
  r.l0 += __shfl_xor_sync(0xffffffffu, r.l0, 1);
  r.l0 += __shfl_xor_sync(0xffffffffu, r.l0, 2);
  r.l1 += __shfl_xor_sync(0xffffffffu, r.l1, 1);
  r.l1 += __shfl_xor_sync(0xffffffffu, r.l1, 2);
  return make_float2(1.0f / r.l0, 1.0f / r.l1);
}

// Then the log-sum-exp (natural log) of the rows below T, into lse (the (b, h) pair's row of it).
__device__ __forceinline__ void store_lse(const Rows& r, float* lse, int row0, int row1, int T) {
  if ((threadIdx.x & 3) == 0) {
    if (row0 < T) lse[row0] = (r.m0 + log2f(r.l0)) * kLn2;
    if (row1 < T) lse[row1] = (r.m1 + log2f(r.l1)) * kLn2;
  }
}

// The backward's tile of a d(k), d(v) kernel (keys as rows, N C tiles of 8 queries from query i0): s holds S^T and
// dp holds dP^T on entry; on return s holds P^T = exp2(S^T sl2 - lse2[query]) (0 where the query is before the key,
// unless `unmasked`) and dp holds dS^T = P^T (dP^T - D[query]). lse2 (log2 units) and D are the tile's queries'.
template <int N>
__device__ __forceinline__ void probs_by_key(float (&s)[N][4], float (&dp)[N][4], int i0, int key0, int key1,
                                             bool unmasked, float sl2, const float* lse2, const float* D) {
  const int q4 = threadIdx.x & 3;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int qi = n * 8 + 2 * q4 + (e & 1);
      const int key = e < 2 ? key0 : key1;
      const float p = unmasked || i0 + qi >= key ? exp2f(s[n][e] * sl2 - lse2[qi]) : 0.0f;
      s[n][e] = p;
      dp[n][e] = p * (dp[n][e] - D[qi]);
    }
  }
}

// The backward's tile of a d(q) kernel (queries as rows: the thread's row0, row1; N C tiles of 8 keys from key k0):
// dp holds dP on entry and dS = P (dP - D[row]) on return, P = exp2(S sl2 - lse2[row]) (0 for a key after the row or
// at or past T, unless `unmasked`).
template <int N>
__device__ __forceinline__ void grads_by_query(const float (&s)[N][4], float (&dp)[N][4], int k0, int row0, int row1,
                                               int T, bool unmasked, float sl2, float lse2_0, float lse2_1, float D0,
                                               float D1) {
  const int q4 = threadIdx.x & 3;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = k0 + n * 8 + 2 * q4 + (e & 1);
      const int row = e < 2 ? row0 : row1;
      const float p =
          unmasked || (key <= row && key < T) ? exp2f(s[n][e] * sl2 - (e < 2 ? lse2_0 : lse2_1)) : 0.0f;
      dp[n][e] = p * (dp[n][e] - (e < 2 ? D0 : D1));
    }
  }
}

}  // namespace tt::cuda::flash
