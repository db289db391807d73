// backend/cuda/kernels_pointwise.cu: pointwise ops: GELU forward and backward, SwiGLU forward and backward, the rotary
// position embedding, the residual add, dtype conversion; kernels and their launchers (kernels.cuh).
#include "backend/cuda/kernels_common.cuh"

namespace tt::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;

template <typename X>
__global__ void gelu_forward_kernel(X* out, const X* inp, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = ld(inp[i]);
    out[i] = st<X>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
  }
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename X>
__global__ void gelu_backward_kernel(X* dinp, const X* inp, const X* dout, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dinp[i] = st<X>(ld(dinp[i]) + gelu_grad(ld(inp[i])) * ld(dout[i]));
}

template <typename X>
__global__ void gelu_backward_scale_kernel(X* d, const X* pre, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = st<X>(gelu_grad(ld(pre[i])) * ld(d[i]));
}

// out = a + b in 16-byte vectors (every pointer 16-byte aligned, n a multiple of the vector).
template <typename X>
__global__ void residual_forward_vec_kernel(X* __restrict__ out, const X* __restrict__ a, const X* __restrict__ b,
                                            int64_t nv) {
  constexpr int kV = 16 / sizeof(X);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < nv;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int4 ra = reinterpret_cast<const int4*>(a)[i];
    const int4 rb = reinterpret_cast<const int4*>(b)[i];
    const X* ea = reinterpret_cast<const X*>(&ra);
    const X* eb = reinterpret_cast<const X*>(&rb);
    int4 o;
    X* eo = reinterpret_cast<X*>(&o);
#pragma unroll
    for (int j = 0; j < kV; ++j) eo[j] = st<X>(ld(ea[j]) + ld(eb[j]));
    reinterpret_cast<int4*>(out)[i] = o;
  }
}

template <typename X>
__global__ void residual_forward_kernel(X* out, const X* a, const X* b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = st<X>(ld(a[i]) + ld(b[i]));
}

// One thread a rotated pair: (row bt, head h of the H + KV q and k heads, pair i).
template <typename X>
__global__ void rope_kernel(X* qkv, const float* __restrict__ table, const int32_t* __restrict__ positions, int T,
                            int H, int KV, int hs, bool inverse, int64_t pairs) {
  const int half = hs / 2, heads = H + KV;
  const int64_t Cq = static_cast<int64_t>(H + 2 * KV) * hs;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < pairs;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % half);
    const int64_t rest = k / half;
    const int h = static_cast<int>(rest % heads);
    const int64_t bt = rest / heads;
    const int64_t p = positions != nullptr ? positions[bt / T] : bt % T;
    const float c = table[p * hs + i], sn = inverse ? -table[p * hs + half + i] : table[p * hs + half + i];
    X* x = qkv + bt * Cq + static_cast<int64_t>(h) * hs;
    const float x1 = ld(x[i]), x2 = ld(x[half + i]);
    x[i] = st<X>(x1 * c - x2 * sn);
    x[half + i] = st<X>(x2 * c + x1 * sn);
  }
}

// The same, four pairs a thread (i..i+3 of a head: half a multiple of 4; 8-byte aligned rows of qkv, 16-byte aligned
// rows of the table): one 64-bit division chain a pair and scalar loads kept rope at a third of the copy bandwidth.
// The arithmetic of each pair is rope_kernel's.
template <typename X>
__global__ void rope4_kernel(X* qkv, const float* __restrict__ table, const int32_t* __restrict__ positions, int T,
                             int H, int KV, int hs, bool inverse, int64_t quads) {
  const int half = hs / 2, heads = H + KV, qh = half / 4;
  const int64_t Cq = static_cast<int64_t>(H + 2 * KV) * hs;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < quads;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(k % qh) * 4;
    const int64_t rest = k / qh;
    const int h = static_cast<int>(rest % heads);
    const int64_t bt = rest / heads;
    const int64_t p = positions != nullptr ? positions[bt / T] : bt % T;
    const float4 c = *reinterpret_cast<const float4*>(table + p * hs + i);
    float4 sn = *reinterpret_cast<const float4*>(table + p * hs + half + i);
    if (inverse) sn = make_float4(-sn.x, -sn.y, -sn.z, -sn.w);
    X* x = qkv + bt * Cq + static_cast<int64_t>(h) * hs;
    alignas(16) X a[4];
    alignas(16) X b[4];
    if constexpr (sizeof(X) == 2) {
      *reinterpret_cast<uint2*>(a) = *reinterpret_cast<const uint2*>(x + i);
      *reinterpret_cast<uint2*>(b) = *reinterpret_cast<const uint2*>(x + half + i);
    } else {
      *reinterpret_cast<float4*>(a) = *reinterpret_cast<const float4*>(x + i);
      *reinterpret_cast<float4*>(b) = *reinterpret_cast<const float4*>(x + half + i);
    }
    const float cs[4] = {c.x, c.y, c.z, c.w}, ss[4] = {sn.x, sn.y, sn.z, sn.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float x1 = ld(a[j]), x2 = ld(b[j]);
      a[j] = st<X>(x1 * cs[j] - x2 * ss[j]);
      b[j] = st<X>(x2 * cs[j] + x1 * ss[j]);
    }
    if constexpr (sizeof(X) == 2) {
      *reinterpret_cast<uint2*>(x + i) = *reinterpret_cast<const uint2*>(a);
      *reinterpret_cast<uint2*>(x + half + i) = *reinterpret_cast<const uint2*>(b);
    } else {
      *reinterpret_cast<float4*>(x + i) = *reinterpret_cast<const float4*>(a);
      *reinterpret_cast<float4*>(x + half + i) = *reinterpret_cast<const float4*>(b);
    }
  }
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename X>
__global__ void swiglu_forward_kernel(X* out, const X* inp, int64_t N, int F) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < N * F;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = k / F, i = k % F;
    const float g = ld(inp[n * 2 * F + i]), u = ld(inp[n * 2 * F + F + i]);
    out[k] = st<X>(g * sigmoidf(g) * u);
  }
}

