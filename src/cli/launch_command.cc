// `tiertrain launch -n N -- CMD [ARGS...]`: N local ranks of one job (comm/launch.h); `--cleanup` removes the
// shared-memory segments killed jobs left.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "comm/launch.h"
#include "core/units.h"

namespace tt::cli {

namespace {

// The usage line: the command after `--` is what it runs, which CLI11's own line ("[OPTIONS]") does not show.
class LaunchFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return "\nUsage: " + name + " -n N [OPTIONS] -- CMD [ARGS...]\n       " + name + " --cleanup\n";
  }
};

class LaunchCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    launch_ = app.add_subcommand(
        "launch", "start N local ranks of one job: tiertrain launch -n N [--bind-to core|share] -- CMD [ARGS...]; "
                  "each gets RANK, WORLD_SIZE, LOCAL_RANK and TIERTRAIN_COMM_ID; when a rank fails the others are "
                  "stopped. tiertrain launch --cleanup: remove the shared-memory segments killed jobs left");
    launch_->add_option("-n,--nproc", o_.ranks, "number of ranks (required but with --cleanup)")
        ->check(CLI::Range(1, 4096));
    launch_->add_flag("--cleanup", cleanup_,
                      "remove this user's tiertrain shared-memory segments that no process uses and that are over a "
                      "minute old (what killed jobs left; every launch does it first), then exit");
    launch_->add_option("--bind-to", bind_to_,
                        "core: pin rank r to the r-th CPU this process may use; share: to its equal share of those "
                        "CPUs (room for its helper threads); none (default: the ranks share the CPUs, and each rank's "
                        "OMP_NUM_THREADS is its share of them unless it is set)")
        ->check(CLI::IsMember({"none", "core", "share"}));
    launch_->add_flag("--tag-output,!--no-tag-output", o_.tag_output,
                      "prefix every line a rank writes with [rank R] (the ranks' output goes through the launcher, "
                      "line by line) [default: on]");
    launch_->add_option("--log-dir", o_.log_dir,
                        "also write each rank's stdout and stderr, untagged, to DIR/rank<R>.out and DIR/rank<R>.err");
    launch_->add_option("--grace", o_.grace_seconds,
                        "seconds between SIGTERM and SIGKILL when stopping the ranks after one failed [default: 5]")
        ->check(kFiniteNonNegative);
    launch_->formatter(std::make_shared<LaunchFormatter>());
    launch_->prefix_command();  // everything from the command on is the command
    launch_->allow_extras();
    return launch_;
  }
  int run(Context& ctx) override {
    if (cleanup_) {
      const RemovedFiles gone = comm::remove_stale_segments();
      std::printf("removed %d shared-memory segment%s (%s) that killed jobs left\n", gone.files,
                  gone.files == 1 ? "" : "s", format_bytes(gone.bytes).c_str());
      return 0;
    }
    if (launch_->count("-n") == 0) {
      std::fprintf(stderr, "tiertrain launch: -n N is required (tiertrain launch -n N -- CMD ...)\n");
      return kExitUsage;
    }
    o_.command = ctx.has_tail ? ctx.tail : launch_->remaining();
    o_.bind_cores = bind_to_ == "core";
    o_.bind_share = bind_to_ == "share";
    auto rc = comm::launch(o_);
    if (!rc.is_ok()) return report(rc.status());
    return rc.value();
  }

 private:
  CLI::App* launch_ = nullptr;
  comm::LaunchOptions o_;
  std::string bind_to_ = "none";
  bool cleanup_ = false;
};

}  // namespace

std::unique_ptr<Command> make_launch_command() { return std::make_unique<LaunchCommand>(); }

}  // namespace tt::cli
