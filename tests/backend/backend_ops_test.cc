// Every op of the Backend interface on every backend this machine has, against the CPU backend (ggml's
// test-backend-ops idea): the same random inputs, the outputs compared with explicit tolerances. The CPU backend is
// itself checked against finite differences (cpu_ops_gradcheck_test) and PyTorch (gpt_golden_test). Without a GPU
// the CUDA cases skip with a message.
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "backend/registry.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "test_util.h"
#ifdef TIERTRAIN_HAVE_CUDA
#include "backend/cuda/cudnn_loader.h"
#include "backend/cuda/cudnn_sdpa.h"
#endif

namespace tt {
namespace {

// One tensor of an op: its shape, how to fill it, whether it is compared after the op.
struct Arg {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;  // kF32: a float tensor of the compute dtype (or of the master dtype, see `master`)
  bool compare = false;       // an output (or accumulated gradient) to compare
  int int_range = 0;          // i32: values in [0, int_range)
  bool zero = false;          // start at zero instead of random
  bool positive = false;      // random in (0.5, 1.5) (rstd)
  bool master = false;        // in the master dtype (f32) even when computing in bf16: parameter gradients, stats
  bool nan = false;           // start as NaN: the op must write it without reading it
};

// Both ways a backward op writes its parameter gradients (Note [gradients first written] in backend/backend.h):
// added to random values, or overwritten where they start as NaN (an op that read them would give NaN, which no
// comparison passes).
constexpr GradWrite kGradWrites[] = {GradWrite::kAccumulate, GradWrite::kOverwrite};
std::string suffix(GradWrite gw) { return gw == GradWrite::kOverwrite ? " (overwriting)" : " (accumulating)"; }
// A parameter gradient the op writes as gw says, compared afterwards.
Arg grad_arg(const std::string& name, Shape shape, GradWrite gw) {
  Arg a{name, std::move(shape), DType::kF32, true};
  a.nan = gw == GradWrite::kOverwrite;
  return a;
}

// Which float arguments are in the master dtype, by name: parameter gradients, LayerNorm statistics, losses and the
// optimizer's tensors.
bool is_master(const std::string& name) {
  for (const char* m : {"dwte", "dwpe", "dw", "db", "dbias", "mean", "rstd", "losses", "out_norm", "param", "grad",
                        "m", "v", "norm_sq", "lse"})
    if (name == m) return true;
  return false;
}

using OpFn = std::function<void(Backend&, const std::vector<Tensor>&)>;

// Every argument's starting values, drawn once: random (or as Arg says), rounded to bf16 for bf16 compute so that
// every backend sees the same values.
struct HostArgs {
  std::vector<std::vector<float>> f;
  std::vector<std::vector<int32_t>> i;
};
HostArgs host_args(const std::vector<Arg>& args, DType compute, uint64_t seed) {
  Rng rng(seed);
  HostArgs h{std::vector<std::vector<float>>(args.size()), std::vector<std::vector<int32_t>>(args.size())};
  for (size_t k = 0; k < args.size(); ++k) {
    const Arg& a = args[k];
    const size_t n = static_cast<size_t>(a.shape.numel());
    if (a.dtype == DType::kI32) {
      h.i[k].resize(n);
      for (auto& x : h.i[k]) x = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(a.int_range)));
    } else {
      h.f[k].resize(n);
      for (auto& x : h.f[k]) {
        x = a.nan    ? std::numeric_limits<float>::quiet_NaN()
            : a.zero ? 0.0f
            : a.positive ? static_cast<float>(0.5 + rng.uniform())
                         : static_cast<float>(rng.normal());
        if (compute == DType::kBF16) x = bf16_to_float(float_to_bf16(x));
      }
    }
  }
  return h;
}

// Runs fn on `be` over tensors holding `host` (float arguments in bf16 where cd is bf16 and they are not of the
// master dtype) and returns the marked outputs as floats (empty for the others).
std::vector<std::vector<float>> run_op(Backend& be, DType cd, const std::vector<Arg>& args, const HostArgs& host,
                                      const OpFn& fn) {
  std::vector<Tensor> ts;
  std::vector<std::vector<uint16_t>> staged(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const bool master = args[i].master || is_master(args[i].name);
    const bool low = cd == DType::kBF16 && args[i].dtype == DType::kF32 && !master;
    const DType dt = low ? DType::kBF16 : args[i].dtype;
    auto t = be.pool().allocate(args[i].shape, dt, TensorClass::kWorkspace, args[i].name);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    ts.push_back(t.value());
    const void* src = args[i].dtype == DType::kI32 ? static_cast<const void*>(host.i[i].data())
                                                   : static_cast<const void*>(host.f[i].data());
    if (low) {
      for (float x : host.f[i]) staged[i].push_back(float_to_bf16(x));
      src = staged[i].data();
    }
    be.copy_h2d(ts.back(), src, be.compute_stream());
  }
  fn(be, ts);
  std::vector<std::vector<float>> out(args.size());
  std::vector<std::vector<uint16_t>> out16(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].compare) continue;
    out[i].resize(static_cast<size_t>(args[i].shape.numel()));
    if (ts[i].dtype() == DType::kBF16) {
      out16[i].resize(out[i].size());
      be.copy_d2h(out16[i].data(), ts[i], be.compute_stream());
    } else {
      be.copy_d2h(out[i].data(), ts[i], be.compute_stream());
    }
  }
  EXPECT_TRUE(be.compute_stream().synchronize().is_ok());
  for (size_t i = 0; i < args.size(); ++i)
    for (size_t j = 0; j < out16[i].size(); ++j) out[i][j] = bf16_to_float(out16[i][j]);
  for (auto it = ts.rbegin(); it != ts.rend(); ++it) be.pool().free(*it);
  return out;
}

// Runs op on the CPU backend (f32) and on `other` (activations in `compute`) with identical inputs and compares the
// marked outputs. For bf16 the inputs are rounded to bf16 first, so both sides see the same values.
void compare_op(Backend& other, const std::string& op, const std::vector<Arg>& args, const OpFn& fn, double atol,
                double rtol, DType compute = DType::kF32) {
  auto cpu = testing::make_cpu_backend(int64_t(256) << 20);
  const HostArgs host = host_args(args, compute, 42);
  const auto want = run_op(*cpu, DType::kF32, args, host, fn);
  const auto got = run_op(other, compute, args, host, fn);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].compare) {
      EXPECT_TRUE(testing::all_close(op + " " + args[i].name + " (" + dtype_name(compute) + ")", got[i], want[i],
                                     atol, rtol));
    }
  }
}

// Backward ops as functions of how they write their gradients, and their arguments (gradients written as gw says).
using GradOpFn = std::function<void(Backend&, const std::vector<Tensor>&, GradWrite)>;
OpFn bind(const GradOpFn& f, GradWrite gw) {
  return [f, gw](Backend& be, const std::vector<Tensor>& t) { f(be, t, gw); };
}
const GradOpFn kLayernormBackward = [](Backend& be, const std::vector<Tensor>& t, GradWrite gw) {
  be.layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], gw);
};
std::vector<Arg> layernorm_backward_args(int64_t rows, int64_t cols, GradWrite gw) {
  return {{"dinp", {rows, cols}, DType::kF32, true}, grad_arg("dw", {cols}, gw),   grad_arg("db", {cols}, gw),
          {"dout", {rows, cols}},                     {"inp", {rows, cols}},        {"w", {cols}},
          {"mean", {rows}},                           {"rstd", {rows}, DType::kF32, false, 0, false, true}};
}
const GradOpFn kMatmulBackward = [](Backend& be, const std::vector<Tensor>& t, GradWrite gw) {
  be.matmul_backward(t[0], t[1], t[2], t[3], t[4], t[5], gw);
};
std::vector<Arg> matmul_backward_args(int64_t rows, int64_t in, int64_t out, GradWrite gw) {
  return {{"dinp", {rows, in}, DType::kF32, true}, grad_arg("dw", {out, in}, gw), grad_arg("dbias", {out}, gw),
          {"dout", {rows, out}}, {"inp", {rows, in}}, {"w", {out, in}}};
}
const GradOpFn kMatmulBackwardGelu = [](Backend& be, const std::vector<Tensor>& t, GradWrite gw) {
  be.matmul_backward_gelu(t[0], t[1], t[2], t[3], t[4], t[5], t[6], gw);
};
std::vector<Arg> matmul_backward_gelu_args(int64_t rows, int64_t in, int64_t out, GradWrite gw) {
  std::vector<Arg> a = matmul_backward_args(rows, in, out, gw);
  a[0].name = "dpre";
  a.push_back({"pre", {rows, in}});
  return a;
}

// residual_rmsnorm_forward, and the two ops it stands for.
std::vector<Arg> residual_rmsnorm_args(int64_t rows, int64_t cols) {
  return {{"res", {rows, cols}, DType::kF32, true}, {"out", {rows, cols}, DType::kF32, true},
          {"rstd", {rows}, DType::kF32, true},      {"a", {rows, cols}},
          {"b", {rows, cols}},                      {"w", {cols}}};
}
const OpFn kResidualRmsnorm = [](Backend& be, const std::vector<Tensor>& t) {
  be.residual_rmsnorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], 1e-5f);
};
const OpFn kResidualThenRmsnorm = [](Backend& be, const std::vector<Tensor>& t) {
  be.residual_forward(t[0], t[3], t[4]);
  be.rmsnorm_forward(t[1], t[2], t[0], t[5], 1e-5f);
};
// The fused op's res, out and rstd bit for bit the two ops' on the same backend.
void expect_residual_rmsnorm_as_two_ops(Backend& be, DType compute, int64_t rows, int64_t cols) {
  const std::vector<Arg> args = residual_rmsnorm_args(rows, cols);
  const HostArgs host = host_args(args, compute, 7);
  const auto one = run_op(be, compute, args, host, kResidualRmsnorm);
  const auto two = run_op(be, compute, args, host, kResidualThenRmsnorm);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(one[i].size(), two[i].size());
    EXPECT_EQ(std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(float)), 0)
        << "residual_rmsnorm_forward's " << args[i].name << " differs from the two ops' (" << dtype_name(compute)
        << ", " << rows << " x " << cols << ")";
  }
}

// Each case runs with f32 activations (tight tolerances) and bf16 activations (tolerances of bf16 rounding:
// 2^-8 relative per stored value, against the f32 CPU result on the same bf16-rounded inputs).
struct AttentionCase {
  int B, T, C, H;
  int KV = 0;  // key/value heads (Note [grouped-query attention]); 0: H
  int kv() const { return KV > 0 ? KV : H; }
};

class BackendOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TT_SKIP_WITHOUT_GPU();
    be_ = testing::make_cuda_backend(int64_t(2) << 30);
    ASSERT_NE(be_, nullptr);
  }
  DType dt() const { return GetParam(); }
  double tol(double f32, double bf16) const { return dt() == DType::kBF16 ? bf16 : f32; }
  void check(const std::string& op, const std::vector<Arg>& args, const OpFn& fn, double atol32, double rtol32,
             double atol16 = 3e-2, double rtol16 = 3e-2) {
    compare_op(*be_, op, args, fn, tol(atol32, atol16), tol(rtol32, rtol16), dt());
  }
  // layernorm_backward over rows x cols, its gradients written both ways.
  void check_layernorm_backward(int64_t rows, int64_t cols, double tol) {
    for (const GradWrite gw : kGradWrites)
      check("layernorm_backward" + suffix(gw), layernorm_backward_args(rows, cols, gw), bind(kLayernormBackward, gw),
            tol, tol);
  }
  // rmsnorm_forward and rmsnorm_backward (its weight gradient written both ways) over rows x cols.
  void check_rmsnorm(int64_t rows, int64_t cols, double atol, double rtol, double backward_tol) {
    check("rmsnorm_forward",
          {{"out", {rows, cols}, DType::kF32, true}, {"rstd", {rows}, DType::kF32, true}, {"inp", {rows, cols}},
           {"w", {cols}}},
          [](Backend& be, const std::vector<Tensor>& t) { be.rmsnorm_forward(t[0], t[1], t[2], t[3], 1e-5f); }, atol,
          rtol);
    for (const GradWrite gw : kGradWrites)
      check("rmsnorm_backward" + suffix(gw),
            {{"dinp", {rows, cols}, DType::kF32, true}, grad_arg("dw", {cols}, gw), {"dout", {rows, cols}},
             {"inp", {rows, cols}}, {"w", {cols}}, {"rstd", {rows}, DType::kF32, false, 0, false, true}},
            [gw](Backend& be, const std::vector<Tensor>& t) {
              be.rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], gw);
            },
            backward_tol, backward_tol);
  }
  // residual_rmsnorm_forward against the CPU, and bit for bit against residual_forward then rmsnorm_forward on this
  // backend (Note [residual and RMSNorm in one pass] in src/backend/cuda/kernels_layernorm.cu).
  void check_residual_rmsnorm(int64_t rows, int64_t cols) {
    check("residual_rmsnorm_forward", residual_rmsnorm_args(rows, cols), kResidualRmsnorm, 2e-5, 2e-5);
    expect_residual_rmsnorm_as_two_ops(*be_, dt(), rows, cols);
  }
  void attention_case(Backend& be, const AttentionCase& c);
  std::unique_ptr<Backend> be_;
};

constexpr int B = 3, T = 37, C = 48, H = 4, V = 67;
constexpr int64_t N = B * T;
constexpr double kAtol = 2e-5, kRtol = 2e-5;

TEST_P(BackendOps, Embedding) {
  check("embedding_forward",
             {{"out", {B, T, C}, DType::kF32, true}, {"tokens", {B, T}, DType::kI32, false, V},
              {"wte", {V, C}}, {"wpe", {T, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.embedding_forward(t[0], t[1], t[2], t[3]); }, 0, 0);
  // Few distinct tokens: long runs in the deterministic reduction. dwte is always added to, dwpe as gw says.
  for (const GradWrite gw : kGradWrites) {
    check("embedding_backward" + suffix(gw),
          {{"dwte", {V, C}, DType::kF32, true}, grad_arg("dwpe", {T, C}, gw), {"dout", {B, T, C}},
           {"tokens", {B, T}, DType::kI32, false, 5}},
          [gw](Backend& be, const std::vector<Tensor>& t) { be.embedding_backward(t[0], t[1], t[2], t[3], gw); },
          kAtol, kRtol);
  }
}

// Note [vocabulary-parallel cross-entropy]: a rank's slice of wte (rows [20, V) here): tokens outside it add
// nothing, wpe may be absent.
TEST_P(BackendOps, EmbeddingOfAVocabularySlice) {
  const int rows = V - 20;
  check("embedding_forward (a slice, no wpe)",
        {{"out", {B, T, C}, DType::kF32, true}, {"tokens", {B, T}, DType::kI32, false, V}, {"wte", {rows, C}}},
        [](Backend& be, const std::vector<Tensor>& t) { be.embedding_forward(t[0], t[1], t[2], Tensor(), 20); }, 0, 0);
  check("embedding_forward (a slice)",
        {{"out", {B, T, C}, DType::kF32, true}, {"tokens", {B, T}, DType::kI32, false, V}, {"wte", {rows, C}},
         {"wpe", {T, C}}},
        [](Backend& be, const std::vector<Tensor>& t) { be.embedding_forward(t[0], t[1], t[2], t[3], 20); }, 0, 0);
  for (const GradWrite gw : kGradWrites) {
    check("embedding_backward (a slice)" + suffix(gw),
          {{"dwte", {rows, C}, DType::kF32, true}, grad_arg("dwpe", {T, C}, gw), {"dout", {B, T, C}},
           {"tokens", {B, T}, DType::kI32, false, V}},
          [gw](Backend& be, const std::vector<Tensor>& t) { be.embedding_backward(t[0], t[1], t[2], t[3], gw, 20); },
          kAtol, kRtol);
  }
  check("embedding_backward (a slice, no dwpe)",
        {{"dwte", {rows, C}, DType::kF32, true}, {"dout", {B, T, C}}, {"tokens", {B, T}, DType::kI32, false, V}},
        [](Backend& be, const std::vector<Tensor>& t) {
          be.embedding_backward(t[0], Tensor(), t[1], t[2], GradWrite::kOverwrite, 20);
        },
        kAtol, kRtol);
}

// The three steps of the vocabulary-parallel cross-entropy on one rank's columns [16, 16 + 40) of a vocabulary of
// V - 3 (its last columns padding, some targets elsewhere), with and without dlogits.
TEST_P(BackendOps, VocabularyParallelCrossEntropySteps) {
  const int cols = 40, begin = 16;
  for (const bool train : {false, true}) {
    check(train ? "xent_local_max, xent_local_sums, xent_finish" : "xent steps (losses only)",
          {{"stats", {3, N}, DType::kF32, true, 0, false, false, true}, {"losses", {N}, DType::kF32, true},
           {"logits", {N, cols}, DType::kF32, true}, {"targets", {N}, DType::kI32, false, V - 3}},
          [train](Backend& be, const std::vector<Tensor>& t) {
            be.xent_local_max(t[0], t[2], begin, V - 3);
            be.xent_local_sums(t[0], t[2], t[3], begin, V - 3);
            be.xent_finish(t[1], train ? t[2] : Tensor(), t[2], t[0], t[3], 0.125f, begin, V - 3);
          },
          kAtol, kRtol);
  }
}

TEST_P(BackendOps, LayerNorm) {
  check("layernorm_forward",
             {{"out", {N, C}, DType::kF32, true}, {"mean", {N}, DType::kF32, true}, {"rstd", {N}, DType::kF32, true},
              {"inp", {N, C}}, {"w", {C}}, {"b", {C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]); },
             kAtol, kRtol);
  check_layernorm_backward(N, C, 1e-4);
}

// The Llama family's ops: RMSNorm forward and backward (its weight gradient written both ways), the rotary embedding
// of q and k heads (v untouched) forward and back, at the row's position and at given positions, SwiGLU.
TEST_P(BackendOps, LlamaOps) {
  for (const int64_t cols : {48, 2048}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    check_rmsnorm(N, cols, kAtol, kRtol, 1e-4);
  }
  // Rope pair by pair (head size 12) and four pairs a thread (64: the kernel for Llama's heads).
  constexpr int kHeads = 4, kKv = 2;
  for (const int64_t hs : {12, 64}) {
    SCOPED_TRACE("head size " + std::to_string(hs));
    const int64_t cq = (kHeads + 2 * kKv) * hs;
    for (const bool inverse : {false, true})
      check(inverse ? "rope (inverse)" : "rope",
            {{"qkv", {B, T, cq}, DType::kF32, true}, {"table", {T, hs}, DType::kF32, false, 0, false, false, true}},
            [inverse](Backend& be, const std::vector<Tensor>& t) {
              be.rope(t[0], t[1], Tensor(), kHeads, kKv, inverse);
            },
            kAtol, kRtol, 2e-2, 2e-2);
    check("rope (at positions)",
          {{"qkv", {B, cq}, DType::kF32, true}, {"table", {T, hs}, DType::kF32, false, 0, false, false, true},
           {"pos", {B}, DType::kI32, false, T}},
          [](Backend& be, const std::vector<Tensor>& t) { be.rope(t[0], t[1], t[2], kHeads, kKv, false); }, kAtol,
          kRtol, 2e-2, 2e-2);
  }
  // SwiGLU in 16-byte vectors (F 40: a multiple of 8 bf16 and 4 f32 values) and value by value (F 42).
  for (const int64_t F : {40, 42}) {
    SCOPED_TRACE("F " + std::to_string(F));
    check("swiglu_forward", {{"out", {N, F}, DType::kF32, true}, {"inp", {N, 2 * F}}},
          [](Backend& be, const std::vector<Tensor>& t) { be.swiglu_forward(t[0], t[1]); }, kAtol, kRtol);
    check("swiglu_backward",
          {{"dinp", {N, 2 * F}, DType::kF32, true, 0, false, false, false, true}, {"inp", {N, 2 * F}},
           {"dout", {N, F}}},
          [](Backend& be, const std::vector<Tensor>& t) { be.swiglu_backward(t[0], t[1], t[2]); }, kAtol, kRtol);
  }
}

// The LayerNorm backward's paths (Note [one-pass LayerNorm backward] in src/backend/cuda/kernels_layernorm.cu): rows of fewer
// 16-byte vectors than a block has threads (several threads a column vector), of more (several vectors a thread), rows
// enough for blocks of several row groups and a partial last group, and the two-pass fallback (a width not a multiple
// of a vector: 36 in bf16, 34 in both, and one wider than a block's share). (Misaligned rows, the other fallback, do
// not occur here: the pool's tensors are aligned.)
TEST_P(BackendOps, LayerNormBackwardAtEveryPath) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {4500, 48}, {300, 2048}, {40, 4096}, {24, 8192}, {70, 36}, {70, 34}, {20, 9000}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    check_layernorm_backward(rows, cols, 2e-4);
  }
}

