// host/adamw: the float AdamW of host/adamw.h, vectorised with AVX-512 or AVX2 intrinsics where the build targets
// them and split over the OpenMP threads. Its own file so that the tests can build it for each instruction set
// (tests/CMakeLists.txt).
#include <algorithm>
#include <cstdint>
#include <omp.h>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "host/adamw.h"
#include "host/adamw_scalar.h"
#include "core/bf16.h"

namespace tt::host {
namespace {

// GCC 12 warns about the self-initialised "undefined" vectors inside its own intrinsics headers (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The vector operations of the update, for the instruction set the build targets: one loop body (adamw_range_f32)
// for both. Each is the intrinsic the loop used before, in the same order, so the bits do not depend on the width.
#if defined(__AVX512F__)
struct Simd {
  using F = __m512;
  static constexpr int kWidth = 16;
  static constexpr uintptr_t kF32Align = 64, kBf16Align = 32;  // what streaming stores of kWidth elements need
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static void store(float* p, F x, bool stream) {
    if (stream) _mm512_stream_ps(p, x);
    else _mm512_storeu_ps(p, x);
  }
  // x's high halves (Note [master in two halves] in core/bf16.h: nearest, ties away), kWidth of them at out.
  static void store_bf16(uint16_t* out, F x, bool stream) {
    const __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(0x8000)), 16);
    if (stream) _mm256_stream_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(h));
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(h));
  }
};
#elif defined(__AVX2__)
struct Simd {
  using F = __m256;
  static constexpr int kWidth = 8;
  static constexpr uintptr_t kF32Align = 32, kBf16Align = 16;
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static void store(float* p, F x, bool stream) {
    if (stream) _mm256_stream_ps(p, x);
    else _mm256_storeu_ps(p, x);
  }
  static void store_bf16(uint16_t* out, F x, bool stream) {  // as Simd's above, 8 of them
    const __m256i h = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(x), _mm256_set1_epi32(0x8000)), 16);
    // packus works within 128-bit lanes: [h0-3 h0-3 h4-7 h4-7] -> qwords 0 and 2 hold h0-3 and h4-7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0xd8);
    if (stream) _mm_stream_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
    else _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
  }
};
#endif

// float elements [begin, end): AVX-512 or AVX2 where the build targets them (-march=native), 16 or 8 at a time, and
// the rest one by one; each new parameter's high half (its compute copy: Note [master in two halves] in core/bf16.h)
// into out_bf16 when it is not null.
void adamw_range_f32(const AdamWArrays& a, int64_t begin, int64_t end, const AdamWScalars<float>& s) {
  const float *param = a.param_in, *grad = a.grad, *m = a.m_in, *v = a.v_in;
  float *param_out = a.param_out, *m_out = a.m_out, *v_out = a.v_out;
  uint16_t* out_bf16 = a.out_bf16;
  int64_t i = begin;
  // Streaming (non-temporal) stores for what is only written, which then needs no read of its lines first: the bf16
  // copy, and the new state when it goes to other arrays (the speculative update's second set). The update is bound
  // by memory bandwidth. They need aligned addresses: the elements before every such array is at a vector boundary
  // go one by one, and arrays that do not line up there keep the ordinary stores. The values are the same.
  const bool out_of_place = param_out != param;
#if defined(__AVX2__) || defined(__AVX512F__)
  constexpr uintptr_t kF32Align = Simd::kF32Align, kBf16Align = Simd::kBf16Align;
#else
  constexpr uintptr_t kF32Align = 0, kBf16Align = 0;
#endif
  const auto on = [](const void* p, uintptr_t align) { return (reinterpret_cast<uintptr_t>(p) & (align - 1)) == 0; };
  const auto state_on = [&](int64_t k) {
    return on(param_out + k, kF32Align) && on(m_out + k, kF32Align) && on(v_out + k, kF32Align);
  };
  const auto bf16_on = [&](int64_t k) { return out_bf16 != nullptr && on(out_bf16 + k, kBf16Align); };
  bool stream_state = false, stream_bf16 = false;
  if (kF32Align != 0 && (out_of_place || out_bf16 != nullptr)) {
    // One by one up to the boundary that gains most: the state's when it goes elsewhere, else the bf16 copy's.
    for (int k = 0; k < 16 && i < end && !(out_of_place ? state_on(i) : bf16_on(i)); ++k, ++i) {
      const float p = adamw_one(param, grad, m, v, param_out, m_out, v_out, i, s);
      if (out_bf16) out_bf16[i] = bf16_high(p);
    }
    stream_state = out_of_place && state_on(i);
    stream_bf16 = bf16_on(i);
  }
  const bool stream = stream_state || stream_bf16;
#if defined(__AVX2__) || defined(__AVX512F__)
  {
    using V = Simd;
    const V::F clip = V::set1(s.clip), decay = V::set1(s.decay), b2 = V::set1(s.b2), omb1 = V::set1(s.one_minus_b1),
               omb2 = V::set1(s.one_minus_b2), bc2s = V::set1(s.bc2_sqrt), eps = V::set1(s.eps),
               lr = V::set1(s.step_size);
    for (; i + V::kWidth <= end; i += V::kWidth) {
      const V::F g = V::mul(V::load(grad + i), clip);
      V::F p = V::load(param + i);
      if (s.decays) p = V::mul(p, decay);
      const V::F mo = V::load(m + i), vo = V::load(v + i);
      const V::F mi = V::add(mo, V::mul(omb1, V::sub(g, mo)));
      const V::F vi = V::add(V::mul(vo, b2), V::mul(V::mul(omb2, g), g));
      const V::F denom = V::add(V::div(V::sqrt(vi), bc2s), eps);
      p = V::sub(p, V::mul(lr, V::div(mi, denom)));
      V::store(m_out + i, mi, stream_state);
      V::store(v_out + i, vi, stream_state);
      V::store(param_out + i, p, stream_state);
      if (out_bf16) V::store_bf16(out_bf16 + i, p, stream_bf16);
    }
  }
#endif
  for (; i < end; ++i) {
    const float p = adamw_one(param, grad, m, v, param_out, m_out, v_out, i, s);
    if (out_bf16) out_bf16[i] = bf16_high(p);
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  // Streaming stores are weakly ordered: visible to every other thread, and to the copy engine, before this returns.
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}
#pragma GCC diagnostic pop

// Below this many elements one thread does the whole update (a parallel region costs microseconds).
constexpr int64_t kAdamWParallelMin = int64_t(1) << 15;

}  // namespace

