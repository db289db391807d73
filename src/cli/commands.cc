#include "cli/command.h"

namespace tt::cli {

std::vector<std::unique_ptr<Command>> all_commands() {
  std::vector<std::unique_ptr<Command>> c;
  c.push_back(make_train_command());
  c.push_back(make_calibrate_command());
  c.push_back(make_plan_command());
  c.push_back(make_sample_command());
  c.push_back(make_tokenize_command());
  c.push_back(make_plot_command());
  c.push_back(make_eval_command());
  c.push_back(make_export_command());
  c.push_back(make_gen_features_command());
  c.push_back(make_train_features_command());
  c.push_back(make_launch_command());
  c.push_back(make_comm_bench_command());
  return c;
}

}  // namespace tt::cli
