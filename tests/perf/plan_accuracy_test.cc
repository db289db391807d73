// The performance model against measurement on the CPU backend, with simulated kernel, link and host delays large
// enough that they, not this machine's load, set the times: every shortcut plan, with the optimizer on the device
// and on the host, predicted (calibration, schedule replay) within 10% of its measured median step. The same
// comparison on an H200 is bench/perf/plan_gpu.sh (docs/benchmarks/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "perf/auto_plan.h"
#include "perf/planner.h"
#include "temp_dir.h"
#include "exec_util.h"

namespace tt::perf {
namespace {

void check_plan_accuracy(const ModelConfig& model, int grad_accum = 1) {
  tt::testing::TempDir dir;
  setenv("XDG_CACHE_HOME", dir.path().c_str(), 1);
  TrainConfig tc;
  tc.model = model;
  tc.batch = 4;
  tc.grad_accum = grad_accum;
  tc.data = dir.write("corpus.txt", tt::testing::synthetic_text(40000));
  tc.val_fraction = 0.1;
  tc.warmup = 1;
  tc.eval_every = 0;
  tc.device_budget = int64_t(256) << 20;
  tc.threads = 1;
  tc.backend = "cpu";
  // A kernel 2 ms, a copy 25 ms (the swapped blocks' copies are exposed), a host update 3 ms.
  tc.cpu_compute_delay_us = 2000;
  tc.cpu_copy_delay_us = 25000;
  tc.cpu_host_delay_us = 3000;

  auto rows = plan_rows(tc);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  // um and um-advised run in-core's training pass (their pages are placed once, at set-up): um-swap-activations is
  // the Unified Memory row whose operations the model prices; the other two only cost CI time here.
  std::erase_if(rows.value(), [](const PlanRow& r) { return r.plan == "um" || r.plan == "um-advised"; });
  ASSERT_GE(rows.value().size(), grad_accum == 1 ? 12u : 6u);  // (accumulating: the device optimizer's rows)
  std::string path;
  auto profile = machine_profile(tc, "", rows_needs(rows.value()), nullptr, false, &path);
  ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
  EXPECT_EQ(path.rfind(dir.path(), 0), 0u) << "cached under XDG_CACHE_HOME: " << path;
  ASSERT_TRUE(predict(rows.value(), profile.value(), tc.threads).is_ok());
  // A second request finds everything in the cache.
  auto again = machine_profile(tc, "", rows_needs(rows.value()), nullptr);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again.value().to_json(), profile.value().to_json());

  // The automatic plan, measured beside the shortcuts.
  auto chosen = choose_plan(tc, profile.value());
  ASSERT_TRUE(chosen.is_ok()) << chosen.status().to_string();
  rows.value().push_back(chosen.value().best);

