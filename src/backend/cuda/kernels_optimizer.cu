// backend/cuda/kernels_optimizer.cu: the optimizer: the gradient norm (sum of squares in a fixed order) and AdamW;
// kernels and their launchers (kernels.cuh).
#include "backend/cuda/kernels_common.cuh"

namespace tt::cuda {
namespace {

constexpr int kSumBlocks = 512;

__device__ __forceinline__ double squares(const float4& v) {
  return static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
         static_cast<double>(v.w) * v.w;
}

// A block's share of the sum of squares, in a fixed order (kSumBlocks blocks: the same partial sums every run). With
// vec (x 16-byte aligned), two 16-byte loads a thread in flight a turn: with one 4-byte load a thread the kernel could
// not keep enough bytes in flight to reach the memory's bandwidth (the gradient norm reads every gradient once a
// step: 13.7 GB at d4096).
__global__ void sum_squares_partial_kernel(double* partial, const float* x, int64_t n, bool vec) {
  double s = 0.0;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t scalar_from = 0;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n4 = n / 4;
    int64_t i = first;
    for (; i + stride < n4; i += 2 * stride) {
      const float4 a = x4[i], b = x4[i + stride];
      s += squares(a);
      s += squares(b);
    }
    if (i < n4) s += squares(x4[i]);
    scalar_from = 4 * n4;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  s = block_reduce(s, Add{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_finish_kernel(float* out, const double* partial, int n) {
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_reduce(s, Add{}, 0.0);
  if (threadIdx.x == 0) out[0] = static_cast<float>(s);
}

// AdamW, one element; the same expression as the CPU backend's (host/adamw_scalar.h), so results match bit for bit.
struct AdamWScalars {
  float step_size, bc2_sqrt, decay, b2, one_minus_b1, one_minus_b2, eps;
  bool do_decay;
};
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& a) {
  if (a.do_decay) p *= a.decay;
  m = m + a.one_minus_b1 * (g - m);
  v = v * a.b2 + a.one_minus_b2 * g * g;
  p = p - a.step_size * (m / (sqrtf(v) / a.bc2_sqrt + a.eps));
}
__device__ __forceinline__ float adamw_clip(const float* grad_norm_sq, float grad_clip) {
  return grad_clip > 0.0f ? fminf(grad_clip / (sqrtf(grad_norm_sq[0]) + 1e-6f), 1.0f) : 1.0f;
}

// The pieces of one update with and without weight decay (AdamWArgs::piece_end, decay_bits), a kernel parameter.
struct AdamWPieces {
  int count = 1;  // at least one: the last piece ends at n
  uint32_t decay_bits = 1;
  int64_t end[AdamWArgs::kMaxPieces] = {};
};
// The piece holding element i, searched forward from piece k: a thread's elements only grow, so its cursor does too.
__device__ __forceinline__ int adamw_piece(const AdamWPieces& pc, int64_t i, int k) {
  while (k < pc.count - 1 && pc.end[k] <= i) ++k;
  return k;
}
__device__ __forceinline__ AdamWScalars adamw_in_piece(AdamWScalars a, const AdamWPieces& pc, int k) {
  a.do_decay = a.do_decay && ((pc.decay_bits >> k) & 1u) != 0;
  return a;
}

// Elements first, first + stride, ... below n, one at a time; out (may be null) receives the new parameters.
template <typename O>
__device__ __forceinline__ void adamw_elements(float* param, const float* grad, float* m, float* v, O* out,
                                               int64_t first, int64_t stride, int64_t n, float clip,
                                               const AdamWScalars& a, const AdamWPieces& pc) {
  int k = 0;
  for (int64_t i = first; i < n; i += stride) {
    k = adamw_piece(pc, i, k);
    float p = param[i], mi = m[i], vi = v[i];
    adamw_element(p, grad[i] * clip, mi, vi, adamw_in_piece(a, pc, k));
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    if (out != nullptr) out[i] = st<O>(p);
  }
}

// Any alignment: one element a thread a turn.
template <typename O>
__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, O* __restrict__ out, int64_t n, const float* grad_norm_sq,
                             float grad_clip, AdamWScalars a, AdamWPieces pc) {
  adamw_elements(param, grad, m, v, out, blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x,
                 static_cast<int64_t>(gridDim.x) * blockDim.x, n, adamw_clip(grad_norm_sq, grad_clip), a, pc);
}

template <typename O>
struct alignas(4 * sizeof(O)) Four {
  O x[4];
};

// All four arrays 16-byte aligned (and out to four of its elements): four elements a thread a turn in 16-byte loads
// and stores (the update is bound by memory: 28 bytes an element, 30 with a bf16 copy); the last n % 4 elements one
// at a time.
template <typename O>
__global__ void adamw_vec4_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                                  float* __restrict__ v, O* __restrict__ out, int64_t n, const float* grad_norm_sq,
                                  float grad_clip, AdamWScalars a, AdamWPieces pc) {
  const float clip = adamw_clip(grad_norm_sq, grad_clip);
  const int64_t n4 = n / 4;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int k = 0;
  for (int64_t i = first; i < n4; i += stride) {
    float4 p = reinterpret_cast<const float4*>(param)[i];
    const float4 g = reinterpret_cast<const float4*>(grad)[i];
    float4 mi = reinterpret_cast<const float4*>(m)[i];
    float4 vi = reinterpret_cast<const float4*>(v)[i];
    k = adamw_piece(pc, 4 * i, k);
    adamw_element(p.x, g.x * clip, mi.x, vi.x, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 1, k);
    adamw_element(p.y, g.y * clip, mi.y, vi.y, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 2, k);
    adamw_element(p.z, g.z * clip, mi.z, vi.z, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 3, k);
    adamw_element(p.w, g.w * clip, mi.w, vi.w, adamw_in_piece(a, pc, k));
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
    reinterpret_cast<float4*>(param)[i] = p;
    if (out != nullptr) reinterpret_cast<Four<O>*>(out)[i] = Four<O>{{st<O>(p.x), st<O>(p.y), st<O>(p.z), st<O>(p.w)}};
  }
  adamw_elements(param, grad, m, v, out, 4 * n4 + first, stride, n, clip, a, pc);
}

}  // namespace

void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const float* x, int64_t n) {
  TT_CHECK(kSumBlocks * sizeof(double) <= scratch.bytes, "sum_squares: scratch too small");
  double* partial = static_cast<double*>(scratch.ptr);
  sum_squares_partial_kernel<<<kSumBlocks, kThreads, 0, s>>>(partial, x, n, dev::aligned16({x}));
  TT_CUDA_CHECK_LAUNCH();
  sum_squares_finish_kernel<<<1, kSumBlocks, 0, s>>>(out, partial, kSumBlocks);
  TT_CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void sum_in_order_kernel(float* out, const float* parts, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(parts[i]);
  out[0] = static_cast<float>(s);
}
}  // namespace