// The LayerNorm forward's paths (Note [LayerNorm forward in registers] in src/backend/cuda/kernels_layernorm.cu), plain and
// after a residual: rows of one 16-byte vector a lane or fewer (48), of several (768: 3 of 4 in bf16, 6 of 8 in f32),
// of a lane's most (4096 in bf16, 2048 in f32), and the row-strided fallback (4096 and 8192 in f32, 8192 in bf16; 36
// not a multiple of a bf16 vector, 34 of neither).
TEST_P(BackendOps, LayerNormForwardAtEveryPath) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {300, 48}, {70, 768}, {40, 2048}, {40, 4096}, {24, 8192}, {70, 36}, {70, 34}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    check("layernorm_forward",
          {{"out", {rows, cols}, DType::kF32, true}, {"mean", {rows}, DType::kF32, true},
           {"rstd", {rows}, DType::kF32, true}, {"inp", {rows, cols}}, {"w", {cols}}, {"b", {cols}}},
          [](Backend& be, const std::vector<Tensor>& t) { be.layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5]); },
          kAtol, kRtol);
    check("residual_layernorm_forward",
          {{"res", {rows, cols}, DType::kF32, true}, {"out", {rows, cols}, DType::kF32, true},
           {"mean", {rows}, DType::kF32, true}, {"rstd", {rows}, DType::kF32, true}, {"a", {rows, cols}},
           {"b", {rows, cols}}, {"w", {cols}}, {"bias", {cols}}},
          [](Backend& be, const std::vector<Tensor>& t) {
            be.residual_layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
          },
          kAtol, kRtol);
    // The residual alone: in 16-byte vectors where the length is a multiple of one (every case but 70 x 34 in bf16),
    // element by element otherwise.
    check("residual_forward", {{"out", {rows, cols}, DType::kF32, true}, {"a", {rows, cols}}, {"b", {rows, cols}}},
          [](Backend& be, const std::vector<Tensor>& t) { be.residual_forward(t[0], t[1], t[2]); }, 0, 0);
  }
}

// RMSNorm's paths (Note [RMSNorm on the LayerNorm kernels] in src/backend/cuda/kernels_layernorm.cu): the register
// forward and the one-pass backward at LayerNorm's shapes above (several threads a column vector, several vectors a
// thread, a lane's most), and the row kernels (36 and 34 not multiples of a vector, 9000 wider than a block's share;
// 8192 past the register forward, and in f32 past the one-pass backward).
TEST_P(BackendOps, RmsNormAtEveryPath) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {4500, 48}, {300, 2048}, {40, 4096}, {24, 8192}, {70, 36}, {70, 34}, {20, 9000}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    check_rmsnorm(rows, cols, kAtol, kRtol, 2e-4);
    check_residual_rmsnorm(rows, cols);
  }
}

TEST_P(BackendOps, Matmul) {
  const int OC = 72;
  check("matmul_forward",
             {{"out", {N, OC}, DType::kF32, true}, {"inp", {N, C}}, {"w", {OC, C}}, {"bias", {OC}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.matmul_forward(t[0], t[1], t[2], t[3]); }, 1e-4, 1e-4);
  check("matmul_forward (no bias)", {{"out", {N, OC}, DType::kF32, true}, {"inp", {N, C}}, {"w", {OC, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.matmul_forward(t[0], t[1], t[2], Tensor()); }, 1e-4,
             1e-4);
  for (const GradWrite gw : kGradWrites)
    check("matmul_backward" + suffix(gw), matmul_backward_args(N, C, OC, gw), bind(kMatmulBackward, gw), 2e-4, 1e-4);
}

// Attention at several head sizes and lengths: 64 and 128 take the CUDA backend's tensor-core kernels in bf16, the
// others (and f32) its general kernels; lengths not a multiple of the 64-row tiles check the edges.
// The fused MLP ops, at a shape where cuBLASLt's epilogues apply in bf16 (dimensions multiples of 8) and at one where
// they do not (the unfused path).
TEST_P(BackendOps, MatmulGelu) {
  for (const auto& [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{N, 48, 72}, {N, 36, 20}}) {
    SCOPED_TRACE("in " + std::to_string(in) + " out " + std::to_string(out));
    // GEMMs with GELU in cuBLASLt's epilogue (the unfused forward may still put the bias alone in one).
    const auto fused = [&] {
      const auto c = be_->counters();
      int64_t n = 0;
      for (const char* k : {"cublaslt_gelu_bias_gemms", "cublaslt_dgelu_gemms"}) n += c.count(k) ? c.at(k) : 0;
      return n;
    };
    const int64_t before = fused();
    check("matmul_gelu_forward",
          {{"pre", {rows, out}, DType::kF32, true}, {"out", {rows, out}, DType::kF32, true}, {"inp", {rows, in}},
           {"w", {out, in}}, {"bias", {out}}},
          [](Backend& be, const std::vector<Tensor>& t) { be.matmul_gelu_forward(t[0], t[1], t[2], t[3], t[4]); },
          1e-4, 1e-4);
    // dpre starts random: the op overwrites it.
    for (const GradWrite gw : kGradWrites)
      check("matmul_backward_gelu" + suffix(gw), matmul_backward_gelu_args(rows, in, out, gw),
            bind(kMatmulBackwardGelu, gw), 2e-4, 1e-4);
    // In bf16 the aligned shape takes cuBLASLt's GELU epilogues (forward and backward, twice), the other shape the
    // plain GELU kernels; f32 never does.
    const bool expect_fused = dt() == DType::kBF16 && in % 8 == 0 && out % 8 == 0;
    EXPECT_EQ(fused() - before, expect_fused ? 3 : 0);
  }
}

TEST_P(BackendOps, ResidualLayerNorm) {
  check("residual_layernorm_forward",
        {{"res", {N, C}, DType::kF32, true}, {"out", {N, C}, DType::kF32, true}, {"mean", {N}, DType::kF32, true},
         {"rstd", {N}, DType::kF32, true}, {"a", {N, C}}, {"b", {N, C}}, {"w", {C}}, {"bias", {C}}},
        [](Backend& be, const std::vector<Tensor>& t) {
          be.residual_layernorm_forward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
        },
        kAtol, kRtol);
}

// A second CUDA backend whose attention runs on cuDNN where cuDNN takes the shape (attention_impl=cudnn, a workspace
// of 513 MiB); null, with the reason printed, where cuDNN does not load (CI has none).
// Whether the cuDNN this machine loads takes an attention of this shape (cudnn::sdpa_takes).
bool cudnn_takes_shape(int64_t T, int64_t hs) {
#ifdef TIERTRAIN_HAVE_CUDA
  const auto lib = cudnn::load("");
  return lib.is_ok() && cudnn::sdpa_takes(lib.value()->version, T, hs);
#else
  (void)T, (void)hs;
  return false;
#endif
}

#ifdef TIERTRAIN_HAVE_CUDA
// A CUDA backend of these options; null where there is no GPU or it cannot be created (a test failure).
std::unique_ptr<Backend> cuda_backend_of(const cuda::CudaBackendOptions& options) {
  if (!testing::have_gpu()) return nullptr;
  auto r = cuda::create_backend(options);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return nullptr;
  return std::move(r).value();
}
#endif

// Note [cross-entropy rows in flight]: the fused cross-entropy gives the bits of one block a row for any grid
// (--xent-blocks): bf16 and f32 rows on the vector path (a multiple of 16 bytes) and off it, padding columns, rows
// without a target (Note [loss mask]), in place and not.
TEST(SoftmaxXentFused, AnyGridGivesTheSameBitsOnCuda) {
#ifdef TIERTRAIN_HAVE_CUDA
  TT_SKIP_WITHOUT_GPU();
  struct Shape2 {
    int64_t rows;
    int V, valid;
  };
  for (const DType dt : {DType::kBF16, DType::kF32})
    for (const Shape2 sh : {Shape2{29, 136, 130}, Shape2{29, 131, 131}, Shape2{7, 1024, 1000}})
      for (const bool in_place : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " rows " + std::to_string(sh.rows) + " V " + std::to_string(sh.V) +
                     (in_place ? " in place" : ""));
        Rng rng(3);
        const size_t n = static_cast<size_t>(sh.rows) * sh.V, es = dtype_size(dt);
        std::vector<uint8_t> logits(n * es);
        for (size_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(3.0 * rng.normal());
          if (dt == DType::kBF16) {
            const uint16_t h = float_to_bf16(v);
            std::memcpy(&logits[i * 2], &h, 2);
          } else {
            std::memcpy(&logits[i * 4], &v, 4);
          }
        }
        std::vector<int32_t> targets(static_cast<size_t>(sh.rows));
        for (size_t r = 0; r < targets.size(); ++r)
          targets[r] = r % 5 == 2 ? -1 : static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(sh.valid)));
        std::vector<std::vector<uint8_t>> out;
        for (const int64_t grid : {int64_t(0), int64_t(1), int64_t(3), int64_t(8), int64_t(1000)}) {
          auto be = cuda_backend_of({.device_budget = int64_t(256) << 20, .xent_blocks = grid});
          ASSERT_NE(be, nullptr);
          Stream& st = be->compute_stream();
          Tensor tl = be->pool().allocate({sh.rows, sh.V}, dt, TensorClass::kWorkspace, "logits").value();
          Tensor td = in_place ? tl : be->pool().allocate({sh.rows, sh.V}, dt, TensorClass::kWorkspace, "d").value();
          Tensor tt = be->pool().allocate({sh.rows}, DType::kI32, TensorClass::kWorkspace, "targets").value();
          Tensor tlo = be->pool().allocate({sh.rows}, DType::kF32, TensorClass::kWorkspace, "losses").value();
          be->copy_h2d(tl, logits.data(), st);
          be->copy_h2d(tt, targets.data(), st);
          be->softmax_xent_fused(tlo, td, tl, tt, 0.25f, sh.valid);
          std::vector<uint8_t> got(n * es + static_cast<size_t>(sh.rows) * 4);
          be->copy_d2h(got.data(), td, st);
          be->copy_d2h(got.data() + n * es, tlo, st);
          ASSERT_TRUE(st.synchronize().is_ok());
          out.push_back(std::move(got));
        }
        for (size_t k = 1; k < out.size(); ++k) EXPECT_EQ(out[k], out[0]) << "grid case " << k;
      }
#else
  GTEST_SKIP() << "a build without CUDA";
#endif
}

// gemm_impl=cublaslt (backend/gemm_options.h): the GEMMs without an epilogue through cuBLASLt in bf16 (counted),
// against the CPU as the default path is; f32 stays on cublasGemmEx.
TEST_P(BackendOps, MatmulOnCublasLt) {
#ifdef TIERTRAIN_HAVE_CUDA
  auto be = cuda_backend_of({.device_budget = int64_t(1) << 30, .gemm = GemmImpl::kCublasLt});
  ASSERT_NE(be, nullptr);
  const auto plain = [&] {
    const auto c = be->counters();
    return c.count("cublaslt_plain_gemms") ? c.at("cublaslt_plain_gemms") : int64_t(0);
  };
  const int OC = 72;
  const int64_t before = plain();
  compare_op(*be, "matmul_forward (no bias)", {{"out", {N, OC}, DType::kF32, true}, {"inp", {N, C}}, {"w", {OC, C}}},
             [](Backend& b, const std::vector<Tensor>& t) { b.matmul_forward(t[0], t[1], t[2], Tensor()); },
             tol(1e-4, 3e-2), tol(1e-4, 3e-2), dt());
  for (const GradWrite gw : kGradWrites)
    compare_op(*be, "matmul_backward" + suffix(gw), matmul_backward_args(N, C, OC, gw), bind(kMatmulBackward, gw),
               tol(2e-4, 3e-2), tol(1e-4, 3e-2), dt());
  // bf16: the forward, then dinp and dW for each way of writing the gradients.
  EXPECT_EQ(plain() - before, dt() == DType::kBF16 ? 5 : 0);
#endif
}

