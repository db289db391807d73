// The whole GPT against finite differences in double precision: the gradient of the mean loss with respect to
// every parameter of a tiny model equals the central difference of the loss.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"
#include "model/gpt.h"
#include "test_util.h"

namespace tt {
namespace {

TEST(GptGradcheck, EveryParameterMatchesFiniteDifferences) {
  const GptConfig cfg{.vocab = 11, .layers = 2, .dim = 8, .heads = 2, .seq = 5};
  const int B = 2;
  auto be = testing::make_cpu_backend(int64_t(64) << 20, 1);
  auto gr = Gpt::create(*be, cfg, B, DType::kF64);
  ASSERT_TRUE(gr.is_ok()) << gr.status().to_string();
  Gpt& gpt = *gr.value();
  // Larger than the default init so every path carries signal; LayerNorm params perturbed away from 1/0.
  Rng rng(42);
  std::vector<double> params(static_cast<size_t>(gpt.flat_params().numel()));
  for (auto& p : params) p = 0.3 * rng.normal();
  ASSERT_TRUE(gpt.upload_params(params.data()).is_ok());
  std::vector<int32_t> tokens(B * cfg.seq), targets(B * cfg.seq);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  for (auto& t : targets) t = static_cast<int32_t>(rng.uniform_int(cfg.vocab));
  be->copy_h2d(gpt.tokens(), tokens.data(), be->compute_stream());
  be->copy_h2d(gpt.targets(), targets.data(), be->compute_stream());

  std::vector<double> losses(B * cfg.seq);
  auto loss_at = [&](const std::vector<double>& p) {
    EXPECT_TRUE(gpt.upload_params(p.data()).is_ok());
    gpt.forward();
    be->copy_d2h(losses.data(), gpt.losses(), be->compute_stream());
    EXPECT_TRUE(be->compute_stream().synchronize().is_ok());
    double s = 0;
    for (double l : losses) s += l;
    return s / static_cast<double>(losses.size());
  };

  loss_at(params);
  gpt.backward();
  std::vector<double> grads(params.size());
  ASSERT_TRUE(gpt.download_grads(grads.data()).is_ok());

  const double h = 1e-5;
  std::vector<double> numeric(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<double> p = params;
    p[i] = params[i] + h;
    const double lp = loss_at(p);
    p[i] = params[i] - h;
    const double lm = loss_at(p);
    numeric[i] = (lp - lm) / (2 * h);
  }
  for (const ParamInfo& p : gpt.params()) {
    EXPECT_TRUE(testing::all_close("d " + p.name, grads.data() + p.offset, numeric.data() + p.offset,
                                   static_cast<size_t>(p.shape.numel()), 1e-8, 1e-6));
  }
}

}  // namespace
}  // namespace tt