template <typename X>
__global__ void swiglu_backward_kernel(X* dinp, const X* inp, const X* dout, int64_t N, int F) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < N * F;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = k / F, i = k % F;
    const float g = ld(inp[n * 2 * F + i]), u = ld(inp[n * 2 * F + F + i]), d = ld(dout[k]);
    const float sg = sigmoidf(g);
    dinp[n * 2 * F + i] = st<X>(d * u * (sg * (1.0f + g * (1.0f - sg))));
    dinp[n * 2 * F + F + i] = st<X>(d * g * sg);
  }
}

// The same, 16 bytes of each operand a thread (kV = 16 / sizeof(X) values of a row; F a multiple of kV, every pointer
// 16-byte aligned): SwiGLU is memory-bound (at Llama-3.2-1B's shape it moves 3 F bf16 values a row forward, 5 F
// backward), and one scalar load a value with a 64-bit division an element left it at half the copy bandwidth. The
// arithmetic of each value is the scalar kernels', so both give the same bits.
template <typename X>
__global__ void swiglu_forward_vec_kernel(X* __restrict__ out, const X* __restrict__ inp, int64_t N, int F) {
  constexpr int kV = 16 / sizeof(X);
  const int fv = F / kV;  // vectors in a row of out
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < N * fv;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = k / fv;
    const int i = static_cast<int>(k - n * fv) * kV;
    const int4 rg = *reinterpret_cast<const int4*>(inp + n * 2 * F + i);
    const int4 ru = *reinterpret_cast<const int4*>(inp + n * 2 * F + F + i);
    const X* eg = reinterpret_cast<const X*>(&rg);
    const X* eu = reinterpret_cast<const X*>(&ru);
    int4 o;
    X* eo = reinterpret_cast<X*>(&o);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float g = ld(eg[j]), u = ld(eu[j]);
      eo[j] = st<X>(g * sigmoidf(g) * u);
    }
    *reinterpret_cast<int4*>(out + k * kV) = o;
  }
}

template <typename X>
__global__ void swiglu_backward_vec_kernel(X* dinp, const X* inp, const X* __restrict__ dout, int64_t N, int F) {
  // dinp may be inp itself (Backend::swiglu_backward): each thread reads its values before writing them.
  constexpr int kV = 16 / sizeof(X);
  const int fv = F / kV;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < N * fv;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = k / fv;
    const int i = static_cast<int>(k - n * fv) * kV;
    const int4 rg = *reinterpret_cast<const int4*>(inp + n * 2 * F + i);
    const int4 ru = *reinterpret_cast<const int4*>(inp + n * 2 * F + F + i);
    const int4 rd = *reinterpret_cast<const int4*>(dout + k * kV);
    const X* eg = reinterpret_cast<const X*>(&rg);
    const X* eu = reinterpret_cast<const X*>(&ru);
    const X* ed = reinterpret_cast<const X*>(&rd);
    int4 og, ou;
    X* dg = reinterpret_cast<X*>(&og);
    X* du = reinterpret_cast<X*>(&ou);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float g = ld(eg[j]), u = ld(eu[j]), d = ld(ed[j]);
      const float sg = sigmoidf(g);
      dg[j] = st<X>(d * u * (sg * (1.0f + g * (1.0f - sg))));
      du[j] = st<X>(d * g * sg);
    }
    *reinterpret_cast<int4*>(dinp + n * 2 * F + i) = og;
    *reinterpret_cast<int4*>(dinp + n * 2 * F + F + i) = ou;
  }
}

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = st<D>(ld(src[i]));
}

}  // namespace

