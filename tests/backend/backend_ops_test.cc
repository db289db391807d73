// Every op of the Backend interface on every backend this machine has, against the CPU backend (ggml's
// test-backend-ops idea): the same random inputs, the outputs compared with explicit tolerances. The CPU backend is
// itself checked against finite differences (cpu_ops_gradcheck_test) and PyTorch (gpt_golden_test). Without a GPU
// the CUDA cases skip with a message.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "test_util.h"

namespace tt {
namespace {

// One tensor of an op: its shape, how to fill it, whether it is compared after the op.
struct Arg {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  bool compare = false;       // an output (or accumulated gradient) to compare
  int int_range = 0;          // i32: values in [0, int_range)
  bool zero = false;          // start at zero instead of random
  bool positive = false;      // random in (0.5, 1.5) (rstd)
};

using OpFn = std::function<void(Backend&, const std::vector<Tensor>&)>;

// Runs op on the CPU backend and on `other` with identical inputs and compares the marked outputs.
void compare_op(Backend& other, const std::string& op, const std::vector<Arg>& args, const OpFn& fn, double atol,
                double rtol) {
  auto cpu = testing::make_cpu_backend(int64_t(256) << 20);
  Rng rng(42);
  std::vector<std::vector<float>> host_f(args.size());
  std::vector<std::vector<int32_t>> host_i(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    const size_t n = static_cast<size_t>(a.shape.numel());
    if (a.dtype == DType::kI32) {
      host_i[i].resize(n);
      for (auto& x : host_i[i]) x = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(a.int_range)));
    } else {
      host_f[i].resize(n);
      for (auto& x : host_f[i])
        x = a.zero ? 0.0f : a.positive ? static_cast<float>(0.5 + rng.uniform()) : static_cast<float>(rng.normal());
    }
  }
  auto run = [&](Backend& be) {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < args.size(); ++i) {
      auto t = be.pool().allocate(args[i].shape, args[i].dtype, TensorClass::kWorkspace, args[i].name);
      EXPECT_TRUE(t.is_ok()) << t.status().to_string();
      ts.push_back(t.value());
      be.copy_h2d(ts.back(), args[i].dtype == DType::kI32 ? static_cast<const void*>(host_i[i].data())
                                                          : static_cast<const void*>(host_f[i].data()),
                  be.compute_stream());
    }
    fn(be, ts);
    std::vector<std::vector<float>> out(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].compare) continue;
      out[i].resize(static_cast<size_t>(args[i].shape.numel()));
      be.copy_d2h(out[i].data(), ts[i], be.compute_stream());
    }
    EXPECT_TRUE(be.compute_stream().synchronize().is_ok());
    for (auto it = ts.rbegin(); it != ts.rend(); ++it) be.pool().free(*it);
    return out;
  };
  const auto want = run(*cpu);
  const auto got = run(other);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].compare) {
      EXPECT_TRUE(testing::all_close(op + " " + args[i].name, got[i], want[i], atol, rtol));
    }
  }
}

class BackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    TT_SKIP_WITHOUT_GPU();
    be_ = testing::make_cuda_backend(int64_t(2) << 30);
    ASSERT_NE(be_, nullptr);
  }
  std::unique_ptr<Backend> be_;
};

constexpr int B = 3, T = 37, C = 48, H = 4, V = 67;
constexpr int64_t N = B * T;
constexpr double kAtol = 2e-5, kRtol = 2e-5;

