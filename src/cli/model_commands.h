// cli/model_commands: what is done with a trained model. `tiertrain sample CHECKPOINT` (text drawn from it,
// exec/generate.h), and the end of a `train` with a run folder (Note [run folder] in exec/train_config.h): a sample
// of the final checkpoint, printed and kept in the folder. They return the process's exit code.
#pragma once

#include <cstdio>
#include <string>

#include "exec/generate.h"
#include "exec/train_config.h"

namespace tt::cli {

struct SampleCommand {
  std::string checkpoint;  // a checkpoint file, a checkpoint folder or a run folder
  SampleOptions options;
  std::string out;         // also write the text here
};
int run_sample(const SampleCommand& cmd, FILE* out);

// After a run with --run-dir: --sample-tokens tokens from its final checkpoint, printed and written to
// RUN/sample.txt, then where the run folder is. A failed sample is a warning: the run itself succeeded.
void finish_run_folder(const TrainConfig& cfg, FILE* out);

}  // namespace tt::cli
