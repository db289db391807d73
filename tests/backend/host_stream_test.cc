// The host stream: host functions run in stream order and interlock with the device streams through events, on the
// CPU backend (with a slow simulated link, so that a missing wait would read stale data) and on CUDA when a GPU is
// present. The round trip: device -> host (d2h), host doubles the values (host stream), host -> device (h2d).
#include <atomic>
#include <chrono>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "test_util.h"

namespace tt {
namespace {

void round_trip(Backend& be) {
  constexpr int kN = 1 << 16;
  std::vector<float> src(kN), host(kN, -1.0f), out(kN, 0.0f);
  for (int i = 0; i < kN; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i);
  auto t = be.pool().allocate({kN}, DType::kF32, TensorClass::kWorkspace, "x");
  ASSERT_TRUE(t.is_ok());
  const Tensor x = t.value();
  auto staged = be.allocate_host(kN * sizeof(float), TensorClass::kWorkspace, "staged");
  ASSERT_TRUE(staged.is_ok());
  float* h = static_cast<float*>(staged.value());
  auto copied_out = be.create_event(), doubled = be.create_event(), copied_in = be.create_event(),
       written = be.create_event();
  be.copy_h2d(x, src.data(), be.compute_stream());
  be.compute_stream().record(*written);
  be.d2h_stream().wait(*written);
  be.copy_d2h(h, x, be.d2h_stream());
  be.d2h_stream().record(*copied_out);
  be.host_stream().wait(*copied_out);
  std::atomic<int> ran{0};
  be.enqueue_host([h, &ran] {
    // Slower than the simulated link's delay: an h2d copy that did not wait would read the values undoubled.
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    for (int i = 0; i < kN; ++i) h[i] *= 2.0f;
    ran.fetch_add(1);
  });
  be.host_stream().record(*doubled);
  be.h2d_stream().wait(*doubled);
  be.copy_h2d(x, h, be.h2d_stream());
  be.h2d_stream().record(*copied_in);
  be.compute_stream().wait(*copied_in);
  be.copy_d2h(out.data(), x, be.compute_stream());
  ASSERT_TRUE(be.compute_stream().synchronize().is_ok());
  EXPECT_EQ(ran.load(), 1);
  for (int i = 0; i < kN; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], 2.0f * static_cast<float>(i)) << "at " << i;
  ASSERT_TRUE(be.synchronize_all().is_ok());
  be.free_host(h);
  be.pool().free(x);
}

TEST(HostStream, OrdersHostWorkBetweenCopiesOnTheCpuBackend) {
  auto be = cpu::create_backend({.device_budget = int64_t(64) << 20, .threads = 1, .copy_delay_us = 20000});
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  round_trip(*be.value());
}

TEST(HostStream, OrdersHostWorkBetweenCopiesOnCuda) {
  TT_SKIP_WITHOUT_GPU();
  auto be = testing::make_cuda_backend(int64_t(1) << 30);
  ASSERT_NE(be, nullptr);
  round_trip(*be);
}

TEST(HostStream, RunsInEnqueueOrder) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) be->enqueue_host([&order, i] { order.push_back(i); });
  ASSERT_TRUE(be->host_stream().synchronize().is_ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
}

}  // namespace
}  // namespace tt