  // Each row's step: the median of 8 steps (after one that warms up); a row more than 7% from its prediction is
  // measured a second time and the faster of the two kept: load from elsewhere on a shared 2-core VM only adds time,
  // and a round of it once put two measurements of the same plan 5-8% apart. (Two full rounds took 2 minutes of CI's
  // 30; most rows are within 7% at once.)
  std::vector<double> measured_s(rows.value().size(), 1e30);
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < rows.value().size(); ++i) {
      const PlanRow& r = rows.value()[i];
      if (round == 1 && std::abs(r.sim.step_seconds - measured_s[i]) < 0.07 * measured_s[i]) continue;
      ASSERT_TRUE(r.fits()) << r.plan;
      TrainConfig t = tc;
      t.plan = r.plan;
      t.optimizer = r.optimizer;
      if (r.plan == "auto") {
        t.plan_value = r.run.exec.plan;
        t.optimizer.reset();
      }
      t.steps = 9;
      auto trainer = Trainer::create(t, nullptr);
      ASSERT_TRUE(trainer.is_ok()) << trainer.status().to_string();
      auto summary = trainer.value()->run();
      ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
      measured_s[i] = std::min(measured_s[i], summary.value().median_ms / 1e3);
    }
  }
  double worst = 0, best_shortcut = 1e30, auto_measured = 0;
  std::string report;
  for (size_t i = 0; i < rows.value().size(); ++i) {
    const PlanRow& r = rows.value()[i];
    const double measured = measured_s[i], predicted = r.sim.step_seconds;
    const double err = (predicted - measured) / measured;
    worst = std::max(worst, std::abs(err));
    report += str_format("%s/%s: predicted %.1f ms (compute %.1f, exposed %.1f, host %.1f), measured %.1f ms (%+.1f%%)\n",
                         r.plan.c_str(), optimizer_placement_name(r.optimizer), 1e3 * predicted,
                         1e3 * r.sim.busy_seconds[static_cast<int>(StreamId::kCompute)],
                         1e3 * r.sim.exposed_wait_seconds, 1e3 * r.sim.busy_seconds[static_cast<int>(StreamId::kHost)],
                         1e3 * measured, 100 * err);
    EXPECT_LT(std::abs(err), 0.10) << r.plan << "/" << optimizer_placement_name(r.optimizer);
    if (r.plan == "auto") auto_measured = measured;
    else best_shortcut = std::min(best_shortcut, measured);
  }
  const Profile& pr = profile.value();
  report += str_format("contention (victim/other: h2d d2h host): h2d %.2f %.2f %.2f, d2h %.2f %.2f %.2f, host %.2f %.2f %.2f\n",
                       pr.slowdown[0][0], pr.slowdown[0][1], pr.slowdown[0][2], pr.slowdown[1][0], pr.slowdown[1][1],
                       pr.slowdown[1][2], pr.slowdown[2][0], pr.slowdown[2][1], pr.slowdown[2][2]);
  std::printf("%sworst %.1f%%; the automatic plan (%s) measured %+.1f%% against the fastest shortcut\n",
              report.c_str(), 100 * worst, AutoPlan::describe(chosen.value().best.run.exec.plan).c_str(),
              100 * (auto_measured / best_shortcut - 1));
  // The automatic plan is the fastest the model predicts: no shortcut is predicted faster. Measured, it can rank no
  // better than the model is accurate: two plans predicted 4% apart (in-core with the optimizer on the device and on
  // the host) measured in the other order on CI, each within 7% of its prediction. So it must be within the model's
  // tolerance (10%) of the fastest shortcut measured; a plan chosen on a wrong model would miss that.
  double best_predicted_shortcut = 1e30;
  for (const PlanRow& r : rows.value())
    if (r.plan != "auto") best_predicted_shortcut = std::min(best_predicted_shortcut, r.sim.step_seconds);
  EXPECT_LE(chosen.value().best.sim.step_seconds, best_predicted_shortcut * (1 + 1e-9))
      << "a shortcut is predicted faster than the automatic plan";
  EXPECT_LE(auto_measured, 1.10 * best_shortcut) << "the automatic plan is more than 10% slower than a shortcut";
  // The comparison covers exposed copies: swapping waits for the link, and is slower than keeping everything.
  const PlanRow* in_core = nullptr;
  const PlanRow* swap = nullptr;
  for (const PlanRow& r : rows.value()) {
    if (r.optimizer != OptimizerPlacement::kDevice) continue;
    if (r.plan == "in-core") in_core = &r;
    if (r.plan == "swap-activations") swap = &r;
  }
  ASSERT_TRUE(in_core && swap);
  EXPECT_GT(swap->sim.exposed_wait_seconds, 0.005);
  EXPECT_GT(swap->sim.step_seconds, in_core->sim.step_seconds + 0.005);
}

TEST(PlanAccuracy, EveryShortcutPlanIsPredictedWithinTenPercentOfItsMeasuredStep) {
  check_plan_accuracy(ModelConfig{.vocab = 256, .layers = 4, .dim = 32, .heads = 2, .seq = 32});
}

// The same on the Llama family, which the performance model was not designed on: its kernel lists (RMSNorm, RoPE,
// SwiGLU apart, an untied head) and its schedule priced by the same calibration.
// Note [gradient accumulation]: a step of three micro-batches (two accumulation passes and the training pass).
TEST(PlanAccuracy, AccumulatedStepsArePredictedWithinTenPercent) {
  check_plan_accuracy(ModelConfig{.vocab = 256, .layers = 4, .dim = 32, .heads = 4, .seq = 32}, 3);
}

TEST(PlanAccuracy, TheLlamaFamilysPlansArePredictedWithinTenPercentToo) {
  check_plan_accuracy(ModelConfig{.family = "llama", .vocab = 256, .layers = 4, .dim = 32, .heads = 4, .seq = 32,
                                  .kv_heads = 2, .ffn = 64, .tied_embeddings = false});
}

}  // namespace
}  // namespace tt::perf
