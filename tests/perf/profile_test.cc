// The machine profile (perf/profile.h): its JSON round-trips; a damaged or foreign profile is refused with the
// field named; kernel times are measured or interpolated (Note [interpolating kernel times]); sequences are priced
// as measured or as the sum of their calls (Note [kernel sequences]).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "exec/executor.h"
#include "model/model.h"
#include "memory/um.h"
#include "perf/costs.h"
#include "perf/profile.h"
#include "temp_dir.h"

namespace tt::perf {
namespace {

KernelCall mm(int64_t n, int64_t oc, int64_t c) { return {KernelOp::kMatmulForward, DType::kBF16, {n, oc, c, 1}}; }

Profile sample() {
  Profile p;
  p.machine = {"cuda", "cuda:0 Test GPU (80.00 GiB)", "driver 1", "Test CPU x 8 threads", "", "auto"};
  p.created = "2026-12-01T00:00:00Z";
  p.calibrate_seconds = 12.5;
  p.heat_seconds = 0.2;
  p.set_kernel(mm(4096, 4096, 4096), 137.4e-6 * 8);  // 1 PFLOP/s-ish figures; only ratios matter
  p.set_kernel(mm(1024, 4096, 4096), 70e-6);
  p.set_kernel({KernelOp::kLayernormForward, DType::kBF16, {16384, 768}}, 20e-6);
  p.sequences[{mm(4096, 4096, 4096), mm(1024, 4096, 4096)}] = 1.2e-3;
  p.h2d_pinned = {2e-6, 50e9, {{4096, 2.1e-6}, {1 << 20, 23e-6}}};
  p.d2h_pinned = {3e-6, 52e9, {{4096, 3.1e-6}}};
  p.h2d_pageable = {3e-6, 12e9, {{4096, 3.5e-6}}};
  p.d2h_pageable = {9e-6, 10e9, {{4096, 9.5e-6}}};
  p.readback = {5e-6, 10e9, {{4, 5e-6}}};
  p.duplex_h2d_bytes_per_s = 45e9;
  p.duplex_d2h_bytes_per_s = 46e9;
  p.host_adamw_params_per_s = {{1, 6e8}, {8, 3e9}};
  p.host_segments[{128, 128, 4096}] = 1e-5;
  p.host_segment_threads = 7;
  p.slowdown[static_cast<int>(Traffic::kHost)][static_cast<int>(Traffic::kD2H)] = 1.25;
  p.slowdown[static_cast<int>(Traffic::kH2D)][static_cast<int>(Traffic::kD2H)] = 1.1;
  p.host_memcpy_bytes_per_s = 30e9;
  p.host_task_seconds = 4e-6;
  p.um_to_host = {20e-6, 13e9, {{2 << 20, 0.18e-3}}};
  p.um_to_device = {15e-6, 40e9, {{2 << 20, 0.07e-3}}};
  p.um_populate = {10e-6, 30e9, {{2 << 20, 0.08e-3}}};
  p.um_discard = {5e-6, 1e12, {{2 << 20, 6e-6}}};
  p.um_fault_in = {30e-6, 8e9, {{2 << 20, 0.29e-3}}};
  p.allreduce[2] = {12e-6, 150e9, {{1 << 20, 19e-6}}};
  return p;
}

TEST(Profile, JsonRoundTrips) {
  const Profile p = sample();
  auto back = Profile::from_json(p.to_json());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back.value().to_json(), p.to_json());
  EXPECT_EQ(back.value().machine, p.machine);
  EXPECT_EQ(back.value().kernels.size(), 3u);
  EXPECT_EQ(back.value().contention(Traffic::kHost, Traffic::kD2H), 1.25);
  EXPECT_EQ(back.value().contention(Traffic::kD2H, Traffic::kHost), 1.0);
  EXPECT_EQ(back.value().host_task_seconds, 4e-6);
  EXPECT_EQ(back.value().um_to_host.bytes_per_s, 13e9);
  EXPECT_EQ(back.value().um_discard.latency_s, 5e-6);
  EXPECT_EQ(back.value().allreduce.at(2).bytes_per_s, 150e9);

