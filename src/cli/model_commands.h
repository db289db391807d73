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

// `tiertrain plot RUN`: the loss curves (training loss per logged step, validation loss per evaluation) of a run
// folder's metrics.jsonl (or a metrics .jsonl / .json file) as an SVG line chart: RUN/loss.svg, or --out.
struct PlotCommand {
  std::string run;
  std::string out;  // "": loss.svg in the run folder, or the metrics file's name with .svg
};
int run_plot(const PlotCommand& cmd, FILE* out);

// `tiertrain eval CHECKPOINT --data FILE`: its mean loss on every token of the data (exec/generate.h).
struct EvalCommand {
  std::string checkpoint;
  EvalOptions options;
};
int run_eval(const EvalCommand& cmd, FILE* out);

// `tiertrain export CHECKPOINT --out DIR`: its parameters in Hugging Face's GPT-2 layout, DIR/model.safetensors and
// DIR/config.json (exec/export.h).
struct ExportCommand {
  std::string checkpoint;
  std::string out;
  std::string format = "safetensors";
};
int run_export(const ExportCommand& cmd, FILE* out);

// After a run with --run-dir: --sample-tokens tokens from its final checkpoint, printed and written to
// RUN/sample.txt, its loss curves in RUN/loss.svg, then where the run folder is. A failed sample is a warning: the run itself succeeded.
void finish_run_folder(const TrainConfig& cfg, FILE* out);

}  // namespace tt::cli
