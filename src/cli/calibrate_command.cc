// `tiertrain calibrate`: measure this machine for the performance model (perf/calibrate.h) and cache the profile; with
// several ranks (tiertrain launch -n N), an allreduce over them too. Takes the train command's knobs for the model,
// batch, backend and budget.
#include <cstdio>
#include <optional>
#include <string>

#include "backend/registry.h"
#include "cli/command.h"
#include "comm/comm.h"
#include "core/units.h"
#include "perf/planner.h"

namespace tt::cli {

namespace {

int calibrate(const TrainConfig& cfg, const std::string& out_path, double heat_seconds, FILE* out) {
  auto c = with_vocab(cfg);
  if (!c.is_ok()) return report(c.status());
  // Note [pricing collectives] (perf/costs.cc): started as N ranks (tiertrain launch -n N, mpirun), every rank
  // measures an allreduce over the N through the runs' reducer together; then rank 0 alone measures the rest, the
  // others having stopped, so that nothing else runs beside its timings.
  auto world = comm::world();
  if (!world.is_ok()) return report(world.status());
  const int ranks = world.value()->size(), me = world.value()->rank();
  std::optional<perf::LinkRate> reduce;
  if (ranks > 1) {
    auto backend = resolve_backend_name(c.value().backend);
    if (!backend.is_ok()) return report(backend.status());
    if (me == 0) std::fprintf(out, "calibrate: an allreduce over %d ranks (64 KiB to 64 MiB)\n", ranks);
    auto be = create_backend(backend.value(), run_backend_options(c.value(), int64_t(256) << 20));
    if (!be.is_ok()) return report(be.status());
    perf::CalibrateOptions o;
    auto rate = perf::measure_allreduce(*be.value(), *world.value(), o);
    if (!rate.is_ok()) return report(rate.status());
    if (me != 0) {
      std::fprintf(out, "calibrate: rank %d measured the allreduce with the others; rank 0 measures the rest and "
                        "keeps the profile\n", me);
      return 0;
    }
    reduce = rate.value();
  }
  auto rows = perf::plan_rows(c.value());
  if (!rows.is_ok()) return report(rows.status());
  // A fresh profile in the cache (keeping the allreduce rates it had), with this launch's rate; where --out says too.
  std::string path;
  auto profile = perf::machine_profile(c.value(), "", perf::rows_needs(rows.value()), out,
                                       /*recalibrate=*/true, &path, heat_seconds);
  if (!profile.is_ok()) return report(profile.status());
  if (reduce) {
    profile.value().allreduce[ranks] = *reduce;
    if (Status s = profile.value().save(path); !s.is_ok()) return report(s);
  }
  if (!out_path.empty()) {
    if (Status s = profile.value().save(out_path); !s.is_ok()) return report(s);
    path = out_path;
  }
  const perf::Profile& p = profile.value();
  std::fprintf(out, "calibrated in %.1f s (sequences timed after %.2f s of each): %s\n",
               p.calibrate_seconds, p.heat_seconds, path.c_str());
  auto link = [&](const char* name, const perf::LinkRate& l) {
    std::fprintf(out, "  %-13s %7.2f GB/s, latency %6.1f us\n", name, l.bytes_per_s / 1e9, l.latency_s * 1e6);
  };
  for (const auto& [n, l] : p.allreduce) {
    const std::string name = "allreduce x" + std::to_string(n);
    link(name.c_str(), l);
  }
  link("h2d pinned", p.h2d_pinned);
  link("d2h pinned", p.d2h_pinned);
  link("h2d pageable", p.h2d_pageable);
  link("d2h pageable", p.d2h_pageable);
  std::fprintf(out, "  both at once  h2d %.2f GB/s, d2h %.2f GB/s\n", p.duplex_h2d_bytes_per_s / 1e9,
               p.duplex_d2h_bytes_per_s / 1e9);
  if (p.um_to_host.valid()) {  // Unified Memory (Profile::um_*); a rate above 1 PB/s is a latency-only fit
    link("UM to host", p.um_to_host);
    link("UM to device", p.um_to_device);
    link("UM populate", p.um_populate);
    link("UM release", p.um_discard);
    link("UM on faults", p.um_fault_in);
  } else {
    std::fprintf(out, "  UM            not measured (no managed memory on this backend)\n");
  }
  std::fprintf(out, "  contention    (slower while the other runs)");
  for (int v = 0; v < perf::kNumTraffic; ++v)
    for (int o = 0; o < perf::kNumTraffic; ++o)
      if (o != v)
        std::fprintf(out, " %s|%s x%.2f", perf::traffic_name(static_cast<perf::Traffic>(v)),
                     perf::traffic_name(static_cast<perf::Traffic>(o)), p.slowdown[v][o]);
  std::fprintf(out, "\n");
  for (const auto& [t, r] : p.host_adamw_params_per_s)
    std::fprintf(out, "  host AdamW    %3d threads: %s parameters/s\n", t, format_count(r).c_str());
  std::fprintf(out, "  host memcpy   %.2f GB/s\n", p.host_memcpy_bytes_per_s / 1e9);
  std::fprintf(out, "  kernels       %zu shapes, %zu sequences\n", p.kernels.size(), p.sequences.size());
  return 0;
}

class CalibrateCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* calibrate = app.add_subcommand(
        "calibrate", "measure this machine for the performance model (kernels of the configured model and its plans, "
                     "host links, host AdamW) and cache the profile; takes the train command's flags");
    calibrate->add_option("--out", out_,
                          "write the profile here as well (default: only $XDG_CACHE_HOME/tiertrain/profile-<machine>.json)");
    calibrate->add_option("--heat", heat_seconds_,
                          "seconds each sequence of kernels the step runs (a block's forward, its backward, ...) runs "
                          "before it is timed, so that it is timed at the clock a long run settles at [default: 0.2]")
        ->check(CLI::Range(0.0, 10.0));
    return calibrate;
  }
  bool takes_knobs() const override { return true; }
  int run(Context& ctx) override {
    auto tc = train_config_from(ctx.cfg);
    if (!tc.is_ok()) return report(tc.status());
    return calibrate(tc.value(), out_, heat_seconds_, stdout);
  }

 private:
  std::string out_;           // "" : the per-machine cache only
  double heat_seconds_ = -1;  // < 0: the default (Note [calibrating at sustained clocks] in perf/calibrate.h)
};

}  // namespace

std::unique_ptr<Command> make_calibrate_command() { return std::make_unique<CalibrateCommand>(); }

}  // namespace tt::cli