  tt::testing::TempDir dir;
  const std::string path = dir.path() + "/sub/profile.json";
  ASSERT_TRUE(p.save(path).is_ok());
  auto loaded = Profile::load(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded.value().to_json(), p.to_json());
}

// Each damage is refused with an error that names the field.
TEST(Profile, DamagedProfilesAreRefusedNamingTheField) {
  const nlohmann::json good = sample().to_json();
  struct Case {
    const char* field;  // expected in the message
    std::function<void(nlohmann::json&)> damage;
  };
  const Case cases[] = {
      {"profile.format", [](nlohmann::json& j) { j["format"] = "something else"; }},
      {"profile.version", [](nlohmann::json& j) { j["version"] = 99; }},
      {"profile.machine.device", [](nlohmann::json& j) { j["machine"].erase("device"); }},
      {"profile.kernels[0].seconds", [](nlohmann::json& j) { j["kernels"][0]["seconds"] = -1.0; }},
      {"profile.kernels[1].op", [](nlohmann::json& j) { j["kernels"][1]["op"] = "matmul_sideways"; }},
      {"profile.kernels[0].dims", [](nlohmann::json& j) { j["kernels"][0]["dims"] = {1, 2, 3}; }},
      {"profile.kernels[2]", [](nlohmann::json& j) { j["kernels"][2] = j["kernels"][0]; }},  // measured twice
      {"profile.sequences[0].calls", [](nlohmann::json& j) { j["sequences"][0]["calls"] = nlohmann::json::array(); }},
      {"profile.links.h2d_pinned.bytes_per_s", [](nlohmann::json& j) { j["links"]["h2d_pinned"]["bytes_per_s"] = 0; }},
      {"profile.links.d2h_pinned.points[0]", [](nlohmann::json& j) { j["links"]["d2h_pinned"]["points"][0] = {0, 1}; }},
      {"profile.duplex.d2h_bytes_per_s", [](nlohmann::json& j) { j["duplex"]["d2h_bytes_per_s"] = "fast"; }},
      {"profile.host.adamw_params_per_s", [](nlohmann::json& j) { j["host"]["adamw_params_per_s"]["zero"] = 1.0; }},
      {"profile.host.adamw_segments[0].param_sizes",
       [](nlohmann::json& j) { j["host"]["adamw_segments"][0]["param_sizes"] = {128, -5}; }},
      {"profile.host.memcpy_bytes_per_s", [](nlohmann::json& j) { j["host"]["memcpy_bytes_per_s"] = -3.0; }},
      {"profile.host.adamw_segment_threads", [](nlohmann::json& j) { j["host"]["adamw_segment_threads"] = 0; }},
      {"profile.host.adamw_segment_threads", [](nlohmann::json& j) { j["host"]["adamw_segment_threads"] = 2.5; }},
      {"profile.host.adamw_segment_threads", [](nlohmann::json& j) { j["host"].erase("adamw_segment_threads"); }},
      {"profile.contention.host.d2h", [](nlohmann::json& j) { j["contention"]["host"]["d2h"] = 0.5; }},
      {"profile.contention.h2d.host", [](nlohmann::json& j) { j["contention"]["h2d"].erase("host"); }},
      {"profile.contention.d2h", [](nlohmann::json& j) { j["contention"].erase("d2h"); }},
      {"profile.allreduce.one", [](nlohmann::json& j) { j["allreduce"]["one"] = j["allreduce"]["2"]; }},
      {"profile.allreduce.1", [](nlohmann::json& j) { j["allreduce"]["1"] = j["allreduce"]["2"]; }},
      {"profile.allreduce.2.bytes_per_s", [](nlohmann::json& j) { j["allreduce"]["2"]["bytes_per_s"] = -1; }},
      // Version 1 timed the host segments from a warm cache with every core: measured again.
      {"profile.version", [](nlohmann::json& j) { j["version"] = 1; }},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.damage(j);
    auto p = Profile::from_json(j);
    ASSERT_FALSE(p.is_ok()) << c.field;
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss) << c.field;
    EXPECT_NE(p.status().message().find(c.field), std::string::npos) << p.status().message();
  }
  // Not JSON at all, and not a file.
  tt::testing::TempDir dir;
  const std::string path = dir.path() + "/bad.json";
  std::ofstream(path) << "{\"format\": \"tiertrain-profile\", ";
  auto p = Profile::load(path);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(Profile::load(dir.path()).is_ok());
}