std::unique_ptr<Backend> make_cudnn_backend(bool deterministic = true) {
#ifdef TIERTRAIN_HAVE_CUDA
  const auto lib = cudnn::load("");
  if (!lib.is_ok()) {
    std::printf("no cuDNN here, its cases skipped: %s\n", lib.status().to_string().c_str());
    return nullptr;
  }
  auto be = cuda_backend_of({.device = 0,
                             .device_budget = int64_t(3) << 30,
                             .attention = {.impl = AttentionImpl::kCudnn, .deterministic = deterministic},
                             .attention_workspace_bytes = (int64_t(512) << 20) + (1 << 20)});
  if (be) std::printf("%s\n", be->describe().c_str());
  return be;
#else
  return nullptr;
#endif
}

// The fused f32 backward's d(q) partials of one (b, h) pair (Note [d(q) from the key tiles]): a 64 x hs fp32 tile for
// each pair of a key tile and a query tile at or after it.
int64_t dq_partials_bytes(int64_t T, int64_t hs) {
  const int64_t tiles = (T + 63) / 64;
  return tiles * (tiles + 1) / 2 * 64 * hs * 4;
}

// Whether a workspace of ws bytes holds the GEMMs of one (b, h) pair at length T (Note [f32 attention by GEMMs]).
bool gemm_pair_fits(int64_t ws, int64_t T) {
#ifdef TIERTRAIN_HAVE_CUDA
  return cuda::attention_workspace_for({.B = 1, .T = T, .H = 1, .hs = 96, .bf16 = false},
                                       {.workspace_cap = ws, .f32 = F32Attention::kGemm}) > 0;
#else
  (void)ws, (void)T;
  return false;
#endif
}

// A CUDA backend whose f32 attention runs as cuBLAS GEMMs (f32_attention=gemm, Note [f32 attention by GEMMs]) over
// a workspace that holds one (batch, head) pair at length T: longer sequences fall back to our SIMT kernels, shorter
// ones run in chunks.
std::unique_ptr<Backend> make_gemm_attention_backend(int64_t T) {
#ifdef TIERTRAIN_HAVE_CUDA
  if (!testing::have_gpu()) return nullptr;
  const AttentionOptions gemm{.impl = AttentionImpl::kNative, .f32 = F32Attention::kGemm};
  const int64_t ws = cuda::attention_workspace_for({.B = 1, .T = T, .H = 1, .hs = 64, .bf16 = false}, gemm);
  EXPECT_GT(ws, 2 * T * T * 4);
  // The fused kernels take head size 64 with a workspace for their backward's d(q) partials only.
  EXPECT_EQ(cuda::attention_workspace_for({.B = 1, .T = T, .H = 1, .hs = 64, .bf16 = false}, {}),
            dq_partials_bytes(T, 64));
  return cuda_backend_of(
      {.device = 0, .device_budget = int64_t(1) << 30, .attention = gemm, .attention_workspace_bytes = ws});
#else
  (void)T;
  return nullptr;
#endif
}

// A CUDA backend whose f32 attention always runs on our SIMT flash kernels (f32_attention=simt).
std::unique_ptr<Backend> make_simt_attention_backend() {
#ifdef TIERTRAIN_HAVE_CUDA
  return cuda_backend_of({.device = 0,
                          .device_budget = int64_t(1) << 30,
                          .attention = {.impl = AttentionImpl::kNative, .f32 = F32Attention::kSimt}});
#else
  return nullptr;
#endif
}

int64_t counter(Backend& be, const char* name) {
  const auto c = be.counters();
  const auto it = c.find(name);
  return it == c.end() ? 0 : it->second;
}

// A CUDA backend whose fused f32 backward gets d(q) from the d(k)/d(v) pass (Note [d(q) from the key tiles]) over a
// workspace of one (b, h) pair's partials at length T and head size 64: the shorter cases run in chunks of pairs,
// the longer ones take the d(q) kernel.
std::unique_ptr<Backend> make_f32_partials_backend(int64_t T) {
#ifdef TIERTRAIN_HAVE_CUDA
  return cuda_backend_of({.device = 0,
                          .device_budget = int64_t(1) << 30,
                          .attention = {.impl = AttentionImpl::kNative},
                          .attention_workspace_bytes = dq_partials_bytes(T, 64)});
#else
  (void)T;
  return nullptr;
#endif
}

// Every case on our kernels (be_); where cuDNN loads, on a backend with attention_impl=cudnn: the cases cuDNN takes
// (bf16, head size 64 or 128, T >= 2) run there, the others fall back to our kernels. In f32 the default backends
// run head sizes 64 and 128 on the fused 3xTF32 kernels (Note [3xTF32 attention]); two more backends take every f32
// case: one whose attention runs as GEMMs over a workspace of one pair at T = 601 (several chunks of pairs where the
// sequence is short, four causal query ranges at 601, the SIMT kernels at 700), and one on the SIMT kernels; and a
// third the fused cases: d(q) from the d(k)/d(v) pass (Note [d(q) from the key tiles]) over a workspace of one pair's
// partials at T = 300 (chunks of one pair up to 300, the d(q) kernel beyond; be_ reserves no workspace and always
// takes the d(q) kernel, the cuDNN backend's 513 MiB hold every case's partials whole). All against the CPU.
TEST_P(BackendOps, Attention) {
  std::unique_ptr<Backend> cudnn_be = make_cudnn_backend();
  const bool f32 = dt() == DType::kF32;
  std::unique_ptr<Backend> gemm_be = f32 ? make_gemm_attention_backend(601) : nullptr;
  std::unique_ptr<Backend> simt_be = f32 ? make_simt_attention_backend() : nullptr;
  std::unique_ptr<Backend> partials_be = f32 ? make_f32_partials_backend(300) : nullptr;
  for (const AttentionCase& c :
       {AttentionCase{B, T, C, H}, AttentionCase{2, 100, 128, 2}, AttentionCase{1, 130, 256, 2},
        AttentionCase{2, 1, 128, 2}, AttentionCase{1, 64, 96, 1}, AttentionCase{1, 200, 64, 4},
        AttentionCase{3, 300, 256, 4}, AttentionCase{1, 601, 128, 2}, AttentionCase{1, 700, 64, 1},
        // grouped-query: general kernels (head size 12), tensor cores (and cuDNN) at 64 (groups of 2 and 4) and 128
        // (one key/value head: multi-query)
        AttentionCase{B, T, C, H, 2}, AttentionCase{2, 100, 256, 4, 2}, AttentionCase{1, 200, 512, 8, 2},
        AttentionCase{2, 130, 512, 4, 1}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " C " + std::to_string(c.C) + " H " +
                 std::to_string(c.H) + " KV " + std::to_string(c.kv()));
    const int hs = c.C / c.H;
    const bool mha = c.kv() == c.H;  // 3xTF32 and the f32 GEMMs take multi-head attention only
    for (Backend* be : {be_.get(), cudnn_be.get(), gemm_be.get(), simt_be.get(), partials_be.get()}) {
      if (be == nullptr) continue;
      SCOPED_TRACE(be == be_.get()           ? "our kernels"
                   : be == gemm_be.get()     ? "f32_attention=gemm"
                   : be == simt_be.get()     ? "f32_attention=simt"
                   : be == partials_be.get() ? "d(q) partials over one pair's workspace"
                                             : "attention_impl=cudnn");
      const int64_t fwd0 = counter(*be, "cudnn_attention_forward"), bwd0 = counter(*be, "cudnn_attention_backward");
      const int64_t gf0 = counter(*be, "gemm_attention_forward"), gb0 = counter(*be, "gemm_attention_backward");
      const int64_t tf0 = counter(*be, "tf32x3_attention_forward"), tb0 = counter(*be, "tf32x3_attention_backward");
      const int64_t tp0 = counter(*be, "tf32x3_attention_dq_partials");
      attention_case(*be, c);
      const bool cudnn_takes = be == cudnn_be.get() && dt() == DType::kBF16 && cudnn_takes_shape(c.T, hs);
      EXPECT_EQ(counter(*be, "cudnn_attention_forward") - fwd0, cudnn_takes ? 2 : 0);
      EXPECT_EQ(counter(*be, "cudnn_attention_backward") - bwd0, cudnn_takes ? 1 : 0);
      const bool fused = f32 && mha && (be == be_.get() || be == cudnn_be.get() || be == partials_be.get()) &&
                         (hs == 64 || hs == 128);
      EXPECT_EQ(counter(*be, "tf32x3_attention_forward") - tf0, fused ? 2 : 0);
      EXPECT_EQ(counter(*be, "tf32x3_attention_backward") - tb0, fused ? 1 : 0);
      const bool partials = fused && (be == cudnn_be.get() || (be == partials_be.get() &&
                                                               dq_partials_bytes(c.T, hs) <= dq_partials_bytes(300, 64)));
      EXPECT_EQ(counter(*be, "tf32x3_attention_dq_partials") - tp0, partials ? 1 : 0);
      // The cuDNN backend's workspace (513 MiB) holds f32 pairs too: its f32 cases the fused kernels do not take
      // run as GEMMs; so do the partials backend's where its workspace holds a GEMM pair (T 37 and 64, not 200).
      const bool gemm = f32 && !fused && mha &&
                        (be == cudnn_be.get() || (be == gemm_be.get() && c.T <= 601) ||
                         (be == partials_be.get() && gemm_pair_fits(dq_partials_bytes(300, 64), c.T)));
      EXPECT_EQ(counter(*be, "gemm_attention_forward") - gf0, gemm ? 2 : 0);
      EXPECT_EQ(counter(*be, "gemm_attention_backward") - gb0, gemm ? 1 : 0);
    }
  }
}