template <typename X>
void gelu_forward(cudaStream_t s, X* out, const X* inp, int64_t n) {
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void gelu_backward(cudaStream_t s, X* dinp, const X* inp, const X* dout, int64_t n) {
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void gelu_backward_scale(cudaStream_t s, X* d, const X* pre, int64_t n) {
  gelu_backward_scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(d, pre, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void residual_forward(cudaStream_t s, X* out, const X* a, const X* b, int64_t n) {
  constexpr int kV = 16 / sizeof(X);
  if (n % kV == 0 && dev::aligned16({out, a, b})) {
    residual_forward_vec_kernel<X><<<blocks_for(n / kV), kThreads, 0, s>>>(out, a, b, n / kV);
    TT_CUDA_CHECK_LAUNCH();
    return;
  }
  residual_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void rope(cudaStream_t s, X* qkv, const float* table, const int32_t* positions, int B, int T, int H, int KV, int hs,
          bool inverse) {
  const int64_t pairs = static_cast<int64_t>(B) * T * (H + KV) * (hs / 2);
  if (pairs == 0) return;
  // Four pairs a thread where the rows allow it: half a multiple of 4 and qkv 16-byte aligned (then every head's
  // halves are 8-byte (bf16) or 16-byte (f32) aligned, hs being a multiple of 8), the table 16-byte aligned.
  if ((hs / 2) % 4 == 0 && hs % 8 == 0 && dev::aligned16({qkv, table})) {
    rope4_kernel<<<blocks_for(pairs / 4), kThreads, 0, s>>>(qkv, table, positions, T, H, KV, hs, inverse, pairs / 4);
    TT_CUDA_CHECK_LAUNCH();
    return;
  }
  rope_kernel<<<blocks_for(pairs), kThreads, 0, s>>>(qkv, table, positions, T, H, KV, hs, inverse, pairs);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void swiglu_forward(cudaStream_t s, X* out, const X* inp, int64_t N, int F) {
  if (N * F == 0) return;
  constexpr int kV = 16 / sizeof(X);
  if (F % kV == 0 && dev::aligned16({out, inp})) {
    swiglu_forward_vec_kernel<X><<<blocks_for(N * F / kV), kThreads, 0, s>>>(out, inp, N, F);
    TT_CUDA_CHECK_LAUNCH();
    return;
  }
  swiglu_forward_kernel<<<blocks_for(N * F), kThreads, 0, s>>>(out, inp, N, F);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename X>
void swiglu_backward(cudaStream_t s, X* dinp, const X* inp, const X* dout, int64_t N, int F) {
  if (N * F == 0) return;
  constexpr int kV = 16 / sizeof(X);
  if (F % kV == 0 && dev::aligned16({dinp, inp, dout})) {
    swiglu_backward_vec_kernel<X><<<blocks_for(N * F / kV), kThreads, 0, s>>>(dinp, inp, dout, N, F);
    TT_CUDA_CHECK_LAUNCH();
    return;
  }
  swiglu_backward_kernel<<<blocks_for(N * F), kThreads, 0, s>>>(dinp, inp, dout, N, F);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename D, typename S>
void convert(cudaStream_t s, D* dst, const S* src, int64_t n) {
  convert_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, n);
  TT_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(X) \
  template void gelu_forward<X>(cudaStream_t, X*, const X*, int64_t); \
  template void gelu_backward<X>(cudaStream_t, X*, const X*, const X*, int64_t); \
  template void residual_forward<X>(cudaStream_t, X*, const X*, const X*, int64_t); \
  template void gelu_backward_scale<X>(cudaStream_t, X*, const X*, int64_t); \
  template void rope<X>(cudaStream_t, X*, const float*, const int32_t*, int, int, int, int, int, bool); \
  template void swiglu_forward<X>(cudaStream_t, X*, const X*, int64_t, int); \
  template void swiglu_backward<X>(cudaStream_t, X*, const X*, const X*, int64_t, int);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE
template void convert<float, bf16>(cudaStream_t, float*, const bf16*, int64_t);
template void convert<bf16, float>(cudaStream_t, bf16*, const float*, int64_t);

}  // namespace tt::cuda
