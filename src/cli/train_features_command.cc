// `tiertrain train-features --data DIR`: an MLP classifier trained on dense float features (apps/features.h), data
// parallel over the ranks of a job with --input direct|via-root|replicated, timing each rank's input stage.
#include <cstdio>

#include "cli/command.h"
#include "apps/features.h"

namespace tt::cli {

namespace {

class TrainFeaturesCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* t = app.add_subcommand(
        "train-features", "train an MLP classifier on dense float features (numpy .npy), data parallel over the ranks "
                          "of a job with --input direct|via-root|replicated, timing each rank's input stage (issue "
                          "21's large-input workload): tiertrain launch -n 4 -- tiertrain train-features --data DIR "
                          "--mesh data=4 --batch 16384");
    t->add_option("--data", o_.data, "a folder with features.npy and labels.npy")->required();
    t->add_option("--mesh", o_.mesh, "data=N: the ranks of the job [default: one rank]");
    t->add_option("--input", o_.input,
                  "direct (each rank reads its rows), via-root (rank 0 reads all and scatters), replicated (each rank "
                  "reads all, keeps its rows) [default: direct]")
        ->check(CLI::IsMember({"direct", "via-root", "replicated"}));
    t->add_option("--backend", o_.backend, "auto, cpu or cuda [default: auto]")
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    t->add_option("--batch", o_.batch, "rows a step over all ranks [default: 4096]")->check(CLI::Range(1, 1 << 30));
    t->add_option("--hidden", o_.hidden, "the MLP's hidden width [default: 256]")->check(CLI::Range(1, 1 << 20));
    t->add_option("--steps", o_.steps, "[default: 20]")->check(CLI::Range(1, 1 << 30));
    t->add_option("--lr", o_.lr, "AdamW's learning rate [default: 0.001]")->check(kFinitePositive);
    t->add_option("--seed", o_.seed, "initial values [default: 1]")->check(kUnsigned);
    t->add_option("--threads", o_.threads, "CPU threads (0: automatic) [default: 0]")->check(CLI::Range(0, 4096));
    t->add_option("--metrics-out", o_.metrics_out, "per-step loss and times as JSON (rank 0)");
    return t;
  }
  int run(Context&) override {
    auto r = train_features(o_, stdout);
    if (!r.is_ok()) return report(r.status());
    return 0;
  }

 private:
  FeatureTrainOptions o_;
};

}  // namespace

std::unique_ptr<Command> make_train_features_command() { return std::make_unique<TrainFeaturesCommand>(); }

}  // namespace tt::cli