void BackendOps::attention_case(Backend& target, const AttentionCase& c) {
  {
    const int64_t b = c.B, t = c.T, ch = c.C, h = c.H;
    const int64_t cq = ch + 2 * static_cast<int64_t>(c.kv()) * (ch / h);  // a row of qkv
    const int heads = c.H;
    auto check = [&](const std::string& op, const std::vector<Arg>& args, const OpFn& fn, double atol32,
                     double rtol32, double atol16 = 3e-2, double rtol16 = 3e-2) {
      compare_op(target, op, args, fn, tol(atol32, atol16), tol(rtol32, rtol16), dt());
    };
    check("attention_forward",
          {{"out", {b, t, ch}, DType::kF32, true}, {"lse", {b, h, t}, DType::kF32, true},
           {"qkv", {b, t, cq}}},
          [heads](Backend& be, const std::vector<Tensor>& ts) { be.attention_forward(ts[0], ts[1], ts[2], heads); },
          kAtol, kRtol);
    // Note [KV cache]: the last query of each sequence over its keys.
    check("attention_decode",
          {{"out", {b, ch}, DType::kF32, true}, {"cache", {b, t, cq}, DType::kF32, true}, {"qkv", {b, cq}},
           {"pos", {b}, DType::kI32, false, static_cast<int>(t)}},
          [heads](Backend& be, const std::vector<Tensor>& ts) {
            be.attention_decode(ts[0], ts[1], ts[2], ts[3], heads);
          },
          kAtol, kRtol);
    check("embedding_at",
          {{"out", {b, ch}, DType::kF32, true}, {"tokens", {b}, DType::kI32, false, 5},
           {"positions", {b}, DType::kI32, false, static_cast<int>(t)}, {"wte", {5, ch}}, {"wpe", {t, ch}}},
          [](Backend& be, const std::vector<Tensor>& ts) { be.embedding_at(ts[0], ts[1], ts[2], ts[3], ts[4]); },
          kAtol, kRtol);
    // The backward needs the forward's out and lse: computed first on each backend.
    check("attention_backward",
          {{"dqkv", {b, t, cq}, DType::kF32, true}, {"dout", {b, t, ch}}, {"qkv", {b, t, cq}},
           {"out", {b, t, ch}}, {"lse", {b, h, t}}},
          [heads](Backend& be, const std::vector<Tensor>& ts) {
            be.attention_forward(ts[3], ts[4], ts[2], heads);
            be.attention_backward(ts[0], ts[1], ts[2], ts[3], ts[4], heads);
          },
          1e-4, 1e-4, 6e-2, 6e-2);
  }
}

// What an f32 run reserves for attention (no GPU needed): where the fused 3xTF32 kernels take the shape, the d(q)
// partials of as many (b, h) pairs as the cap allows, nothing where fewer than 32 fit (or all of them, when fewer);
// nothing for the SIMT kernels; a workspace for the SGEMMs where they run (f32_attention=gemm, or a head size the
// fused kernels do not take).
TEST(AttentionReserve, F32ReservesAWorkspaceForItsGemmsAndTheFusedBackwardsPartials) {
#ifdef TIERTRAIN_HAVE_CUDA
  const AttentionShape gpt2{.B = 16, .T = 1024, .H = 12, .hs = 64, .bf16 = false};
  const int64_t per_pair = dq_partials_bytes(1024, 64);  // 2.1 MiB
  EXPECT_EQ(backend_reserve("cuda", gpt2, {}).attention_workspace_bytes, 192 * per_pair);
  EXPECT_EQ(backend_reserve("cuda", gpt2, {.workspace_cap = 100 << 20}).attention_workspace_bytes,
            (int64_t(100) << 20) / per_pair * per_pair);
  EXPECT_EQ(backend_reserve("cuda", gpt2, {.workspace_cap = 31 * per_pair}).attention_workspace_bytes, 0);
  EXPECT_EQ(backend_reserve("cuda", gpt2, {.workspace_cap = 32 * per_pair}).attention_workspace_bytes, 32 * per_pair);
  const AttentionShape few{.B = 2, .T = 1024, .H = 4, .hs = 64, .bf16 = false};  // 8 pairs: all of them or nothing
  EXPECT_EQ(backend_reserve("cuda", few, {.workspace_cap = 8 * per_pair}).attention_workspace_bytes, 8 * per_pair);
  EXPECT_EQ(backend_reserve("cuda", few, {.workspace_cap = 7 * per_pair}).attention_workspace_bytes, 0);
  EXPECT_EQ(backend_reserve("cuda", gpt2, {.f32 = F32Attention::kSimt}).attention_workspace_bytes, 0);
  EXPECT_GT(backend_reserve("cuda", gpt2, {.f32 = F32Attention::kGemm}).attention_workspace_bytes, 0);
  const AttentionShape hs128{.B = 8, .T = 2048, .H = 32, .hs = 128, .bf16 = false};
  // 16.5 MiB a pair: 31 fit the 512 MiB default, 124 fit 2 GiB.
  EXPECT_EQ(backend_reserve("cuda", hs128, {}).attention_workspace_bytes, 0);
  EXPECT_EQ(backend_reserve("cuda", hs128, {.workspace_cap = int64_t(2) << 30}).attention_workspace_bytes,
            124 * dq_partials_bytes(2048, 128));
  const AttentionShape hs96{.B = 16, .T = 1024, .H = 8, .hs = 96, .bf16 = false};
  EXPECT_GT(backend_reserve("cuda", hs96, {}).attention_workspace_bytes, 0);
#else
  GTEST_SKIP() << "a build without CUDA";
#endif
}