void sum_in_order(cudaStream_t s, float* out, const float* parts, int64_t n) {
  sum_in_order_kernel<<<1, 1, 0, s>>>(out, parts, n);
  TT_CUDA_CHECK_LAUNCH();
}

template <typename O>
void adamw_update(cudaStream_t s, float* param, const float* grad, float* m, float* v, O* out, int64_t n,
                  const float* grad_norm_sq, const AdamWArgs& args) {
  // Scalars exactly as the CPU backend computes them (in double, then rounded once).
  const double beta1 = args.beta1, beta2 = args.beta2, lr = args.lr, step = static_cast<double>(args.step);
  const double bc1 = 1.0 - std::pow(beta1, step);
  const double bc2 = 1.0 - std::pow(beta2, step);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - lr * static_cast<double>(args.weight_decay));
  const AdamWScalars a{step_size,       bc2_sqrt, decay, args.beta2, static_cast<float>(1.0 - beta1),
                       static_cast<float>(1.0 - beta2), args.eps, args.weight_decay != 0.0f};
  AdamWPieces pc;
  if (args.pieces > 0) {
    pc.count = args.pieces;
    pc.decay_bits = args.decay_bits;
    for (int i = 0; i < args.pieces; ++i) pc.end[i] = args.piece_end[static_cast<size_t>(i)];
  } else {
    pc.end[0] = n;
  }
  const bool aligned = ((reinterpret_cast<uintptr_t>(param) | reinterpret_cast<uintptr_t>(grad) |
                         reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(out) & (4 * sizeof(O) - 1)) == 0;
  if (aligned) {
    adamw_vec4_kernel<O><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(param, grad, m, v, out, n, grad_norm_sq,
                                                                       args.grad_clip, a, pc);
  } else {
    adamw_kernel<O><<<blocks_for(n), kThreads, 0, s>>>(param, grad, m, v, out, n, grad_norm_sq, args.grad_clip, a, pc);
  }
  TT_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

template void adamw_update<float>(cudaStream_t, float*, const float*, float*, float*, float*, int64_t, const float*,
                                  const AdamWArgs&);
template void adamw_update<bf16>(cudaStream_t, float*, const float*, float*, float*, bf16*, int64_t, const float*,
                                 const AdamWArgs&);

}  // namespace tt::cuda