TEST(Profile, AProfileOfAnotherMachineIsRefusedNamingTheField) {
  const Profile p = sample();
  EXPECT_TRUE(p.check_machine(p.machine).is_ok());
  MachineId other = p.machine;
  other.device = "cuda:0 Other GPU (16.00 GiB)";
  const Status s = p.check_machine(other);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("machine.device"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Other GPU"), std::string::npos) << s.message();
  EXPECT_NE(p.machine.key(), other.key());
}

TEST(Profile, KernelTimesAreMeasuredOrInterpolatedFromTheNearestOfTheSameOp) {
  const Profile p = sample();
  // Measured: exactly.
  EXPECT_DOUBLE_EQ(p.kernel_seconds(mm(1024, 4096, 4096)).value(), 70e-6);
  // Between two measured shapes: the call's FLOPs at a rate between theirs (geometric, nearer weighs more).
  const double r_small = mm(1024, 4096, 4096).flops() / 70e-6;
  const double r_big = mm(4096, 4096, 4096).flops() / (137.4e-6 * 8);
  const KernelCall mid = mm(2048, 4096, 4096);
  const double t = p.kernel_seconds(mid).value();
  const double rate = mid.flops() / t;
  EXPECT_GT(rate, std::min(r_small, r_big) * (1 - 1e-9));
  EXPECT_LT(rate, std::max(r_small, r_big) * (1 + 1e-9));
  // (Nearly) equally far from both in log-size: their geometric mean.
  EXPECT_NEAR(rate, std::sqrt(r_small * r_big), 1e-3 * rate);
  // Far larger than any: between the two, nearer the nearer's rate.
  const double far = mm(65536, 4096, 4096).flops() / p.kernel_seconds(mm(65536, 4096, 4096)).value();
  EXPECT_LT(std::abs(std::log(far / r_big)), std::abs(std::log(far / r_small)));
  // No measurement of the op (or of the dtype): an error naming it.
  auto none = p.kernel_seconds({KernelOp::kAttentionForward, DType::kBF16, {8, 2048, 32, 128}});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("attention_forward"), std::string::npos);
  EXPECT_FALSE(p.kernel_seconds({KernelOp::kMatmulForward, DType::kF32, {1024, 4096, 4096, 1}}).is_ok());
}

TEST(Profile, SequencesAreMeasuredOrTheSumOfTheirCalls) {
  const Profile p = sample();
  EXPECT_DOUBLE_EQ(p.sequence_seconds({mm(4096, 4096, 4096), mm(1024, 4096, 4096)}).value(), 1.2e-3);
  int interpolated = 0;
  const double sum = p.sequence_seconds({mm(1024, 4096, 4096), mm(1024, 4096, 4096), mm(2048, 4096, 4096)},
                                        &interpolated).value();
  EXPECT_DOUBLE_EQ(sum, 2 * 70e-6 + p.kernel_seconds(mm(2048, 4096, 4096)).value());
  EXPECT_EQ(interpolated, 1);
}