// One bf16 attention forward and `repeats` backwards on `be`; dqkv is poisoned (NaN) before each backward, so an
// element the backward does not write shows. Returns out, lse and each backward's dqkv.
struct AttentionRun {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  std::vector<std::vector<uint16_t>> dqkv;
};
// kv: key/value heads (0: h); qkv rows of c + 2 kv c / h values.
AttentionRun run_bf16_attention(Backend& be, int b, int t, int c, int h, const std::vector<uint16_t>& qkv,
                                const std::vector<uint16_t>& dout, int repeats, int kv = 0) {
  const int64_t cq = c + 2 * static_cast<int64_t>(kv > 0 ? kv : h) * (c / h);
  auto take = [&](Shape shape, DType dt, const char* name) {
    auto r = be.pool().allocate(shape, dt, TensorClass::kWorkspace, name);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.value();
  };
  Stream& s = be.compute_stream();
  Tensor tq = take({b, t, cq}, DType::kBF16, "qkv"), to = take({b, t, c}, DType::kBF16, "out"),
         tl = take({b, h, t}, DType::kF32, "lse"), tg = take({b, t, c}, DType::kBF16, "dout"),
         td = take({b, t, cq}, DType::kBF16, "dqkv");
  be.copy_h2d(tq, qkv.data(), s);
  be.copy_h2d(tg, dout.data(), s);
  be.attention_forward(to, tl, tq, h);
  AttentionRun r;
  r.out.resize(static_cast<size_t>(b) * t * c);
  r.lse.resize(static_cast<size_t>(b) * h * t);
  be.copy_d2h(r.out.data(), to, s);
  be.copy_d2h(r.lse.data(), tl, s);
  const std::vector<uint16_t> poison(qkv.size(), 0x7fc0);  // bf16 NaN
  for (int i = 0; i < repeats; ++i) {
    be.copy_h2d(td, poison.data(), s);
    be.attention_backward(td, tg, tq, to, tl, h);
    r.dqkv.emplace_back(qkv.size());
    be.copy_d2h(r.dqkv.back().data(), td, s);
    EXPECT_TRUE(s.synchronize().is_ok());
  }
  for (Tensor* x : {&td, &tg, &tl, &to, &tq}) be.pool().free(*x);
  return r;
}

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(static_cast<float>(rng.normal()));
  return v;
}
std::vector<float> to_float(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

// A case's name for the traces, and its random qkv [B, T, C + 2 KV hs] and dout [B, T, C] (seeds `seed`, seed + 1).
std::string case_name(const AttentionCase& c) {
  return "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " KV " +
         std::to_string(c.kv());
}
std::pair<std::vector<uint16_t>, std::vector<uint16_t>> attention_inputs(const AttentionCase& c, uint64_t seed) {
  const size_t cq = static_cast<size_t>(c.C) + 2 * static_cast<size_t>(c.kv()) * (c.C / c.H);
  return {random_bf16(static_cast<size_t>(c.B) * c.T * cq, seed),
          random_bf16(static_cast<size_t>(c.B) * c.T * c.C, seed + 1)};
}

// cuDNN against our tensor-core kernels at the shapes the trainer runs (head size 64 and 128; grouped-query: 32 query
// heads over 8, Llama-3.2-1B's): out and dqkv within bf16 tolerances, lse (fp32 on both sides) to 1e-4.
TEST(AttentionCudnn, MatchesOurKernels) {
  TT_SKIP_WITHOUT_GPU();
  std::unique_ptr<Backend> cudnn_be = make_cudnn_backend();
  if (!cudnn_be) GTEST_SKIP() << "no cuDNN";
  std::unique_ptr<Backend> ours = testing::make_cuda_backend(int64_t(2) << 30);
  for (const AttentionCase& c : {AttentionCase{2, 1024, 768, 12}, AttentionCase{1, 2048, 512, 4},
                                 AttentionCase{2, 1024, 2048, 32, 8}}) {
    SCOPED_TRACE(case_name(c));
    const auto [qkv, dout] = attention_inputs(c, 7);
    const int64_t before = counter(*cudnn_be, "cudnn_attention_backward");
    const AttentionRun want = run_bf16_attention(*ours, c.B, c.T, c.C, c.H, qkv, dout, 1, c.kv());
    const AttentionRun got = run_bf16_attention(*cudnn_be, c.B, c.T, c.C, c.H, qkv, dout, 1, c.kv());
    EXPECT_EQ(counter(*cudnn_be, "cudnn_attention_backward") - before, 1);
    EXPECT_TRUE(testing::all_close("out", to_float(got.out), to_float(want.out), 3e-2, 3e-2));
    EXPECT_TRUE(testing::all_close("lse", got.lse, want.lse, 1e-4, 0.0));
    EXPECT_TRUE(testing::all_close("dqkv", to_float(got.dqkv[0]), to_float(want.dqkv[0]), 6e-2, 6e-2));
  }
}

// The deterministic backward graph: bit-identical over repeated runs at GPT-2's shape, where cuDNN's default
// backward was measured not to repeat (docs/design/cudnn-attention.md §2), and grouped-query (32 query heads over 8,
// whose d(k), d(v) go through the graph's sum reductions; a batch of 4 in two chunks of the 513 MiB workspace).
TEST(AttentionCudnn, BackwardIsBitIdenticalOverRuns) {
  TT_SKIP_WITHOUT_GPU();
  std::unique_ptr<Backend> cudnn_be = make_cudnn_backend();
  if (!cudnn_be) GTEST_SKIP() << "no cuDNN";
  int64_t calls = 0;
  for (const AttentionCase& c : {AttentionCase{16, 1024, 768, 12}, AttentionCase{4, 1024, 2048, 32, 8}}) {
    SCOPED_TRACE(case_name(c));
    const auto [qkv, dout] = attention_inputs(c, 9);
    const AttentionRun r = run_bf16_attention(*cudnn_be, c.B, c.T, c.C, c.H, qkv, dout, 5, c.kv());
    calls += 5;
    EXPECT_EQ(counter(*cudnn_be, "cudnn_attention_backward"), calls);
    for (int i = 1; i < 5; ++i) EXPECT_TRUE(r.dqkv[static_cast<size_t>(i)] == r.dqkv[0]) << "run " << i << " differs";
    size_t nonfinite = 0;
    for (uint16_t x : r.dqkv[0]) nonfinite += (x & 0x7f80) == 0x7f80;
    EXPECT_EQ(nonfinite, 0u) << "elements of dqkv not written (NaN poison left) or not finite";
  }
}

// Note [non-deterministic backward]: cuDNN's default backward (d(q) accumulated in fp32 at the workspace's start)
// against our kernels at the trainer's shapes, within the tolerances of the deterministic form; three backwards in a
// row, each within them (the accumulator that the previous call left full is cleared by cuDNN, not summed onto), and
// within bf16 rounding of the deterministic form. The grouped-query shape runs whole (B 4) where the deterministic
// form took chunks.
TEST(AttentionCudnn, NonDeterministicBackwardMatchesOurKernels) {
  TT_SKIP_WITHOUT_GPU();
  std::unique_ptr<Backend> fast = make_cudnn_backend(/*deterministic=*/false);
  if (!fast) GTEST_SKIP() << "no cuDNN";
  std::unique_ptr<Backend> det = make_cudnn_backend();
  std::unique_ptr<Backend> ours = testing::make_cuda_backend(int64_t(2) << 30);
  EXPECT_NE(fast->describe().find("non-deterministic backward"), std::string::npos) << fast->describe();
  for (const AttentionCase& c : {AttentionCase{2, 1024, 768, 12}, AttentionCase{1, 2048, 512, 4},
                                 AttentionCase{4, 1024, 2048, 32, 8}}) {
    SCOPED_TRACE(case_name(c));
    const auto [qkv, dout] = attention_inputs(c, 11);
    const int64_t before = counter(*fast, "cudnn_attention_backward");
    const AttentionRun want = run_bf16_attention(*ours, c.B, c.T, c.C, c.H, qkv, dout, 1, c.kv());
    const AttentionRun same = run_bf16_attention(*det, c.B, c.T, c.C, c.H, qkv, dout, 1, c.kv());
    const AttentionRun got = run_bf16_attention(*fast, c.B, c.T, c.C, c.H, qkv, dout, 3, c.kv());
    EXPECT_EQ(counter(*fast, "cudnn_attention_backward") - before, 3);
    EXPECT_TRUE(testing::all_close("out", to_float(got.out), to_float(want.out), 3e-2, 3e-2));
    for (size_t i = 0; i < got.dqkv.size(); ++i) {
      SCOPED_TRACE("backward " + std::to_string(i));
      EXPECT_TRUE(testing::all_close("dqkv", to_float(got.dqkv[i]), to_float(want.dqkv[0]), 6e-2, 6e-2));
      EXPECT_TRUE(testing::all_close("dqkv vs deterministic", to_float(got.dqkv[i]), to_float(same.dqkv[0]), 2e-2,
                                     2e-2));
    }
  }
}

TEST_P(BackendOps, Elementwise) {
  check("gelu_forward", {{"out", {N, C}, DType::kF32, true}, {"inp", {N, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.gelu_forward(t[0], t[1]); }, kAtol, kRtol);
  check("gelu_backward", {{"dinp", {N, C}, DType::kF32, true}, {"inp", {N, C}}, {"dout", {N, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.gelu_backward(t[0], t[1], t[2]); }, kAtol, kRtol);
  check("residual_forward", {{"out", {N, C}, DType::kF32, true}, {"a", {N, C}}, {"b", {N, C}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.residual_forward(t[0], t[1], t[2]); }, 0, 0);
}

TEST_P(BackendOps, SoftmaxCrossEntropy) {
  check("softmax_xent_forward",
             {{"losses", {N}, DType::kF32, true}, {"probs", {N, V}, DType::kF32, true}, {"logits", {N, V}},
              {"targets", {N}, DType::kI32, false, V - 3}},
             [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_forward(t[0], t[1], t[2], t[3], V - 3); }, kAtol,
             kRtol);
  check("softmax_xent_forward (in place)",
             {{"losses", {N}, DType::kF32, true}, {"logits", {N, V}, DType::kF32, true},
              {"targets", {N}, DType::kI32, false, V - 3}},
             [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_forward(t[0], t[1], t[1], t[2], V - 3); }, kAtol,
             kRtol);
  for (const bool in_place : {false, true}) {
    check(in_place ? "softmax_xent_fused (in place)" : "softmax_xent_fused",
          {{"losses", {N}, DType::kF32, true}, {"dlogits", {N, V}, DType::kF32, true}, {"logits", {N, V}},
           {"targets", {N}, DType::kI32, false, V - 3}},
          [in_place](Backend& be, const std::vector<Tensor>& t) {
            be.softmax_xent_fused(t[0], t[1], in_place ? t[1] : t[2], t[3], 0.125f, V - 3);
          },
          kAtol, kRtol);
  }
  // Rows of a multiple of 16 bytes take the CUDA kernel's vector path.
  check("softmax_xent_fused (vector rows)",
        {{"losses", {N}, DType::kF32, true}, {"dlogits", {N, 128}, DType::kF32, true}, {"logits", {N, 128}},
         {"targets", {N}, DType::kI32, false, 101}},
        [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_fused(t[0], t[1], t[2], t[3], 0.5f, 101); },
        kAtol, kRtol);
  check("softmax_xent_backward",
             {{"dlogits", {N, V}, DType::kF32, true}, {"probs", {N, V}}, {"targets", {N}, DType::kI32, false, V - 3}},
             [](Backend& be, const std::vector<Tensor>& t) { be.softmax_xent_backward(t[0], t[1], t[2], 0.125f, V - 3); },
             kAtol, kRtol);
}

TEST_P(BackendOps, Optimizer) {
  check("sum_squares", {{"out_norm", {1}, DType::kF32, true}, {"grad", {100003}}},
             [](Backend& be, const std::vector<Tensor>& t) { be.sum_squares(t[0], t[1]); }, 0, 1e-6, 0, 1e-6);
  // Long enough for the CUDA kernel's two 16-byte loads a thread a turn, its single last load and its scalar tail;
  // and from an odd offset (not 16-byte aligned: the scalar loop throughout).
  for (const int64_t offset : {0, 1}) {
    check("sum_squares (3M, offset " + std::to_string(offset) + ")",
          {{"out_norm", {1}, DType::kF32, true}, {"grad", {3000007}}},
          [offset](Backend& be, const std::vector<Tensor>& t) {
            be.sum_squares(t[0], t[1].view(offset, {3000005 - offset}));
          },
          0, 1e-6, 0, 1e-6);
  }
  for (float clip : {0.0f, 0.5f}) {
    check("adamw_update",
               {{"param", {1000}, DType::kF32, true}, {"grad", {1000}}, {"m", {1000}, DType::kF32, true},
                {"v", {1000}, DType::kF32, true, 0, false, true}, {"norm_sq", {1}, DType::kF32, false, 0, false, true}},
               [clip](Backend& be, const std::vector<Tensor>& t) {
                 AdamWArgs a;
                 a.lr = 1e-2f;
                 a.weight_decay = 0.1f;
                 a.step = 3;
                 a.grad_clip = clip;
                 be.adamw_update(t[0], t[1], t[2], t[3], t[4], a, Tensor());
               },
               1e-6, 1e-5, 1e-6, 1e-5);  // master dtype either way
  }
  // Several parameters in one call (Note [device update by segment]): pieces with and without decay, an odd length
  // (the vectorised kernel's tail), and the compute copy written in the same pass: the master, moments and copy
  // compared in turn (the copy to bf16 rounding with bf16 compute: 2^-8 relative).
  const OpFn pieces = [](Backend& be, const std::vector<Tensor>& t) {
    AdamWArgs a;
    a.lr = 1e-2f;
    a.weight_decay = 0.5f;
    a.step = 2;
    a.grad_clip = 0.5f;
    EXPECT_TRUE(a.add_piece(101, true) && a.add_piece(333, false) && a.add_piece(334, true) &&
                a.add_piece(1003, false));
    EXPECT_EQ(a.pieces, 4);
    be.adamw_update(t[0], t[1], t[2], t[3], t[4], a, t[5]);
  };
  for (bool copy : {false, true}) {
    check(copy ? "adamw_update pieces (copy)" : "adamw_update pieces",
          {{"param", {1003}, DType::kF32, !copy}, {"grad", {1003}}, {"m", {1003}, DType::kF32, !copy},
           {"v", {1003}, DType::kF32, !copy, 0, false, true}, {"norm_sq", {1}, DType::kF32, false, 0, false, true},
           {"copy", {1003}, DType::kF32, copy}},
          pieces, 1e-6, 1e-5, copy ? 1e-6 : 1e-6, copy ? 4e-3 : 1e-5);
  }
}

TEST_P(BackendOps, CopiesAndEvents) {
  if (dt() == DType::kBF16) GTEST_SKIP() << "dtype-independent";
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

// Note [device update by segment] in exec/optimizer.cc: one call over several parameters, with its pieces and the
// bf16 copy written in its pass, gives the same bits as one call per parameter, and the copy is the new master's
// high half (Note [master in two halves] in core/bf16.h); the same call on a master in two halves gives the same
// master, moments and copy: on the backend `be`.
void expect_pieces_equal_per_parameter_calls(Backend& be) {
  const std::vector<std::pair<int64_t, bool>> params = {{96, false}, {96, false}, {1000, true}, {35, false},
                                                        {2049, true}, {7, false}, {64, true}};
  int64_t n = 0;
  for (const auto& p : params) n += p.first;
  Rng rng(7);
  std::vector<float> p0(static_cast<size_t>(n)), g(p0.size()), m0(p0.size()), v0(p0.size());
  for (size_t i = 0; i < p0.size(); ++i) {
    p0[i] = static_cast<float>(rng.normal());
    g[i] = static_cast<float>(rng.normal());
    m0[i] = static_cast<float>(0.1 * rng.normal());
    v0[i] = static_cast<float>(0.5 + rng.uniform());
  }
  // Masters whose high half is a tie (their update is zero: no gradient, no moments, no decay in that piece): ties
  // go away from zero, up for positive, down for negative.
  for (const auto& [at, bits] : std::vector<std::pair<size_t, uint32_t>>{{100, 0x3f808000u}, {101, 0xbf818000u}}) {
    p0[at] = std::bit_cast<float>(bits);
    g[at] = m0[at] = v0[at] = 0.0f;
  }
  const float norm_sq = 4.0f;  // above the clip of 1: the gradient is scaled
  auto alloc = [&](DType dt, const char* name) {
    auto t = be.pool().allocate({n}, dt, TensorClass::kWorkspace, name);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return t.value();
  };
  struct Out {
    std::vector<float> p, m, v;
    std::vector<uint16_t> copy;
  };
  enum class Mode { kOneCall, kPerParameter, kHalves };
  auto run = [&](Mode mode) {
    Tensor tp = alloc(mode == Mode::kHalves ? DType::kBF16 : DType::kF32, "p"), tg = alloc(DType::kF32, "g"),
           tm = alloc(DType::kF32, "m"), tv = alloc(DType::kF32, "v"), tc = alloc(DType::kBF16, "copy");
    auto tn = be.pool().allocate({1}, DType::kF32, TensorClass::kWorkspace, "norm");
    EXPECT_TRUE(tn.is_ok());
    Stream& st = be.compute_stream();
    std::vector<uint16_t> high(p0.size()), low(p0.size());
    for (size_t i = 0; i < p0.size(); ++i) {
      high[i] = bf16_high(p0[i]);
      low[i] = bf16_low(p0[i], high[i]);
    }
    if (mode == Mode::kHalves) {
      be.copy_h2d(tp, low.data(), st);
      be.copy_h2d(tc, high.data(), st);
    } else {
      be.copy_h2d(tp, p0.data(), st);
    }
    be.copy_h2d(tg, g.data(), st);
    be.copy_h2d(tm, m0.data(), st);
    be.copy_h2d(tv, v0.data(), st);
    be.copy_h2d(tn.value(), &norm_sq, st);
    AdamWArgs a;
    a.lr = 3e-3f;
    a.weight_decay = 0.1f;
    a.step = 5;
    a.grad_clip = 1.0f;
    if (mode != Mode::kPerParameter) {
      int64_t end = 0;
      for (const auto& [size, decay] : params) EXPECT_TRUE(a.add_piece(end += size, decay));
      EXPECT_EQ(a.pieces, 6);  // the first two merged
      a.split_master = mode == Mode::kHalves;
      be.adamw_update(tp, tg, tm, tv, tn.value(), a, tc);
    } else {
      int64_t at = 0;
      for (const auto& [size, decay] : params) {
        AdamWArgs b = a;
        b.weight_decay = decay ? a.weight_decay : 0.0f;
        be.adamw_update(tp.view(at, {size}), tg.view(at, {size}), tm.view(at, {size}), tv.view(at, {size}),
                        tn.value(), b, Tensor());
        at += size;
      }
    }
    Out o{std::vector<float>(p0.size()), std::vector<float>(p0.size()), std::vector<float>(p0.size()),
          std::vector<uint16_t>(p0.size())};
    if (mode == Mode::kHalves) {
      be.copy_d2h(low.data(), tp, st);
    } else {
      be.copy_d2h(o.p.data(), tp, st);
    }
    be.copy_d2h(o.m.data(), tm, st);
    be.copy_d2h(o.v.data(), tv, st);
    if (mode != Mode::kPerParameter) be.copy_d2h(o.copy.data(), tc, st);
    EXPECT_TRUE(st.synchronize().is_ok());
    for (Tensor t : {tn.value(), tc, tv, tm, tg, tp}) be.pool().free(t);
    if (mode == Mode::kHalves)
      for (size_t i = 0; i < o.p.size(); ++i) o.p[i] = bf16_join(o.copy[i], low[i]);
    if (mode == Mode::kPerParameter)
      for (size_t i = 0; i < o.p.size(); ++i) o.copy[i] = bf16_high(o.p[i]);
    return o;
  };
  const Out one = run(Mode::kOneCall), each = run(Mode::kPerParameter), halves = run(Mode::kHalves);
  for (const Out* o : {&each, &halves}) {
    SCOPED_TRACE(o == &each ? "one call a parameter" : "a master in two halves");
    EXPECT_EQ(0, std::memcmp(one.p.data(), o->p.data(), one.p.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(one.m.data(), o->m.data(), one.m.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(one.v.data(), o->v.data(), one.v.size() * sizeof(float)));
    EXPECT_EQ(one.copy, o->copy);
  }
  EXPECT_NE(one.p, p0);  // the update did something
  EXPECT_EQ(one.p[100], p0[100]);  // the ties were left as they were
  EXPECT_EQ(one.copy[100], 0x3f81);
  EXPECT_EQ(one.copy[101], 0xbf82);
  // Where the copy is not a tie it is the master rounded to nearest even (as convert() rounds).
  int64_t differ = 0;
  for (size_t i = 0; i < one.p.size(); ++i) {
    const bool tie = (std::bit_cast<uint32_t>(one.p[i]) & 0xffffu) == 0x8000u;
    if (!tie) {
      ASSERT_EQ(one.copy[i], float_to_bf16(one.p[i])) << i;
    }
    differ += one.copy[i] != float_to_bf16(one.p[i]);
  }
  EXPECT_GE(differ, 1);  // element 100's tie at least
}

TEST(AdamWPieces, OneCallEqualsPerParameterCallsOnCpu) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20);
  expect_pieces_equal_per_parameter_calls(*be);
}

TEST(AdamWPieces, OneCallEqualsPerParameterCallsOnCuda) {
  TT_SKIP_WITHOUT_GPU();
  auto be = testing::make_cuda_backend(int64_t(256) << 20);
  ASSERT_NE(be, nullptr);
  expect_pieces_equal_per_parameter_calls(*be);
}

// Note [bf16 gradients] (exec/executor.h): the ops that write parameter gradients write bf16 ones as their f32 ones
// rounded once to nearest even, written and added (the add widened from the bf16 value first); sum_squares of a
// bf16 tensor is the sum of its widened squares; AdamW reading bf16 gradients gives the bits of AdamW reading their
// widened f32 values. On the CPU (f32 compute) every rounding is exact; on CUDA (bf16 compute) the vector
// gradients (through the f32 kernels and a conversion) too, while cuBLAS's bf16 dW may come from another kernel than
// its f32 one, which sums the products in another order: within one bf16 step of the rounded f32 product, or within
// what two f32 sums of the same terms in any orders can differ by. Added to a bf16 start value, cuBLAS rounds twice
// (its epilogue: on the H100 6 of 6144 elements were beyond that bound, where the sum cancels): within one bf16 step
// of the terms' size there. No plan adds into bf16 weight gradients (Note [bf16 gradients]: --grad-accum 1).
void expect_bf16_gradients_are_rounded_f32(Backend& be, DType compute) {
  const int64_t N = 48, C = 64, OC = 96;
  Rng rng(5);
  auto rnd = [&](int64_t n, double scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(scale * rng.normal());
    if (compute == DType::kBF16)
      for (float& x : v) x = bf16_to_float(float_to_bf16(x));
    return v;
  };
  Stream& st = be.compute_stream();
  std::vector<Tensor> owned;
  auto up = [&](const std::vector<float>& v, Shape shape, DType dt) {
    Tensor t = be.pool().allocate(shape, dt, TensorClass::kWorkspace, "t").value();
    owned.push_back(t);
    if (dt == DType::kBF16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_bf16(v[i]);
      be.copy_h2d(t, h.data(), st);
      EXPECT_TRUE(st.synchronize().is_ok());
    } else {
      be.copy_h2d(t, v.data(), st);
      EXPECT_TRUE(st.synchronize().is_ok());
    }
    return t;
  };
  auto down = [&](const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.dtype() == DType::kBF16) {
      std::vector<uint16_t> h(v.size());
      be.copy_d2h(h.data(), t, st);
      EXPECT_TRUE(st.synchronize().is_ok());
      for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(h[i]);
    } else {
      be.copy_d2h(v.data(), t, st);
      EXPECT_TRUE(st.synchronize().is_ok());
    }
    return v;
  };
  // The gradients' starting values are bf16 values, as the f32 reference's (what the add widens).
  auto rnd16 = [&](int64_t k, double scale) {
    std::vector<float> v = rnd(k, scale);
    for (float& e : v) e = bf16_to_float(float_to_bf16(e));
    return v;
  };
  const std::vector<float> x = rnd(N * C, 1.0), dout = rnd(N * OC, 1.0), w = rnd(OC * C, 0.1), dn = rnd(N * C, 1.0),
                           gain = rnd(C, 1.0), start_w = rnd16(OC * C, 0.1), start_b = rnd16(OC, 0.1),
                           start_g = rnd16(C, 0.1), start_g2 = rnd16(C, 0.1);
  std::vector<float> rstd(static_cast<size_t>(N)), mean(static_cast<size_t>(N));
  for (size_t i = 0; i < rstd.size(); ++i) rstd[i] = 0.5f + 0.01f * static_cast<float>(i), mean[i] = 0.1f;
  const DType md = compute == DType::kBF16 ? DType::kF32 : compute;
  // Each gradient op at both writes: the f32 gradients (started at the bf16 ones' widened values) against bf16.
  for (const GradWrite gw : {GradWrite::kOverwrite, GradWrite::kAccumulate}) {
    SCOPED_TRACE(gw == GradWrite::kAccumulate ? "adding" : "writing");
    std::vector<std::vector<float>> got, want;
    for (const DType gd : {md, DType::kBF16}) {
      const Tensor tx = up(x, {N, C}, compute), td = up(dout, {N, OC}, compute), tw = up(w, {OC, C}, compute);
      const Tensor dinp = up(std::vector<float>(static_cast<size_t>(N * C)), {N, C}, compute);
      const Tensor dw = up(start_w, {OC, C}, gd), db = up(start_b, {OC}, gd);
      be.matmul_backward(dinp, dw, db, td, tx, tw, gw);
      const Tensor tdn = up(dn, {N, C}, compute), tg = up(gain, {C}, compute), tr = up(rstd, {N}, md),
                   tm = up(mean, {N}, md), dx = up(std::vector<float>(static_cast<size_t>(N * C)), {N, C}, compute);
      const Tensor dg = up(start_g, {C}, gd), dg2 = up(start_g2, {C}, gd), db2 = up(start_g, {C}, gd);
      be.rmsnorm_backward(dx, dg, tdn, tx, tg, tr, gw);
      be.layernorm_backward(dx, dg2, db2, tdn, tx, tg, tm, tr, gw);
      std::vector<std::vector<float>>& into = gd == md ? want : got;
      for (const Tensor* t : {&dw, &db, &dg, &dg2, &db2}) into.push_back(down(*t));
    }
    // dW's element (o, c) sums N products dout[n, o] x[n, c] (and the start value when adding): the sizes of its
    // terms, which bound how far two f32 sums of them in different orders can be apart.
    std::vector<double> terms(static_cast<size_t>(OC * C));
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) {
        double t = gw == GradWrite::kAccumulate ? std::fabs(start_w[static_cast<size_t>(o * C + c)]) : 0.0;
        for (int64_t i = 0; i < N; ++i)
          t += std::fabs(static_cast<double>(dout[static_cast<size_t>(i * OC + o)]) * x[static_cast<size_t>(i * C + c)]);
        terms[static_cast<size_t>(o * C + c)] = t;
      }
    const char* names[] = {"dW", "dbias", "RMSNorm dgain", "LayerNorm dgain", "LayerNorm dbias"};
    for (size_t k = 0; k < got.size(); ++k) {
      SCOPED_TRACE(names[k]);
      int64_t rounded_differ = 0, beyond = 0;
      for (size_t i = 0; i < got[k].size(); ++i) {
        const float r = bf16_to_float(float_to_bf16(want[k][i]));
        if (got[k][i] == r) continue;
        ++rounded_differ;
        // one bf16 step: the difference of two neighbouring bf16 values at r's magnitude; for dW also the bound of
        // two f32 sums of its N + 1 terms in different orders, 2 (N + 1) 2^-24 of their sizes (a term lost or wrong
        // would be off by about 1/N of them: 200 times that)
        const float step = std::fabs(bf16_to_float(static_cast<uint16_t>(float_to_bf16(r) + 1)) - r);
        const double spread = k != 0 ? 0.0
                              : gw == GradWrite::kAccumulate && compute == DType::kBF16
                                  ? std::ldexp(terms[i], -7)  // one bf16 step of the terms' size (rounded twice)
                                  : 2.0 * static_cast<double>(N + 1) * std::ldexp(terms[i], -24);
        if (std::fabs(got[k][i] - r) > std::max<double>(step * 1.01f, step + spread)) ++beyond;
      }
      if (k == 0 && compute == DType::kBF16) {
        EXPECT_EQ(beyond, 0) << rounded_differ << " elements differ from the rounded f32 product";
      } else {
        EXPECT_EQ(rounded_differ, 0);
      }
    }
  }
  // sum_squares and AdamW.
  const int64_t n = 1037;
  const std::vector<float> g = rnd(n, 1.0);
  std::vector<float> g16(g.size());
  for (size_t i = 0; i < g.size(); ++i) g16[i] = bf16_to_float(float_to_bf16(g[i]));
  const Tensor gb = up(g16, {n}, DType::kBF16), gf = up(g16, {n}, DType::kF32);
  const Tensor out = up({0.0f}, {1}, DType::kF32);
  be.sum_squares(out, gb);
  double want_sq = 0;
  for (const float v : g16) want_sq += static_cast<double>(v) * v;
  EXPECT_FLOAT_EQ(down(out)[0], static_cast<float>(want_sq));
  std::vector<std::vector<float>> upd;
  for (const Tensor* grad : {&gf, &gb}) {
    rng = Rng(9);
    const Tensor p = up(rnd(n, 1.0), {n}, DType::kF32), m = up(std::vector<float>(g.size(), 0.01f), {n}, DType::kF32),
                 v = up(std::vector<float>(g.size(), 0.5f), {n}, DType::kF32), norm = up({4.0f}, {1}, DType::kF32);
    AdamWArgs a;
    a.grad_clip = 1.0f;
    a.weight_decay = 0.1f;
    be.adamw_update(p, *grad, m, v, norm, a, Tensor());
    upd.push_back(down(p));
    for (const float q : down(m)) upd.back().push_back(q);
    for (const float q : down(v)) upd.back().push_back(q);
  }
  EXPECT_EQ(0, std::memcmp(upd[0].data(), upd[1].data(), upd[0].size() * sizeof(float)));
  // The same with a master in two halves (Note [master in two halves]), as bf16 compute keeps it.
  std::vector<std::vector<uint16_t>> halves;
  for (const Tensor* grad : {&gf, &gb}) {
    rng = Rng(9);
    const std::vector<float> p0 = rnd(n, 1.0);
    std::vector<uint16_t> hi(p0.size()), lo(p0.size());
    for (size_t i = 0; i < p0.size(); ++i) hi[i] = bf16_high(p0[i]), lo[i] = bf16_low(p0[i], hi[i]);
    Tensor low = be.pool().allocate({n}, DType::kBF16, TensorClass::kWorkspace, "low").value();
    Tensor high = be.pool().allocate({n}, DType::kBF16, TensorClass::kWorkspace, "high").value();
    owned.push_back(low);
    owned.push_back(high);
    be.copy_h2d(low, lo.data(), st);
    be.copy_h2d(high, hi.data(), st);
    const Tensor m = up(std::vector<float>(g.size(), 0.01f), {n}, DType::kF32),
                 v = up(std::vector<float>(g.size(), 0.5f), {n}, DType::kF32), norm = up({4.0f}, {1}, DType::kF32);
    AdamWArgs a;
    a.grad_clip = 1.0f;
    a.weight_decay = 0.1f;
    a.split_master = true;
    be.adamw_update(low, *grad, m, v, norm, a, high);
    be.copy_d2h(lo.data(), low, st);
    be.copy_d2h(hi.data(), high, st);
    EXPECT_TRUE(st.synchronize().is_ok());
    lo.insert(lo.end(), hi.begin(), hi.end());
    halves.push_back(lo);
  }
  EXPECT_EQ(halves[0], halves[1]);
  for (const Tensor& t : owned) be.pool().free(t);
}

TEST(Bf16Gradients, AreTheF32OnesRoundedOnCpu) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20);
  expect_bf16_gradients_are_rounded_f32(*be, DType::kF32);
}

TEST(Bf16Gradients, AreTheF32OnesRoundedOnCuda) {
  TT_SKIP_WITHOUT_GPU();
  auto be = testing::make_cuda_backend(int64_t(256) << 20);
  ASSERT_NE(be, nullptr);
  expect_bf16_gradients_are_rounded_f32(*be, DType::kBF16);
}

// Note [gradients first written] on the CPU backend (no GPU needed): a backward op overwriting its parameter
// gradients, which start as NaN, gives what it gives adding to zeros, value for value (-0 and +0 alike), and every
// other output the same. args' gradients are those with `nan` set.
void expect_overwrite_is_adding_to_zeros(const std::string& op, const std::vector<Arg>& args, const GradOpFn& fn) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20);
  const HostArgs nan = host_args(args, DType::kF32, 7);
  HostArgs zeros = nan;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].nan) std::fill(zeros.f[i].begin(), zeros.f[i].end(), 0.0f);
  const auto added = run_op(*be, DType::kF32, args, zeros, bind(fn, GradWrite::kAccumulate));
  const auto written = run_op(*be, DType::kF32, args, nan, bind(fn, GradWrite::kOverwrite));
  for (size_t i = 0; i < args.size(); ++i)
    for (size_t j = 0; j < added[i].size(); ++j)
      ASSERT_EQ(written[i][j], added[i][j]) << op << ": " << args[i].name << " element " << j;
}

