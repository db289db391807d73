// `tiertrain gen-features --out DIR`: a synthetic dense-feature dataset for train-features (apps/features.h):
// DIR/features.npy (samples x dim, float32) and DIR/labels.npy (int32).
#include <cstdint>
#include <cstdio>

#include "cli/command.h"
#include "apps/features.h"

namespace tt::cli {

namespace {

class GenFeaturesCommand final : public Command {
 public:
  CLI::App* add_to(CLI::App& app) override {
    CLI::App* gen = app.add_subcommand(
        "gen-features", "write a synthetic dense-feature dataset for train-features (issue 21's large-input "
                        "workload): DIR/features.npy (samples x dim, float32) and DIR/labels.npy (int32)");
    gen->add_option("--out", o_.out, "the folder to write")->required();
    gen->add_option("--samples", o_.samples, "rows [default: 65536]")->check(CLI::Range(int64_t(1), int64_t(1) << 36));
    gen->add_option("--dim", o_.dim, "floats a row [default: 1024]")->check(CLI::Range(1, 1 << 24));
    gen->add_option("--classes", o_.classes, "label classes [default: 16]")->check(CLI::Range(2, 1 << 20));
    gen->add_option("--seed", o_.seed, "[default: 1]");
    return gen;
  }
  int run(Context&) override {
    if (Status s = generate_features(o_); !s.is_ok()) return report(s);
    std::printf("wrote %s/features.npy (%lld x %d float32) and %s/labels.npy (%d classes)\n", o_.out.c_str(),
                static_cast<long long>(o_.samples), o_.dim, o_.out.c_str(), o_.classes);
    return 0;
  }

 private:
  FeatureGenOptions o_;
};

}  // namespace

std::unique_ptr<Command> make_gen_features_command() { return std::make_unique<GenFeaturesCommand>(); }

}  // namespace tt::cli