TEST(Profile, LinksAreLatencyPlusBytesOverBandwidth) {
  const Profile p = sample();
  EXPECT_DOUBLE_EQ(p.h2d_pinned.seconds(0), 2e-6);
  EXPECT_DOUBLE_EQ(p.h2d_pinned.seconds(50'000'000'000), 1 + 2e-6);
  EXPECT_DOUBLE_EQ(p.host_adamw_rate(1), 6e8);
  EXPECT_DOUBLE_EQ(p.host_adamw_rate(4), 6e8);   // the nearest measured count at or below
  EXPECT_DOUBLE_EQ(p.host_adamw_rate(64), 3e9);  // the largest
}

// A segment's host update is priced as measured when the run uses the team it was measured with, and scaled by the
// ratio of the two rates when --threads asks for another; a segment not measured costs its parameters at the rate.
TEST(ProfileCosts, HostSegmentsArePricedForTheRunsThreadCount) {
  ScheduleSpec spec;
  spec.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 32, .heads = 2, .seq = 16};
  Profile p;
  p.host_adamw_params_per_s = {{1, 1e9}, {4, 3e9}};
  p.host_segment_threads = 4;
  p.host_segments[segment_param_sizes(spec.model, 1)] = 3e-3;
  Op op;
  op.stream = StreamId::kHost;
  op.kind = OpKind::kHostAdamW;
  op.segment = 1;
  EXPECT_DOUBLE_EQ(ProfileCosts(p, spec, 0).seconds(op), 3e-3);  // the run's default: the measured team
  EXPECT_DOUBLE_EQ(ProfileCosts(p, spec, 4).seconds(op), 3e-3);
  EXPECT_DOUBLE_EQ(ProfileCosts(p, spec, 1).seconds(op), 9e-3);  // a third of the rate: three times as long
  op.segment = 0;  // the embeddings: not measured
  const ParamSegments segs = model_segments(spec.model);
  EXPECT_DOUBLE_EQ(ProfileCosts(p, spec, 0).seconds(op), static_cast<double>(segs.size[0]) / 3e9);
  EXPECT_DOUBLE_EQ(ProfileCosts(p, spec, 2).seconds(op), static_cast<double>(segs.size[0]) / 1e9);
}

// Unified Memory's rates (issue 20) are optional in the JSON: a profile without them loads with none valid, and the
// model then refuses the operations that move managed pages, naming one; unknown kinds are refused.
TEST(Profile, UnifiedMemoryRatesAreOptionalAndPriceTheScheduleUmOperations) {
  nlohmann::json j = sample().to_json();
  j.erase("um");
  auto old = Profile::from_json(j);
  ASSERT_TRUE(old.is_ok()) << old.status().to_string();
  EXPECT_FALSE(old.value().um_to_host.valid());
  EXPECT_FALSE(old.value().to_json().contains("um") && !old.value().to_json()["um"].empty());
  nlohmann::json bad = sample().to_json();
  bad["um"]["sideways"] = bad["um"]["to_host"];
  auto refused = Profile::from_json(bad);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("profile.um.sideways"), std::string::npos) << refused.status().message();

  ScheduleSpec spec;
  spec.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 32, .heads = 2, .seq = 16};
  const Profile p = sample();
  const int64_t n = int64_t(8) << 20;
  auto op_of = [&](OpKind kind, memory::UmPlace place, const char* name) {
    Op op;
    op.kind = kind;
    op.place = static_cast<int>(place);
    op.name = name;
    op.bytes = n;
    op.stream = place == memory::UmPlace::kHost ? StreamId::kD2H : StreamId::kH2D;
    return op;
  };
  const Op out = op_of(OpKind::kUmPrefetch, memory::UmPlace::kHost, "um_out h.0");
  const Op in = op_of(OpKind::kUmPrefetch, memory::UmPlace::kDevice, "um_in h.0");
  Op populate = op_of(OpKind::kUmPrefetch, memory::UmPlace::kDevice, "um_populate h.1");
  populate.um_dead = true;
  Op release = op_of(OpKind::kUmPrefetch, memory::UmPlace::kHost, "um_release h.0");
  release.um_dead = true;
  release.stream = StreamId::kH2D;
  ProfileCosts costs(p, spec);
  EXPECT_DOUBLE_EQ(costs.seconds(out), p.um_to_host.seconds(n));
  EXPECT_DOUBLE_EQ(costs.seconds(in), p.um_to_device.seconds(n));
  EXPECT_DOUBLE_EQ(costs.seconds(populate), p.um_populate.seconds(n));
  EXPECT_DOUBLE_EQ(costs.seconds(release), p.um_discard.seconds(n));
  EXPECT_DOUBLE_EQ(costs.fixed_seconds(out), 20e-6);
  EXPECT_EQ(cost_class(out), CostClass::kD2H);
  EXPECT_EQ(cost_class(in), CostClass::kH2D);
  EXPECT_EQ(cost_class(release), CostClass::kH2D);
  EXPECT_EQ(cost_class(populate), CostClass::kH2D);
  // The exchange's release of the compute copy (Note [managed optimizer exchange]) runs on the d2h stream: priced
  // as a discard, classed by its stream.
  Op params_release = release;
  params_release.name = "um params release";
  params_release.stream = StreamId::kD2H;
  EXPECT_DOUBLE_EQ(costs.seconds(params_release), p.um_discard.seconds(n));
  EXPECT_EQ(cost_class(params_release), CostClass::kD2H);
  EXPECT_TRUE(costs.status().is_ok());
  ProfileCosts without(old.value(), spec);
  EXPECT_EQ(without.seconds(out), 0);
  ASSERT_FALSE(without.status().is_ok());
  EXPECT_NE(without.status().message().find("um_out h.0: the profile has no Unified Memory rates"), std::string::npos)
      << without.status().message();
}


