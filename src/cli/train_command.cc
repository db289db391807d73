// `tiertrain train`: train the model of the knobs (exec/trainer.h), with the plan given or chosen (--plan auto, or
// none when in-core does not fit), then finish its run folder. --dry-run prints what the run needs and exits.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <string>

#include "cli/command.h"
#include "core/env.h"
#include "core/stop.h"
#include "exec/trainer.h"

namespace tt::cli {

namespace {

class TrainCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* train = app.add_subcommand("train", "train the GPT on a text corpus or token shards");
    train->add_flag("--dry-run", dry_run_,
                    "load the data, resolve the plan and print the device and host memory the run needs against the "
                    "budget, then exit (0: it fits, 1: it does not); nothing is allocated");
    train->add_flag("--explain", explain_,
                    "with --plan auto (or no --plan when in-core does not fit): say how the plan was chosen, with the "
                    "runners-up");
    train->add_option("--schedule", schedule_out_,
                      "with --dry-run: write the compiled schedule (every pass's operations per stream, with bytes, "
                      "FLOPs and events) and the memory inventory to this JSON file (docs/FORMATS.md)");
    return train;
  }
  bool takes_knobs() const override { return true; }

  // Note [run folder] in exec/train_config.h: --run-dir sets the paths of what the run keeps.
  Status prepare(Config& cfg) override {
    char now[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(now, sizeof now, "%Y%m%d-%H%M%S", std::localtime(&t));
    return apply_run_dir(cfg, now);
  }

  int run(Context& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();  // --time-limit counts from here
    auto tc = train_config_from(ctx.cfg);
    if (!tc.is_ok()) return report(tc.status());
    TrainConfig& c = tc.value();
    // Issue 24: under `tiertrain launch -n 2` (or mpirun, srun) without a --mesh every rank would train the same
    // model alone, and with a shared --checkpoint-dir write over the others' files: refused (issue 21: --mesh data=N
    // makes them one data-parallel run).
    for (const char* var : {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
      const char* v = env::get(var);
      if (v != nullptr && std::atoi(v) > 1 && c.mesh.empty()) {
        std::fprintf(stderr,
                     "tiertrain: error: %s=%s says this is one of %s ranks, and train has no --mesh: each rank would "
                     "train the same model alone (and write over the others' checkpoints). Give --mesh data=%s to "
                     "train one model data-parallel over them\n",
                     var, v, v, v);
        return kExitUsage;
      }
    }
    if (!c.mesh.empty() && c.plan == "auto") {
      std::fprintf(stderr, "tiertrain: error: --plan auto with --mesh: the automatic plan of a mesh run is not built "
                           "yet (every rank must run the same plan); give one (--plan in-core, recompute, ...)\n");
      return kExitUsage;
    }
    c.dry_run = dry_run_;
    c.schedule_out = schedule_out_;
    if (!schedule_out_.empty() && !dry_run_) {
      std::fprintf(stderr, "error: --schedule FILE is written by a dry run: add --dry-run\n");
      return kExitUsage;
    }
    // --plan auto is chosen before the run; with no --plan, only when the in-core plan turns out not to fit.
    if (c.plan == "auto") {
      auto chose = choose_train_plan(c, explain_, stdout);
      if (!chose.is_ok()) return report(chose.status());
    }
    auto trainer = Trainer::create(c, stdout);
    if (!trainer.is_ok() && trainer.status().code() == StatusCode::kOutOfMemory && !c.plan_given && !dry_run_ &&
        c.mesh.empty()) {
      auto chose = choose_train_plan(c, explain_, stdout);
      if (!chose.is_ok()) return report(chose.status());
      if (chose.value()) trainer = Trainer::create(c, stdout);
    }
    if (!trainer.is_ok()) return report(trainer.status());
    if (dry_run_) return trainer.value()->dry_run_fits() ? 0 : 1;
    // Note [stopping early] (exec/trainer.cc): from here a signal stops the run at a step's end (before, while the
    // data and the model load, it ends the process as it would without us: nothing is trained yet).
    auto stop = StopRequest::install(c.time_limit_min * 60,
                                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!stop.is_ok()) return report(stop.status());
    auto summary = trainer.value()->run(stop.value().get());
    if (!summary.is_ok()) return report(summary.status());
    const bool lead = trainer.value()->is_lead();
    trainer.value().reset();  // the device memory back before the sample takes its own
    const std::string& stopped = summary.value().stopped;
    if (lead) finish_run_folder(c, stdout, stopped.empty());
    if (stopped.empty()) return 0;
    if (lead) {
      const long long at = static_cast<long long>(summary.value().last_step);
      if (c.checkpoint_dir.empty())
        std::printf("stopped at step %lld of %lld (%s); nothing saved: no --checkpoint-dir\n", at,
                    static_cast<long long>(c.steps), stopped.c_str());
      else  // (with --run-dir auto, the folder's name: auto would start a new one)
        std::printf("stopped at step %lld of %lld (%s): checkpoint in %s; to go on, run the same command with %s\n",
                    at, static_cast<long long>(c.steps), stopped.c_str(), c.checkpoint_dir.c_str(),
                    c.run_dir.empty() ? "--resume" : ("--run-dir " + c.run_dir + " --resume").c_str());
      std::fflush(stdout);
    }
    // 75 says "run it again with --resume": only true with a checkpoint; without one the run is lost (1).
    return c.checkpoint_dir.empty() ? kExitFailure : kExitStopped;
  }

 private:
  bool dry_run_ = false;
  bool explain_ = false;
  std::string schedule_out_;
};

}  // namespace

std::unique_ptr<Command> make_train_command() { return std::make_unique<TrainCommand>(); }

}  // namespace tt::cli