TEST(ResidualRmsNorm, IsTheTwoOpsBitForBitOnCpu) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{37, 48}, {5, 2048}, {3, 34}})
    expect_residual_rmsnorm_as_two_ops(*be, DType::kF32, rows, cols);
}

// Backend::swiglu_backward in place (dinp = inp: the Llama block's d(fch) over its fch) gives what it gives into a
// tensor of its own, bit for bit, by vectors (F 40) and value by value (F 42), in the given compute dtypes.
void expect_swiglu_backward_in_place(Backend& be, std::initializer_list<DType> computes) {
  for (const DType cd : computes)
    for (const int64_t F : {40, 42}) {
      const std::vector<Arg> args = {{"dinp", {N, 2 * F}, DType::kF32, true}, {"inp", {N, 2 * F}, DType::kF32, true},
                                     {"dout", {N, F}}};
      const HostArgs host = host_args(args, cd, 11);
      const auto apart = run_op(be, cd, args, host, [](Backend& b, const std::vector<Tensor>& t) {
        b.swiglu_backward(t[0], t[1], t[2]);
      });
      const auto in_place = run_op(be, cd, args, host, [](Backend& b, const std::vector<Tensor>& t) {
        b.swiglu_backward(t[1], t[1], t[2]);
      });
      ASSERT_EQ(apart[0].size(), in_place[1].size());
      EXPECT_EQ(std::memcmp(apart[0].data(), in_place[1].data(), apart[0].size() * sizeof(float)), 0)
          << "swiglu_backward in place differs (" << dtype_name(cd) << ", F " << F << ")";
      EXPECT_NE(std::memcmp(apart[1].data(), in_place[1].data(), apart[1].size() * sizeof(float)), 0)
          << "swiglu_backward in place left its input as it was";
    }
}