// Note [sharded optimizer]: with the CPU optimizer sharded over two data ranks, a rank's gradients to the host, its
// host update and its parameters back cover its share of each segment (the largest, ceil(n / 2)): the schedule's
// bytes and the host segments the calibration measures and the costs look up are the share's.
TEST(ProfileCosts, AShardedCpuOptimizerMovesAndUpdatesItsShare) {
  const ModelConfig cfg{.vocab = 256, .layers = 2, .dim = 32, .heads = 2, .seq = 16};
  ExecSpec e;
  e.model = cfg;
  e.batch = 4;
  e.plan = Plan::resolve("in-core", cfg.layers, 2).value();
  e.plan.optimizer = OptimizerPlacement::kCpu;
  e.data_ranks = 2;
  e.lm_chunk_rows = model_default_lm_chunk_rows(cfg, e.batch, e.compute);
  const ParamSegments segs = model_segments(cfg);
  for (const bool shard : {false, true}) {
    SCOPED_TRACE(shard ? "sharded" : "whole");
    e.shard_optimizer = shard;
    const ScheduleSpec ss = e.schedule_spec();
    EXPECT_EQ(ss.shard_optimizer, shard);
    const Schedule s = compile_schedule(ss, Executor::inventory(e).value());
    ASSERT_TRUE(s.validate().is_ok()) << s.validate().to_string();
    int copies = 0;
    for (const Op& op : s.pass(Pass::kTrain)) {
      if (op.kind != OpKind::kGradsOut && op.kind != OpKind::kParamsBack) continue;
      const int64_t n = segs.size[static_cast<size_t>(op.segment)];
      EXPECT_EQ(op.bytes, (shard ? (n + 1) / 2 : n) * 4) << op.name << " of segment " << op.segment;
      ++copies;
    }
    EXPECT_EQ(copies, 2 * segs.count());
    int64_t pieces = 0;
    for (const std::vector<int64_t>& q : schedule_host_segments(s))
      for (int64_t n : q) pieces += n;
    // The distinct segments' pieces: the embeddings, a block (both blocks alike), the final LayerNorm.
    const int64_t whole = segs.size[0] + segs.size[1] + segs.size[3];
    const int64_t half = (segs.size[0] + 1) / 2 + (segs.size[1] + 1) / 2 + (segs.size[3] + 1) / 2;
    EXPECT_EQ(pieces, shard ? half : whole);
    auto back = Schedule::from_json(s.to_json());
    ASSERT_TRUE(back.is_ok()) << back.status().to_string();
    EXPECT_EQ(back.value().spec.shard_optimizer, shard);
  }
}

