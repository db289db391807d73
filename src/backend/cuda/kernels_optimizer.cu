// backend/cuda/kernels_optimizer.cu: the optimizer: the gradient norm (sum of squares in a fixed order) and AdamW;
// kernels and their launchers (kernels.cuh).
#include "backend/cuda/kernels_common.cuh"

namespace tt::cuda {
namespace {

constexpr int kSumBlocks = 512;

// The squares of a 16-byte vector of X's elements (four f32 or eight bf16), added left to right.
template <typename X>
__device__ __forceinline__ double squares(const int4& raw) {
  const X* e = reinterpret_cast<const X*>(&raw);
  double s = 0.0;
#pragma unroll
  for (int k = 0; k < static_cast<int>(16 / sizeof(X)); ++k) {
    const double v = ld(e[k]);
    s += v * v;
  }
  return s;
}

// A block's share of the sum of squares, in a fixed order (kSumBlocks blocks: the same partial sums every run). With
// vec (x 16-byte aligned), two 16-byte loads a thread in flight a turn: with one 4-byte load a thread the kernel could
// not keep enough bytes in flight to reach the memory's bandwidth (the gradient norm reads every gradient once a
// step: 13.7 GB at d4096). X: f32, or bf16 (Note [bf16 gradients]).
template <typename X>
__global__ void sum_squares_partial_kernel(double* partial, const X* x, int64_t n, bool vec) {
  constexpr int64_t kVec = 16 / sizeof(X);
  double s = 0.0;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t scalar_from = 0;
  if (vec) {
    const int4* xv = reinterpret_cast<const int4*>(x);
    const int64_t nv = n / kVec;
    int64_t i = first;
    for (; i + stride < nv; i += 2 * stride) {
      const int4 a = xv[i], b = xv[i + stride];
      s += squares<X>(a);
      s += squares<X>(b);
    }
    if (i < nv) s += squares<X>(xv[i]);
    scalar_from = kVec * nv;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) {
    const double v = ld(x[i]);
    s += v * v;
  }
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
// Each operation rounded on its own (the _rn intrinsics): nvcc contracts a product and a sum into one fused
// multiply-add where it sees them (--fmad, on by default), the CPU backend never does (-ffp-contract=off), and where
// it fused depended on the code around (the gradient's clip product with g - m, for one): the same gradient values
// in f32 and in bf16 (Note [bf16 gradients]) updated to different bits (GPU test Bf16Gradients.*, 2026-12-07).
struct AdamWScalars {
  float step_size, bc2_sqrt, decay, b2, one_minus_b1, one_minus_b2, eps;
  bool do_decay;
};
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& a) {
  if (a.do_decay) p = __fmul_rn(p, a.decay);
  m = __fadd_rn(m, __fmul_rn(a.one_minus_b1, __fsub_rn(g, m)));
  v = __fadd_rn(__fmul_rn(v, a.b2), __fmul_rn(__fmul_rn(a.one_minus_b2, g), g));
  p = __fsub_rn(p, __fmul_rn(a.step_size, __fdiv_rn(m, __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bc2_sqrt), a.eps))));
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

// Note [master in two halves] (core/bf16.h) on the device: the high half (nearest, ties away from zero) and the
// master from its halves, as core/bf16.h computes them.
__device__ __forceinline__ uint16_t high_half(float p) {
  return static_cast<uint16_t>((__float_as_uint(p) + 0x8000u) >> 16);
}
__device__ __forceinline__ float join_halves(uint16_t high, uint16_t low) {
  return __uint_as_float((static_cast<uint32_t>(high) << 16) +
                         static_cast<uint32_t>(static_cast<int32_t>(static_cast<int16_t>(low))));
}

// Where the update reads and writes the master: an f32 array with an optional copy (f32, or bf16: the high half),
// or the two halves (SplitMaster). load/store one element; load4/store4 four from element 4 i (aligned(): to 16
// bytes of f32, 8 of halves).
template <typename O>
struct F32Master {
  float* param;
  O* out;  // may be null
  __device__ float load(int64_t i) const { return param[i]; }
  __device__ void store(int64_t i, float p) const {
    param[i] = p;
    if (out != nullptr) out[i] = copy_of(p);
  }
  __device__ float4 load4(int64_t i) const { return reinterpret_cast<const float4*>(param)[i]; }
  __device__ void store4(int64_t i, float4 p) const {
    reinterpret_cast<float4*>(param)[i] = p;
    if (out != nullptr)
      reinterpret_cast<Four*>(out)[i] = Four{{copy_of(p.x), copy_of(p.y), copy_of(p.z), copy_of(p.w)}};
  }
  static __device__ O copy_of(float p) {
    if constexpr (std::is_same_v<O, float>) return p;
    else return __ushort_as_bfloat16(high_half(p));
  }
  struct alignas(4 * sizeof(O)) Four {
    O x[4];
  };
  bool aligned() const {
    return (reinterpret_cast<uintptr_t>(param) & 15) == 0 &&
           (reinterpret_cast<uintptr_t>(out) & (4 * sizeof(O) - 1)) == 0;
  }
};
struct SplitMaster {
  uint16_t* low;
  uint16_t* high;
  __device__ float load(int64_t i) const { return join_halves(high[i], low[i]); }
  __device__ void store(int64_t i, float p) const {
    const uint16_t h = high_half(p);
    high[i] = h;
    low[i] = static_cast<uint16_t>(__float_as_uint(p) - (static_cast<uint32_t>(h) << 16));
  }
  __device__ float4 load4(int64_t i) const {
    const ushort4 h = reinterpret_cast<const ushort4*>(high)[i], l = reinterpret_cast<const ushort4*>(low)[i];
    return make_float4(join_halves(h.x, l.x), join_halves(h.y, l.y), join_halves(h.z, l.z), join_halves(h.w, l.w));
  }
  __device__ void store4(int64_t i, float4 p) const {
    const ushort4 h = make_ushort4(high_half(p.x), high_half(p.y), high_half(p.z), high_half(p.w));
    const auto lo = [](float x, uint16_t hx) {
      return static_cast<uint16_t>(__float_as_uint(x) - (static_cast<uint32_t>(hx) << 16));
    };
    reinterpret_cast<ushort4*>(high)[i] = h;
    reinterpret_cast<ushort4*>(low)[i] = make_ushort4(lo(p.x, h.x), lo(p.y, h.y), lo(p.z, h.z), lo(p.w, h.w));
  }
  bool aligned() const { return ((reinterpret_cast<uintptr_t>(low) | reinterpret_cast<uintptr_t>(high)) & 7) == 0; }
};

// A gradient element, and four from element 4 i (Note [bf16 gradients]: f32 or bf16).
__device__ __forceinline__ float grad_at(const float* g, int64_t i) { return g[i]; }
__device__ __forceinline__ float grad_at(const bf16* g, int64_t i) { return __bfloat162float(g[i]); }
__device__ __forceinline__ float4 grad4_at(const float* g, int64_t i) { return reinterpret_cast<const float4*>(g)[i]; }
__device__ __forceinline__ float4 grad4_at(const bf16* g, int64_t i) {
  const uint2 raw = reinterpret_cast<const uint2*>(g)[i];
  const bf16* e = reinterpret_cast<const bf16*>(&raw);
  return make_float4(__bfloat162float(e[0]), __bfloat162float(e[1]), __bfloat162float(e[2]), __bfloat162float(e[3]));
}

// Elements first, first + stride, ... below n, one at a time.
template <typename M, typename G>
__device__ __forceinline__ void adamw_elements(const M& master, const G* grad, float* m, float* v, int64_t first,
                                               int64_t stride, int64_t n, float clip, const AdamWScalars& a,
                                               const AdamWPieces& pc) {
  int k = 0;
  for (int64_t i = first; i < n; i += stride) {
    k = adamw_piece(pc, i, k);
    float p = master.load(i), mi = m[i], vi = v[i];
    adamw_element(p, __fmul_rn(grad_at(grad, i), clip), mi, vi, adamw_in_piece(a, pc, k));
    m[i] = mi;
    v[i] = vi;
    master.store(i, p);
  }
}

// Any alignment: one element a thread a turn.
template <typename M, typename G>
__global__ void adamw_kernel(M master, const G* __restrict__ grad, float* __restrict__ m, float* __restrict__ v,
                             int64_t n, const float* grad_norm_sq, float grad_clip, AdamWScalars a, AdamWPieces pc) {
  adamw_elements(master, grad, m, v, blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x,
                 static_cast<int64_t>(gridDim.x) * blockDim.x, n, adamw_clip(grad_norm_sq, grad_clip), a, pc);
}

// grad, m and v 16-byte aligned and the master's arrays aligned(): four elements a thread a turn in vector loads
// and stores (the update is bound by memory: 28 bytes an element with an f32 master, 30 with its bf16 copy, 28 in
// two halves); the last n % 4 elements one at a time.
template <typename M, typename G>
__global__ void adamw_vec4_kernel(M master, const G* __restrict__ grad, float* __restrict__ m,
                                  float* __restrict__ v, int64_t n, const float* grad_norm_sq, float grad_clip,
                                  AdamWScalars a, AdamWPieces pc) {
  const float clip = adamw_clip(grad_norm_sq, grad_clip);
  const int64_t n4 = n / 4;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int k = 0;
  for (int64_t i = first; i < n4; i += stride) {
    float4 p = master.load4(i);
    const float4 g = grad4_at(grad, i);
    float4 mi = reinterpret_cast<const float4*>(m)[i];
    float4 vi = reinterpret_cast<const float4*>(v)[i];
    k = adamw_piece(pc, 4 * i, k);
    adamw_element(p.x, __fmul_rn(g.x, clip), mi.x, vi.x, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 1, k);
    adamw_element(p.y, __fmul_rn(g.y, clip), mi.y, vi.y, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 2, k);
    adamw_element(p.z, __fmul_rn(g.z, clip), mi.z, vi.z, adamw_in_piece(a, pc, k));
    k = adamw_piece(pc, 4 * i + 3, k);
    adamw_element(p.w, __fmul_rn(g.w, clip), mi.w, vi.w, adamw_in_piece(a, pc, k));
    reinterpret_cast<float4*>(m)[i] = mi;
    reinterpret_cast<float4*>(v)[i] = vi;
    master.store4(i, p);
  }
  adamw_elements(master, grad, m, v, 4 * n4 + first, stride, n, clip, a, pc);
}

// The scalars and pieces of an update, then the launch of the kernel its alignment allows.
template <typename M, typename G>
void adamw_launch(cudaStream_t s, const M& master, const G* grad, float* m, float* v, int64_t n,
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
  const bool aligned = ((reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v)) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(grad) & (4 * sizeof(G) - 1)) == 0 && master.aligned();
  if (aligned) {
    adamw_vec4_kernel<M, G><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>(master, grad, m, v, n, grad_norm_sq,
                                                                       args.grad_clip, a, pc);
  } else {
    adamw_kernel<M, G><<<blocks_for(n), kThreads, 0, s>>>(master, grad, m, v, n, grad_norm_sq, args.grad_clip, a, pc);
  }
  TT_CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace {
template <typename X>
void sum_squares_of(cudaStream_t s, const Scratch& scratch, float* out, const X* x, int64_t n) {
  TT_CHECK(kSumBlocks * sizeof(double) <= scratch.bytes, "sum_squares: scratch too small");
  double* partial = static_cast<double*>(scratch.ptr);
  sum_squares_partial_kernel<X><<<kSumBlocks, kThreads, 0, s>>>(partial, x, n,
                                                                reinterpret_cast<uintptr_t>(x) % 16 == 0);
  TT_CUDA_CHECK_LAUNCH();
  sum_squares_finish_kernel<<<1, kSumBlocks, 0, s>>>(out, partial, kSumBlocks);
  TT_CUDA_CHECK_LAUNCH();
}
}  // namespace

void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const float* x, int64_t n) {
  sum_squares_of(s, scratch, out, x, n);
}
void sum_squares(cudaStream_t s, const Scratch& scratch, float* out, const bf16* x, int64_t n) {
  sum_squares_of(s, scratch, out, x, n);
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

template <typename O, typename G>
void adamw_update(cudaStream_t s, float* param, const G* grad, float* m, float* v, O* out, int64_t n,
                  const float* grad_norm_sq, const AdamWArgs& args) {
  adamw_launch(s, F32Master<O>{param, out}, grad, m, v, n, grad_norm_sq, args);
}

template <typename G>
void adamw_update_split(cudaStream_t s, uint16_t* low, uint16_t* high, const G* grad, float* m, float* v,
                        int64_t n, const float* grad_norm_sq, const AdamWArgs& args) {
  adamw_launch(s, SplitMaster{low, high}, grad, m, v, n, grad_norm_sq, args);
}

// ---------------------------------------------------------------------------------------------------------------------
// instantiations

#define TT_CUDA_INSTANTIATE(G)                                                                                  \
  template void adamw_update<float, G>(cudaStream_t, float*, const G*, float*, float*, float*, int64_t, const float*,  \
                                       const AdamWArgs&);                                                              \
  template void adamw_update<bf16, G>(cudaStream_t, float*, const G*, float*, float*, bf16*, int64_t, const float*,    \
                                      const AdamWArgs&);                                                               \
  template void adamw_update_split<G>(cudaStream_t, uint16_t*, uint16_t*, const G*, float*, float*, int64_t,          \
                                      const float*, const AdamWArgs&);

TT_CUDA_INSTANTIATE(float)
TT_CUDA_INSTANTIATE(bf16)
#undef TT_CUDA_INSTANTIATE

}  // namespace tt::cuda