TEST(SwigluBackward, InPlaceIsBitForBitOnCpu) {
  auto be = testing::make_cpu_backend(int64_t(64) << 20);
  expect_swiglu_backward_in_place(*be, {DType::kF32});  // (the CPU backend computes in f32)
}

TEST(SwigluBackward, InPlaceIsBitForBitOnCuda) {
  TT_SKIP_WITHOUT_GPU();
  auto be = testing::make_cuda_backend(int64_t(256) << 20);
  ASSERT_NE(be, nullptr);
  expect_swiglu_backward_in_place(*be, {DType::kF32, DType::kBF16});
}

TEST(GradWrite, OverwritingEqualsAddingToZerosOnCpu) {
  const int OC = 72;
  const GradWrite o = GradWrite::kOverwrite;
  expect_overwrite_is_adding_to_zeros(
      "embedding_backward",
      {{"dwte", {V, C}, DType::kF32, true}, grad_arg("dwpe", {T, C}, o), {"dout", {B, T, C}},
       {"tokens", {B, T}, DType::kI32, false, 5}},
      [](Backend& be, const std::vector<Tensor>& t, GradWrite gw) {
        be.embedding_backward(t[0], t[1], t[2], t[3], gw);
      });
  expect_overwrite_is_adding_to_zeros("layernorm_backward", layernorm_backward_args(N, C, o), kLayernormBackward);
  expect_overwrite_is_adding_to_zeros("matmul_backward", matmul_backward_args(N, C, OC, o), kMatmulBackward);
  expect_overwrite_is_adding_to_zeros("matmul_backward_gelu", matmul_backward_gelu_args(N, C, OC, o),
                                      kMatmulBackwardGelu);
}

TEST(AdamWPieces, AddPieceMergesAlikeAndStopsWhenFull) {
  AdamWArgs a;
  EXPECT_TRUE(a.add_piece(10, true));
  EXPECT_TRUE(a.add_piece(20, true));
  EXPECT_EQ(a.pieces, 1);
  EXPECT_EQ(a.piece_end[0], 20);
  for (int i = 1; i < AdamWArgs::kMaxPieces; ++i) EXPECT_TRUE(a.add_piece(20 + i, i % 2 == 0));
  EXPECT_EQ(a.pieces, AdamWArgs::kMaxPieces);
  EXPECT_FALSE(a.add_piece(100, true));   // differs from the last piece (decay off): no room
  EXPECT_TRUE(a.add_piece(100, false));   // alike: merged
  EXPECT_EQ(a.piece_end[AdamWArgs::kMaxPieces - 1], 100);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BackendOps, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace tt
