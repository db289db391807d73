// host/adamw: AdamW on the host, the library of host kernels below the backends: the CPU backend's device
// optimizer runs it for float tensors, and the CPU optimizer (exec/optimizer.h) on its host stream. Vectorised with
// AVX-512 or AVX2 intrinsics where the build targets them (adamw.cc, its own file so that the tests can build it for
// each instruction set), split over the OpenMP threads, and bit-identical to the scalar formula of adamw_scalar.h.
//
//   host::adamw_update_f32(param, grad, m, v, /*out_bf16=*/nullptr, n, norm_sq, lr, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f);
#pragma once

#include <cstdint>

namespace tt::host {

// The float update (what the CPU backend's adamw_update<float> runs), vectorised (AVX-512 or AVX2, as built) and split over the OpenMP
// threads, bit-identical to the scalar formula. out_bf16, when not null, receives every new parameter's high half
// (bf16, nearest with ties away: Note [master in two halves] in core/bf16.h): the compute copy the CPU optimizer
// uploads, produced in the same pass.
void adamw_update_f32(float* param, const float* grad, float* m, float* v, uint16_t* out_bf16, int64_t n,
                      float grad_norm_sq, float lr, float beta1, float beta2, float eps, float weight_decay,
                      int64_t step, float grad_clip);
// The same update reading the state from one place and writing it to another (the CPU optimizer's speculative
// update, exec/optimizer.h, keeps the state it started from): param, m and v are read from the *_in arrays and written
// to the *_out arrays, which may be the same.
struct AdamWArrays {
  const float* param_in;
  const float* grad;
  const float* m_in;
  const float* v_in;
  float* param_out;
  float* m_out;
  float* v_out;
  uint16_t* out_bf16 = nullptr;
};
// threads: the OpenMP team's size (0: OpenMP's default for the calling thread).
void adamw_update_f32(const AdamWArrays& arrays, int64_t n, float grad_norm_sq, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int64_t step, float grad_clip, int threads = 0);
// The factor the update scales the gradient by: min(1, grad_clip / (norm + 1e-6)), or 1 without clipping; computed
// exactly as the update computes it.
float adamw_clip_factor(float grad_norm_sq, float grad_clip);

// Note [gradients summed on the host] (plan/schedule.h): sum[i] += in[i], and the sum of squares of x in double
// over fixed chunks of 2^16 elements added in order (the same bits whatever the thread count); split over `threads`
// OpenMP threads (0: OpenMP's default) past a size where that pays.
void add_f32(float* sum, const float* in, int64_t n, int threads = 0);
float sum_squares_f32(const float* x, int64_t n, int threads = 0);

// The CPU optimizer's thread count: `requested` when > 0; else OpenMP's (OMP_NUM_THREADS when set, otherwise every
// core this process may run on), less one beside a GPU (Note [host threads beside a GPU]).
int optimizer_threads(int requested, bool beside_gpu);

// Note [host threads beside a GPU]
// Beside a GPU, one host thread drives the device: it launches the next step's kernels and waits (spinning, CUDA's
// default on a machine with more cores than GPUs) for each step's readback, while the CPU optimizer's update runs on
// the host stream. With an OpenMP team of every core, one update thread shares its core with that thread; the
// update's ranges are static, so the whole update waits for that one. So beside a GPU the update leaves one core
// free: one thread fewer costs less than one thread slowed (bench/perf/host_opt_gpu.sh;
// docs/benchmarks/2026-12-01-h200-perf-model/).

}  // namespace tt::host
