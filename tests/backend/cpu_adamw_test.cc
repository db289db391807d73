// The host AdamW (backend/cpu/kernels.h: adamw_update_f32), which the CPU optimizer runs: its vector bodies and its
// split over threads give exactly the bits of the scalar formula, and its bf16 output is the new parameter rounded
// to nearest even. This file is built with -ffp-contract=off, as the kernels are, so that the reference below is
// not contracted into FMAs. tests/CMakeLists.txt also builds it, with host/adamw.cc alone, for AVX2 and for
// plain x86-64 (TT_ADAMW_ISA names the variant), so that every path is tested whatever the build machine has.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <omp.h>

#include "backend/cpu/kernels.h"
#include "host/adamw.h"
#include "core/bf16.h"

namespace tt {
namespace {

// The same bits (memcmp, which must not be given the null data() of empty vectors).
template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

struct Args {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  int64_t step = 7;
  float grad_clip = 1.0f;
};

// PyTorch's AdamW step, one element at a time, written independently of the kernel.
void reference(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
               float norm_sq, const Args& a) {
  float clip = 1.0f;
  if (a.grad_clip > 0) clip = std::min(a.grad_clip / (std::sqrt(norm_sq) + 1e-6f), 1.0f);
  const double bc1 = 1.0 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1.0 - std::pow(double(a.beta2), double(a.step));
  const float step_size = float(double(a.lr) / bc1), bc2_sqrt = float(std::sqrt(bc2));
  const float decay = float(1.0 - double(a.lr) * double(a.weight_decay));
  const float omb1 = float(1.0 - double(a.beta1)), omb2 = float(1.0 - double(a.beta2));
  for (size_t i = 0; i < p.size(); ++i) {
    const float gi = g[i] * clip;
    float pi = p[i];
    if (a.weight_decay != 0.0f) pi *= decay;
    m[i] = m[i] + omb1 * (gi - m[i]);
    v[i] = v[i] * a.beta2 + omb2 * gi * gi;
    p[i] = pi - step_size * (m[i] / (std::sqrt(v[i]) / bc2_sqrt + a.eps));
  }
}

// Parameters, gradients and moments of the sizes the optimizer sees, from a seeded generator.
struct State {
  std::vector<float> p, g, m, v;
};
State random_state(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (int64_t i = 0; i < n; ++i) {
    s.p[i] = dist(rng);
    s.g[i] = dist(rng) * 0.1f;
    s.m[i] = dist(rng) * 0.01f;
    s.v[i] = std::abs(dist(rng)) * 1e-4f;
  }
  return s;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class CpuAdamW : public ::testing::TestWithParam<int64_t> {};

TEST_P(CpuAdamW, VectorAndThreadedMatchTheScalarFormulaBitForBit) {
  const int64_t n = GetParam();
  auto [p, g, m, v] = random_state(n, static_cast<uint32_t>(n) + 1);
  // Values whose bf16 rounding is a tie or a carry (with zero gradient and moments and no decay the update leaves
  // them as they are), and a NaN (a diverged parameter stays a quiet NaN in bf16).
  if (n > 40) {
    // The copy is the high half (Note [master in two halves] in core/bf16.h): ties away from zero.
    const uint32_t special[] = {0x3f808000u,   // exactly half-way between two bf16 values, even below: up
                                0x3f818000u,   // half-way, odd below: up
                                0xbf818000u,   // the same, negative: down
                                0x7f7fffffu,   // the largest float: up to infinity
                                0x3f80c000u};  // above half-way: up
    for (int k = 0; k < 5; ++k) {
      p[3 + k] = std::bit_cast<float>(special[k]);
      g[3 + k] = m[3 + k] = v[3 + k] = 0.0f;
    }
    g[37] = std::numeric_limits<float>::quiet_NaN();
  }
  const float norm_sq = 4.0f;  // norm 2 > clip 1: the clip factor applies
  for (const bool decay : {true, false}) {
    for (const int threads : {1, 2, 3}) {
      SCOPED_TRACE("n " + std::to_string(n) + " decay " + std::to_string(decay) + " threads " +
                   std::to_string(threads));
      Args a;
      if (!decay) a.weight_decay = 0.0f;
      std::vector<float> rp = p, rm = m, rv = v;
      reference(rp, g, rm, rv, norm_sq, a);
      std::vector<float> kp = p, km = m, kv = v;
      std::vector<uint16_t> kb(n, 0xdead);
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      host::adamw_update_f32(kp.data(), g.data(), km.data(), kv.data(), kb.data(), n, norm_sq, a.lr, a.beta1, a.beta2,
                            a.eps, a.weight_decay, a.step, a.grad_clip);
      omp_set_num_threads(before);
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool nan = std::isnan(rp[i]);
        if (nan ? !std::isnan(kp[i]) : bits(kp[i]) != bits(rp[i])) ++wrong;
        if (bits(km[i]) != bits(rm[i]) && !(std::isnan(km[i]) && std::isnan(rm[i]))) ++wrong;
        if (bits(kv[i]) != bits(rv[i]) && !(std::isnan(kv[i]) && std::isnan(rv[i]))) ++wrong;
        if (nan ? bf16_to_float(kb[i]) == bf16_to_float(kb[i]) : kb[i] != bf16_high(rp[i])) ++wrong;
      }
      EXPECT_EQ(wrong, 0);
      if (n > 40 && !decay) {
        EXPECT_EQ(kb[3], 0x3f81);
        EXPECT_EQ(kb[4], 0x3f82);
        EXPECT_EQ(kb[5], 0xbf82);
        EXPECT_EQ(kb[6], 0x7f80);
        EXPECT_EQ(kb[7], 0x3f81);
      }
      // Out of place: the same bits written elsewhere, the state read left as it was.
      {
        std::vector<float> op(n), om(n), ov(n);
        std::vector<uint16_t> ob(n);
        const std::vector<float> ip = p, im = m, iv = v;
        // The team given by argument (as the CPU optimizer does) rather than by OpenMP's default.
        host::adamw_update_f32(host::AdamWArrays{ip.data(), g.data(), im.data(), iv.data(), op.data(), om.data(),
                                               ov.data(), ob.data()},
                              n, norm_sq, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step, a.grad_clip, threads);
        EXPECT_TRUE(same_bytes(op, kp));
        EXPECT_TRUE(same_bytes(om, km));
        EXPECT_TRUE(same_bytes(ov, kv));
        EXPECT_TRUE(same_bytes(ob, kb));
        EXPECT_TRUE(ip == p && im == m && iv == v);
      }
#ifndef TT_ADAMW_ISA
      // The generic entry point (the device optimizer of the CPU backend) gives the same update.
      std::vector<float> qp = p, qm = m, qv = v;
      cpu::adamw_update<float>(qp.data(), g.data(), qm.data(), qv.data(), n, norm_sq, a.lr, a.beta1, a.beta2, a.eps,
                               a.weight_decay, a.step, a.grad_clip);
      EXPECT_TRUE(same_bytes(qp, kp));
#endif
    }
  }
}

// The written arrays at every alignment, alike and apart (the update streams its stores from where all of them are at
// a vector boundary, and keeps ordinary stores when they never are): the same bits as the scalar formula.
TEST(CpuAdamWAlignment, EveryOffsetOfTheWrittenArraysGivesTheSameBits) {
  const int64_t n = 70001;  // above the parallel threshold, not a multiple of a vector
  const auto [p, g, m, v] = random_state(n, 7);
  Args a;
  std::vector<float> rp = p, rm = m, rv = v;
  reference(rp, g, rm, rv, 4.0f, a);
  // 64-byte aligned storage, then offsets in elements.
  auto aligned = [](size_t elems, size_t bytes) {
    return std::unique_ptr<char, decltype(&std::free)>(static_cast<char*>(std::aligned_alloc(64, (elems * bytes + 64 + 63) / 64 * 64)), &std::free);
  };
  for (const int po : {0, 1, 5}) {
    for (const int mo : {0, 3}) {
      for (const int bo : {0, 2, 7}) {
        SCOPED_TRACE("offsets param " + std::to_string(po) + " state " + std::to_string(mo) + " bf16 " +
                     std::to_string(bo));
        auto pb = aligned(n + 16, 4), mb = aligned(n + 16, 4), vb = aligned(n + 16, 4), bb = aligned(n + 32, 2);
        float* op = reinterpret_cast<float*>(pb.get()) + po;
        float* om = reinterpret_cast<float*>(mb.get()) + mo;
        float* ov = reinterpret_cast<float*>(vb.get()) + mo;
        uint16_t* ob = reinterpret_cast<uint16_t*>(bb.get()) + bo;
        for (const int threads : {1, 3}) {
          const int before = omp_get_max_threads();
          omp_set_num_threads(threads);
          host::adamw_update_f32(host::AdamWArrays{p.data(), g.data(), m.data(), v.data(), op, om, ov, ob}, n, 4.0f,
                                a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.step, a.grad_clip);
          omp_set_num_threads(before);
          int64_t wrong = 0;
          for (int64_t i = 0; i < n; ++i)
            wrong += bits(op[i]) != bits(rp[i]) || bits(om[i]) != bits(rm[i]) || bits(ov[i]) != bits(rv[i]) ||
                     ob[i] != bf16_high(rp[i]);
          EXPECT_EQ(wrong, 0) << threads << " threads";
        }
        // In place from the same offsets, with the bf16 copy streamed.
        std::memcpy(op, p.data(), n * sizeof(float));
        std::memcpy(om, m.data(), n * sizeof(float));
        std::memcpy(ov, v.data(), n * sizeof(float));
        host::adamw_update_f32(op, g.data(), om, ov, ob, n, 4.0f, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                              a.step, a.grad_clip);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i)
          wrong += bits(op[i]) != bits(rp[i]) || bits(om[i]) != bits(rm[i]) || bits(ov[i]) != bits(rv[i]) ||
                   ob[i] != bf16_high(rp[i]);
        EXPECT_EQ(wrong, 0) << "in place";
      }
    }
  }
}

// Sizes: empty, one element, either side of one AVX-512 vector, a prime above the parallel threshold.
INSTANTIATE_TEST_SUITE_P(Sizes, CpuAdamW, ::testing::Values(0, 1, 15, 17, 41, 100003));

// The clip factor as the update computes it: exactly 1 when the norm is at most the clip (or clipping is off), which
// is when the CPU optimizer's speculative update (computed with factor 1) is the update.
TEST(CpuAdamWClip, FactorIsExactlyOneUnderTheClip) {
  EXPECT_EQ(host::adamw_clip_factor(0.25f, 1.0f), 1.0f);
  EXPECT_EQ(host::adamw_clip_factor(0.998f, 1.0f), 1.0f);
  EXPECT_LT(host::adamw_clip_factor(1.0f, 1.0f), 1.0f);  // norm exactly 1: 1 / (1 + 1e-6), as PyTorch
  EXPECT_EQ(host::adamw_clip_factor(1e12f, 0.0f), 1.0f);
  EXPECT_LT(host::adamw_clip_factor(4.0f, 1.0f), 0.51f);
}

TEST(CpuAdamWBf16, RoundsTiesToEvenAndKeepsNaNQuiet) {
#ifdef TT_ADAMW_ISA
  std::printf("host AdamW built for %s\n", TT_ADAMW_ISA);
#endif
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

// Note [host threads beside a GPU]: --threads when given; else OpenMP's team, less one beside a GPU, never 0.
TEST(HostOptimizerThreads, EveryCoreButOneBesideAGpu) {
  const int before = omp_get_max_threads();
  EXPECT_EQ(host::optimizer_threads(5, true), 5);
  EXPECT_EQ(host::optimizer_threads(5, false), 5);
  omp_set_num_threads(8);
  EXPECT_EQ(host::optimizer_threads(0, true), 7);
  EXPECT_EQ(host::optimizer_threads(0, false), 8);
  omp_set_num_threads(1);
  EXPECT_EQ(host::optimizer_threads(0, true), 1);
  omp_set_num_threads(before);
}

}  // namespace
}  // namespace tt