// Note [pricing collectives] (perf/costs.cc): a data-parallel run's reductions are priced by the profile's allreduce
// rate for its number of ranks (latency + bytes / bandwidth), a tensor-parallel piece's sums likewise within its
// time; without a rate they cost nothing and the costs say so.
TEST(ProfileCosts, CollectivesArePricedByTheAllreduceRateForTheirRanks) {
  const Profile p = sample();  // a rate for 2 ranks: 12 us + bytes / 150 GB/s
  ScheduleSpec spec;
  spec.model = ModelConfig{.vocab = 256, .layers = 2, .dim = 32, .heads = 2, .seq = 16};
  Op op;
  op.stream = StreamId::kComm;
  op.kind = OpKind::kGradReduce;
  op.segment = 1;
  op.bytes = 150'000'000;
  EXPECT_EQ(cost_class(op), CostClass::kComm);
  spec.data_ranks = 2;
  ProfileCosts two(p, spec, 0);
  EXPECT_DOUBLE_EQ(two.seconds(op), 12e-6 + 1e-3);
  EXPECT_FALSE(two.unpriced_collectives());
  spec.data_ranks = 4;
  ProfileCosts four(p, spec, 0);
  EXPECT_EQ(four.seconds(op), 0.0);
  EXPECT_TRUE(four.unpriced_collectives());
  // An older profile (no "allreduce") still loads.
  nlohmann::json j = p.to_json();
  j.erase("allreduce");
  auto old = Profile::from_json(j);
  ASSERT_TRUE(old.is_ok()) << old.status().to_string();
  EXPECT_TRUE(old.value().allreduce.empty());
  // A tensor-parallel block's forward: its kernels (a measured sequence) and its two sums over the model's two ranks
  // ([B, T, C] in the compute dtype each) at the same rate.
  spec.data_ranks = 1;
  spec.model.tp = 2;
  spec.batch = 4;
  spec.compute = DType::kF32;
  spec.lm_chunk_rows = 64;
  spec.plan = Plan::resolve("in-core", spec.model.layers, 2).value();
  Profile q = p;
  std::vector<KernelCall> calls;
  for (const NamedKernelCall& k : model_kernel_calls(spec.model, spec.batch, spec.compute, 64, ModelPiece::kForward, 1))
    calls.push_back(k.call);
  q.sequences[calls] = 1e-3;
  Op fwd;
  fwd.stream = StreamId::kCompute;
  fwd.kind = OpKind::kModel;
  fwd.boundary = Boundary::kBeforeForward;
  fwd.segment = 1;
  fwd.layer = 0;
  const int64_t act = int64_t(4) * 16 * 32 * 4;
  EXPECT_EQ(model_tp_collectives(spec.model, spec.batch, spec.compute, 64, ModelPiece::kForward, 1),
            std::vector<int64_t>({act, act}));
  ProfileCosts tp(q, spec, 0);
  EXPECT_DOUBLE_EQ(tp.seconds(fwd), 1e-3 + 2 * (12e-6 + static_cast<double>(act) / 150e9));
  EXPECT_FALSE(tp.unpriced_collectives());
  spec.model.tp = 1;
  EXPECT_TRUE(model_tp_collectives(spec.model, spec.batch, spec.compute, 64, ModelPiece::kForward, 1).empty());
}

}  // namespace
}  // namespace tt::perf
