#include "perf/planner.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/units.h"

namespace tt::perf {

namespace {
constexpr const char* kShortcuts[] = {"in-core",
                                      "in-core-selective",
                                      "recompute",
                                      "swap-activations",
                                      "swap-attention-recompute-mlp",
                                      "swap-attention-recompute-mlp-norms",
                                      "offload-params",
                                      "offload-all",
                                      "um",
                                      "um-advised",
                                      "um-swap-activations"};

}  // namespace

Result<std::vector<PlanRow>> plan_rows(const TrainConfig& cfg) {
  std::vector<PlanRow> rows;
  Status unsupported;  // the first row's refusal of what it does not take yet (kUnimplemented)
  for (const char* name : kShortcuts) {
    for (const OptimizerPlacement where : {OptimizerPlacement::kDevice, OptimizerPlacement::kCpu}) {
      TrainConfig c = cfg;
      c.plan = name;
      c.optimizer = where;
      auto plan = Plan::resolve(name, c.model.layers, c.swap_slots);
      if (!plan.is_ok()) return plan.status();
      // The offload plans stream state from the host: they need the CPU optimizer. The Unified Memory shortcuts put
      // the optimizer's state in managed memory: the device optimizer's (the CPU optimizer's exchange through managed
      // memory is a JSON plan: docs/PLANS.md).
      if (plan.value().needs_cpu_optimizer() && where == OptimizerPlacement::kDevice) continue;
      if (plan.value().uses_managed() && where == OptimizerPlacement::kCpu) continue;
      // The speculative update is the CPU optimizer's; the device optimizer ignores it.
      if (where == OptimizerPlacement::kDevice) c.speculative_update = false;
      auto run = resolve_run(c);
      // What a plan does not take yet is no row (Note [gradient accumulation]: the plans that keep gradients on the
      // host do not accumulate; Note [bf16 gradients] in exec/executor.h: the CPU optimizer's plans and managed
      // gradients do not take --grad-dtype bf16, which auto resolves to f32 there); if no row is left, the first
      // such refusal is the error (bf16 gradients summed over micro-batches, say).
      if (!run.is_ok() && run.status().code() == StatusCode::kUnimplemented) {
        if (unsupported.is_ok()) unsupported = run.status();
        continue;
      }
      if (!run.is_ok()) return run.status();
      PlanRow r;
      r.plan = name;
      r.optimizer = where;
      r.run = std::move(run).value();
      r.schedule = compile_schedule(r.run.exec.schedule_spec(), r.run.inventory);
      rows.push_back(std::move(r));
    }
  }
  if (rows.empty() && !unsupported.is_ok()) return unsupported;
  return rows;
}

ProfileNeeds rows_needs(const std::vector<PlanRow>& rows) {
  std::set<KernelCall> calls;
  std::set<std::vector<KernelCall>> seqs;
  std::set<std::vector<int64_t>> hsegs;
  bool um = false;
  for (const PlanRow& r : rows) {
    um |= r.run.managed_total > 0;  // moves managed pages, or may be oversubscribed (perf/planner.h)
    for (const KernelCall& c : schedule_kernel_calls(r.schedule)) calls.insert(c);
    for (auto& q : schedule_sequences(r.schedule)) seqs.insert(std::move(q));
    for (auto& q : schedule_host_segments(r.schedule)) hsegs.insert(std::move(q));
  }
  return {{calls.begin(), calls.end()}, {seqs.begin(), seqs.end()}, {hsegs.begin(), hsegs.end()}, um};
}

Status predict(std::vector<PlanRow>& rows, const Profile& profile, int host_threads) {
  for (PlanRow& r : rows) {
    ProfileCosts costs(profile, r.schedule.spec, host_threads);
    r.sim = simulate(r.schedule, Pass::kTrain, costs);
    // Note [gradient accumulation]: a step is grad_accum - 1 accumulation passes, then the training pass.
    const int accum = r.schedule.spec.grad_accum;
    if (accum > 1) r.sim.step_seconds += (accum - 1) * simulate(r.schedule, Pass::kAccumulate, costs).step_seconds;
    TT_TRY(costs.status());
    // Note [oversubscribed Unified Memory].
    r.oversubscribed = 0;
    if (!r.run.fits_device && r.run.managed_device > 0) {
      const int64_t over = r.run.device_need() - r.run.budget;
      if (over <= r.run.managed_device) {
        TT_RETURN_IF(!profile.um_fault_in.valid() || !profile.um_to_host.valid(), kNotFound,
                     "%s: oversubscribed managed memory needs the profile's Unified Memory rates (recalibrate)",
                     r.plan.c_str());
        r.oversubscribed = over;
        r.sim.step_seconds += 2 * profile.um_fault_in.seconds(over) + 2 * profile.um_to_host.seconds(over);
      }
    }
    r.interpolated = costs.interpolated();
    r.unpriced_collectives = costs.unpriced_collectives();
    r.copy_bytes = 0;
    for (const Op& op : r.schedule.pass(Pass::kTrain))
      if ((op.stream == StreamId::kH2D || op.stream == StreamId::kD2H) && op.kind != OpKind::kWait &&
          op.kind != OpKind::kRecord && op.kind != OpKind::kInputFill)
        r.copy_bytes += op.bytes;
    const double tokens = static_cast<double>(r.run.exec.batch) * r.run.exec.grad_accum * r.run.exec.model.seq;
    r.tokens_per_s = r.sim.step_seconds > 0 ? tokens / r.sim.step_seconds : 0;
  }
  return Status::ok();
}

Result<Profile> machine_profile(const TrainConfig& cfg, const std::string& path, const ProfileNeeds& needs,
                                FILE* progress, bool recalibrate, std::string* used_path, double heat_seconds) {
  TT_ASSIGN_OR_RETURN(std::string backend, resolve_backend_name(cfg.backend));
  const MachineId here = this_machine(backend, run_backend_options(cfg, 0));
  const bool cached = path.empty();
  const std::string file = cached ? default_profile_path(here) : path;
  if (used_path) *used_path = file;
  std::error_code ec;
  Profile profile;
  bool have = false;
  if (!recalibrate && std::filesystem::exists(file, ec)) {
    auto p = Profile::load(file);
    if (!p.is_ok()) {
      // A damaged cache is measured again; a profile the user named is theirs to fix.
      if (!cached) return p.status();
      if (progress) std::fprintf(progress, "calibrate: the cached profile is unusable (%s): measuring again\n",
                                 p.status().message().c_str());
    } else {
      TT_TRY(p.value().check_machine(here));
      profile = std::move(p).value();
      have = true;
    }
  } else if (!recalibrate) {
    TT_RETURN_IF(!cached, kNotFound, "--machine-profile %s: no such file (make one with tiertrain calibrate --out %s)",
                 path.c_str(), path.c_str());
  }
  // Note [pricing collectives]: measured again, a profile keeps the allreduce rates an earlier calibration under a
  // launcher measured (one process cannot measure them).
  std::map<int, LinkRate> kept;
  if (recalibrate && std::filesystem::exists(file, ec))
    if (auto old = Profile::load(file); old.is_ok() && old.value().check_machine(here).is_ok())
      kept = old.value().allreduce;
  CalibrateOptions o;
  for (const KernelCall& c : needs.kernels)
    if (!profile.measured(c)) o.kernels.push_back(c);
  for (const auto& q : needs.sequences)
    if (!profile.sequences.count(q)) o.sequences.push_back(q);
  for (const auto& q : needs.host_segments)
    if (!profile.host_segments.count(q)) o.host_segments.push_back(q);
  const size_t missing = o.kernels.size() + o.sequences.size() + o.host_segments.size();
  // Unified Memory's rates, where the rows move managed pages and the profile (older than them) lacks them.
  const bool um_missing = needs.um && !(profile.um_to_host.valid() && profile.um_fault_in.valid());
  if (have && missing == 0 && !um_missing) return profile;

  o.progress = progress;
  o.links = !have;
  o.host = !have;
  o.um = !have || um_missing;
  if (heat_seconds >= 0) o.heat_seconds = heat_seconds;
  // cuDNN's attention workspace for this run's shape, on top of what the measurements take.
  int64_t attention_workspace = 0;
  if (auto run = resolve_run(cfg); run.is_ok()) attention_workspace = run.value().reserve.attention_workspace_bytes;
  const int64_t budget = calibration_budget(o) + attention_workspace;
  if (progress) {
    if (!have)
      std::fprintf(progress,
                   "calibrate: measuring this machine (%s%s), %zu kernel shapes and %zu sequences; cached in %s\n",
                   here.device.c_str(), here.sim.empty() ? "" : (", " + here.sim).c_str(), o.kernels.size(),
                   o.sequences.size(), file.c_str());
    else
      std::fprintf(progress, "calibrate: measuring %zu kernel shapes and %zu sequences the profile lacks\n",
                   o.kernels.size(), o.sequences.size());
  }
  TT_ASSIGN_OR_RETURN(auto be, create_backend(backend, run_backend_options(cfg, budget, 0, attention_workspace)));
  if (!have) {
    TT_ASSIGN_OR_RETURN(profile, calibrate(*be, here, o));
    profile.allreduce = std::move(kept);
  } else {
    TT_TRY(measure_kernels(*be, profile, o));
    if (um_missing) TT_TRY(measure_um(*be, profile, o));
  }
  if (cached) {
    TT_TRY(profile.save(file));
  } else if (progress) {
    std::fprintf(progress, "calibrate: %s not updated (a profile named with --machine-profile is only read)\n", file.c_str());
  }
  return profile;
}

void print_plan_table(const std::vector<PlanRow>& rows, FILE* out) {
  bool measured = false;
  for (const PlanRow& r : rows) measured |= r.measured_s >= 0;
  std::fprintf(out, "%-36s %-9s %-4s %10s %10s %9s %10s %10s %9s", "plan", "optimizer", "fits", "device", "host",
               "ms/step", "tokens/s", "exposed ms", "host ms");
  if (measured) std::fprintf(out, " %11s %7s %11s", "measured ms", "error", "peak");
  std::fprintf(out, "\n");
  const PlanRow* best = nullptr;
  for (const PlanRow& r : rows)
    if (r.fits() && (!best || r.sim.step_seconds < best->sim.step_seconds)) best = &r;
  for (const PlanRow& r : rows) {
    // Device: the device pool and the managed pages the plan keeps on the device (RunSpec::managed_device).
    const int64_t dev = r.run.inventory.total(Inventory::kDevice) + r.run.managed_device,
                  host = r.run.inventory.total(Inventory::kHost);
    std::fprintf(out, "%-36s %-9s %-4s %10s %10s %9.2f %10.0f %10.2f %9.2f", r.plan.c_str(),
                 optimizer_placement_name(r.optimizer),
                 r.fits() ? (&r == best ? "yes*" : "yes") : r.oversubscribed > 0 ? "over" : "no",
                 format_bytes(dev).c_str(), format_bytes(host).c_str(), 1e3 * r.sim.step_seconds, r.tokens_per_s,
                 1e3 * r.sim.exposed_wait_seconds, 1e3 * r.sim.busy_seconds[static_cast<int>(StreamId::kHost)]);
    if (measured) {
      if (r.measured_s >= 0)
        std::fprintf(out, " %11.2f %+6.1f%% %11s", 1e3 * r.measured_s,
                     100.0 * (r.sim.step_seconds - r.measured_s) / r.measured_s,
                     format_bytes(r.measured_peak).c_str());
      else
        std::fprintf(out, " %11s %7s %11s", "-", "-", "-");
    }
    std::fprintf(out, "\n");
  }
  if (best) {
    std::fprintf(out, "fastest that fits (*): --plan %s --optimizer %s, %.2f ms a step predicted\n", best->plan.c_str(),
                 optimizer_placement_name(best->optimizer), 1e3 * best->sim.step_seconds);
  } else {
    int64_t least = -1;
    for (const PlanRow& r : rows) {
      const int64_t dev = r.run.inventory.total(Inventory::kDevice) + r.run.managed_device;
      if (least < 0 || dev < least) least = dev;
    }
    std::fprintf(out, "no plan fits the budget of %s; the smallest needs %s\n",
                 rows.empty() ? "?" : format_bytes(rows.front().run.budget).c_str(), format_bytes(least).c_str());
  }
  for (const PlanRow& r : rows)
    if (r.oversubscribed > 0) {
      std::fprintf(out,
                   "over: runs only with --um-allow-oversubscription (never on a GPU shared with other jobs); its "
                   "time is an estimate: the managed pages beyond the budget migrated each way twice a step (Note "
                   "[oversubscribed Unified Memory] in perf/planner.h)\n");
      break;
    }
  for (const PlanRow& r : rows)
    if (r.unpriced_collectives) {
      // The mesh dimensions whose collectives need a rate: the data ranks' average, the model ranks' sums.
      std::string how;
      for (const int n : {r.run.exec.data_ranks, r.run.exec.model.tp})
        if (n > 1 && how.find("-n " + std::to_string(n) + " ") == std::string::npos)
          how += std::string(how.empty() ? "" : ", and ") + "tiertrain launch -n " + std::to_string(n) +
                 " -- tiertrain calibrate";
      std::fprintf(out,
                   "the mesh's collectives are unpriced where the profile has no allreduce rate for their ranks "
                   "(counted as free): measure it with %s (Note [pricing collectives])\n",
                   how.c_str());
      break;
    }
}

}  // namespace tt::perf