void adamw_update_f32(const AdamWArrays& a, int64_t n, float grad_norm_sq, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int64_t step, float grad_clip, int threads) {
  const AdamWScalars<float> s = adamw_scalars(grad_norm_sq, lr, beta1, beta2, eps, weight_decay, step, grad_clip);
  if (n < kAdamWParallelMin) {
    adamw_range_f32(a, 0, n, s);
    return;
  }
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
  {
    // Ranges in whole 64-byte lines of float, so that no two threads write one cache line (and the vector loop runs
    // on every range but the last).
    const int64_t lines = (n + 15) / 16;
    const int parts = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t base = lines / parts, rem = lines % parts;
    const int64_t b = t * base + std::min<int64_t>(t, rem), e = b + base + (t < rem ? 1 : 0);
    adamw_range_f32(a, b * 16, std::min(e * 16, n), s);
  }
}

void adamw_update_f32(float* param, const float* grad, float* m, float* v, uint16_t* out_bf16, int64_t n,
                      float grad_norm_sq, float lr, float beta1, float beta2, float eps, float weight_decay,
                      int64_t step, float grad_clip) {
  adamw_update_f32(AdamWArrays{param, grad, m, v, param, m, v, out_bf16}, n, grad_norm_sq, lr, beta1, beta2, eps,
                   weight_decay, step, grad_clip);
}

void add_f32(float* sum, const float* in, int64_t n, int threads) {
  if (n < kAdamWParallelMin) {
    for (int64_t i = 0; i < n; ++i) sum[i] += in[i];
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : omp_get_max_threads())
  for (int64_t i = 0; i < n; ++i) sum[i] += in[i];
}

float sum_squares_f32(const float* x, int64_t n, int threads) {
  constexpr int64_t kChunk = int64_t(1) << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : omp_get_max_threads()) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    double s = 0;
    const int64_t e = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < e; ++i) s += static_cast<double>(x[i]) * x[i];
    part[static_cast<size_t>(c)] = s;
  }
  double total = 0;
  for (const double p : part) total += p;
  return static_cast<float>(total);
}

int optimizer_threads(int requested, bool beside_gpu) {
  if (requested > 0) return requested;
  const int all = omp_get_max_threads();  // OMP_NUM_THREADS, else the cores in this process's affinity mask
  return beside_gpu ? std::max(1, all - 1) : std::max(1, all);
}

float adamw_clip_factor(float grad_norm_sq, float grad_clip) {
  return adamw_scalars(grad_norm_sq, 1.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, grad_clip).clip;
}

}  // namespace tt::host
