// host/adamw_scalar: the per-element AdamW arithmetic shared by the scalar update (the CPU backend's kernels.cc, any
// element type) and the vectorised float update (host/adamw.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tt::host {

// The per-step scalars of adamw_update, as PyTorch computes them: in double on the host, then used at the tensor's
// precision.
template <typename T>
struct AdamWScalars {
  T clip, step_size, bc2_sqrt, decay, b2, eps, one_minus_b1, one_minus_b2;
  bool decays;
};

template <typename T>
AdamWScalars<T> adamw_scalars(T grad_norm_sq, float lr, float beta1, float beta2, float eps, float weight_decay,
                              int64_t step, float grad_clip) {
  AdamWScalars<T> s{};
  s.clip = T(1);
  if (grad_clip > 0) {
    const T norm = std::sqrt(grad_norm_sq);
    const T coef = static_cast<T>(grad_clip) / (norm + T(1e-6));
    s.clip = std::min(coef, T(1));
  }
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  s.step_size = static_cast<T>(static_cast<double>(lr) / bc1);
  s.bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  s.decay = static_cast<T>(1.0 - static_cast<double>(lr) * static_cast<double>(weight_decay));
  s.decays = weight_decay != 0.0f;
  s.b2 = static_cast<T>(beta2);
  s.eps = static_cast<T>(eps);
  s.one_minus_b1 = static_cast<T>(1.0 - static_cast<double>(beta1));
  s.one_minus_b2 = static_cast<T>(1.0 - static_cast<double>(beta2));
  return s;
}

// One element, reading the state from (param_in, m_in, v_in) and writing it to (param_out, m_out, v_out), which
// may be the same arrays. The vector bodies (adamw.cc) do exactly these operations in this order (no FMA:
// -ffp-contract=off), so every path gives the same bits.
template <typename T>
inline T adamw_one(const T* param_in, const T* grad, const T* m_in, const T* v_in, T* param_out, T* m_out, T* v_out,
                   int64_t i, const AdamWScalars<T>& s) {
  const T g = grad[i] * s.clip;
  T p = param_in[i];
  if (s.decays) p *= s.decay;
  const T mi = m_in[i] + s.one_minus_b1 * (g - m_in[i]);
  const T vi = v_in[i] * s.b2 + s.one_minus_b2 * g * g;
  m_out[i] = mi;
  v_out[i] = vi;
  const T denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
  p = p - s.step_size * (mi / denom);
  param_out[i] = p;
  return p;
}

}  // namespace tt::host