TEST_F(BackendOps, Embedding) {
  compare_op(*be_, "embedding_forward",
             {{"out", {B, T, C}, DType::kF32, true}, {"tokens", {B, T}, DType::kI32, false, V},
              {"wte", {V, C}}, {"wpe", {T, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.embedding_forward(t[0], t[1], t[2], t[3]); }, 0, 0);
  // Few distinct tokens: long runs in the deterministic reduction.
  compare_op(*be_, "embedding_backward",
             {{"dwte", {V, C}, DType::kF32, true}, {"dwpe", {T, C}, DType::kF32, true}, {"dout", {B, T, C}},
              {"tokens", {B, T}, DType::kI32, false, 5}},
             [](Backend& be, const std::vector<Tensor>& t) { be.embedding_backward(t[0], t[1], t[2], t[3]); }, kAtol,
             kRtol);
}

TEST_F(BackendOps, LayerNorm) {
  compare_op(*be_, "layernorm_forward",
             {{"out", {N, C}, DType::kF32, true}, {"mean", {N}, DType::kF32, true}, {"rstd", {N}, DType::kF32, true},
              {"inp", {N, C}}, {"w", {C}}, {"b", {C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]); },
             kAtol, kRtol);
  compare_op(*be_, "layernorm_backward",
             {{"dinp", {N, C}, DType::kF32, true}, {"dw", {C}, DType::kF32, true}, {"db", {C}, DType::kF32, true},
              {"dout", {N, C}}, {"inp", {N, C}}, {"w", {C}}, {"mean", {N}}, {"rstd", {N}, DType::kF32, false, 0, false,
              true}},
             [](Backend& be, const std::vector<Tensor>& t) {
               be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
             },
             1e-4, 1e-4);
}

TEST_F(BackendOps, Matmul) {
  const int OC = 72;
  compare_op(*be_, "matmul_forward",
             {{"out", {N, OC}, DType::kF32, true}, {"inp", {N, C}}, {"w", {OC, C}}, {"bias", {OC}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.matmul_forward(t[0], t[1], t[2], t[3]); }, 1e-4, 1e-4);
  compare_op(*be_, "matmul_forward (no bias)", {{"out", {N, OC}, DType::kF32, true}, {"inp", {N, C}}, {"w", {OC, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.matmul_forward(t[0], t[1], t[2], Tensor()); }, 1e-4,
             1e-4);
  compare_op(*be_, "matmul_backward",
             {{"dinp", {N, C}, DType::kF32, true}, {"dw", {OC, C}, DType::kF32, true}, {"dbias", {OC}, DType::kF32, true},
              {"dout", {N, OC}}, {"inp", {N, C}}, {"w", {OC, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.matmul_backward(t[0], t[1], t[2], t[3], t[4], t[5]); },
             2e-4, 1e-4);
}

TEST_F(BackendOps, Attention) {
  compare_op(*be_, "attention_forward",
             {{"out", {B, T, C}, DType::kF32, true}, {"att", {B, H, T, T}, DType::kF32, true}, {"qkv", {B, T, 3 * C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.attention_forward(t[0], t[1], t[2], H); }, kAtol,
             kRtol);
  // att must be a real softmax for the backward: compute it first on each backend.
  compare_op(*be_, "attention_backward",
             {{"dqkv", {B, T, 3 * C}, DType::kF32, true}, {"dout", {B, T, C}}, {"qkv", {B, T, 3 * C}},
              {"att", {B, H, T, T}}, {"out", {B, T, C}}},
             [](Backend& be, const std::vector<Tensor>& t) {
               be.attention_forward(t[4], t[3], t[2], H);
               be.attention_backward(t[0], t[1], t[2], t[3], H);
             },
             1e-4, 1e-4);
}

TEST_F(BackendOps, Elementwise) {
  compare_op(*be_, "gelu_forward", {{"out", {N, C}, DType::kF32, true}, {"inp", {N, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.gelu_forward(t[0], t[1]); }, kAtol, kRtol);
  compare_op(*be_, "gelu_backward", {{"dinp", {N, C}, DType::kF32, true}, {"inp", {N, C}}, {"dout", {N, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.gelu_backward(t[0], t[1], t[2]); }, kAtol, kRtol);
  compare_op(*be_, "residual_forward", {{"out", {N, C}, DType::kF32, true}, {"a", {N, C}}, {"b", {N, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.residual_forward(t[0], t[1], t[2]); }, 0, 0);
}

TEST_F(BackendOps, SoftmaxCrossEntropy) {
  compare_op(*be_, "softmax_xent_forward",
             {{"losses", {N}, DType::kF32, true}, {"probs", {N, V}, DType::kF32, true}, {"logits", {N, V}},
              {"targets", {N}, DType::kI32, false, V}},
             [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_forward(t[0], t[1], t[2], t[3]); }, kAtol,
             kRtol);
  compare_op(*be_, "softmax_xent_forward (in place)",
             {{"losses", {N}, DType::kF32, true}, {"logits", {N, V}, DType::kF32, true},
              {"targets", {N}, DType::kI32, false, V}},
             [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_forward(t[0], t[1], t[1], t[2]); }, kAtol,
             kRtol);
  compare_op(*be_, "softmax_xent_backward",
             {{"dlogits", {N, V}, DType::kF32, true}, {"probs", {N, V}}, {"targets", {N}, DType::kI32, false, V}},
             [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_backward(t[0], t[1], t[2], 0.125f); },
             kAtol, kRtol);
}

TEST_F(BackendOps, Optimizer) {
  compare_op(*be_, "sum_squares", {{"out", {1}, DType::kF32, true}, {"x", {100003}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.sum_squares(t[0], t[1]); }, 0, 1e-6);
  for (float clip : {0.0f, 0.5f}) {
    compare_op(*be_, "adamw_update",
               {{"param", {1000}, DType::kF32, true}, {"grad", {1000}}, {"m", {1000}, DType::kF32, true},
                {"v", {1000}, DType::kF32, true, 0, false, true}, {"norm_sq", {1}, DType::kF32, false, 0, false, true}},
               [clip](Backend& be, const std::vector<Tensor>& t) {
                 AdamWArgs a;
                 a.lr = 1e-2f;
                 a.weight_decay = 0.1f;
                 a.step = 3;
                 a.grad_clip = clip;
                 be.adamw_update(t[0], t[1], t[2], t[3], t[4], a);
               },
               1e-6, 1e-5);
  }
}

TEST_F(BackendOps, CopiesAndEvents) {
  auto t = be_->pool().allocate({1000}, DType::kF32, TensorClass::kWorkspace, "x");
  ASSERT_TRUE(t.is_ok());
  std::vector<float> src(1000), dst(1000, -1.0f);
  for (int i = 0; i < 1000; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i);
  auto ev = be_->create_event();
  be_->copy_h2d(t.value(), src.data(), be_->h2d_stream());
  be_->h2d_stream().record(*ev);
  be_->d2h_stream().wait(*ev);
  be_->copy_d2h(dst.data(), t.value(), be_->d2h_stream());
  ASSERT_TRUE(be_->d2h_stream().synchronize().is_ok());
  EXPECT_EQ(src, dst);
  be_->fill_zero(t.value(), be_->compute_stream());
  be_->copy_d2h(dst.data(), t.value(), be_->compute_stream());
  ASSERT_TRUE(be_->compute_stream().synchronize().is_ok());
  EXPECT_EQ(dst, std::vector<float>(1000, 0.0f));
  be_->pool().free(t.value());
}

}  // namespace
}  // namespace tt
