// exec/train_config: the knobs of `tiertrain train`, declared once in the config registry (core/config.h), and the
// typed TrainConfig the trainer reads them into.
//
//   Config cfg;
//   declare_train_knobs(cfg);
//   ... cfg.set(...) from file, env and flags ...
//   TT_ASSIGN_OR_RETURN(TrainConfig tc, train_config_from(cfg));
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "model/gpt.h"

namespace tt {

constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

struct TrainConfig {
  GptConfig model;  // vocab comes from the data
  int batch = 16;
  std::string data = kDefaultCorpus;
  double val_fraction = 0.05;

  int64_t steps = 2000;
  int64_t stop_at = 0;  // > 0: stop after this step (the schedule still spans `steps`)
  float lr = 3e-3f;
  float min_lr_frac = 0.1f;
  int64_t warmup = 30;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  uint64_t seed = 1337;

  std::string backend = "auto";  // auto | cpu | cuda
  std::string dtype = "auto";
  std::string plan = "in-core";  // in-core | recompute | swap-activations (Notes [recompute], [swap] in model/gpt.h)
  std::string optimizer = "plan";  // plan | device | cpu (overrides the plan's)
  bool speculative_update = false;  // CPU optimizer: Note [speculative update] in model/adamw.h
  int swap_slots = 2;    // auto | f32 | bf16 (compute dtype; auto: bf16 on a GPU, f32 on the CPU)
  int64_t device_budget = 0;     // bytes; 0 = automatic
  int threads = 0;
  int64_t cpu_copy_delay_us = 0;  // CPU backend: simulated host<->device link latency
  int64_t cpu_compute_delay_us = 0;  // CPU backend: added to every compute op (slow kernels, for tests)
  int64_t cpu_host_delay_us = 0;     // CPU backend: added to every piece of host-stream work (a slow host optimizer)
  int host_numa_node = -1;        // host pool placement; -1: automatic
  bool cpu_lock_host_memory = false;

  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  std::string resume;  // "" | "latest" | path of a checkpoint file

  int64_t eval_every = 100;
  int64_t eval_batches = 20;
  std::string metrics_out;
  int64_t log_every = 10;
  bool profile = false;  // time every op (after the first step) and print a table at the end
  std::string trace;     // write a Chrome/Perfetto trace of the steps (after the first) to this file
  bool dry_run = false;  // print what the run would need and allocate nothing (the CLI's --dry-run)

  nlohmann::json resolved;  // every knob as set, for metrics and checkpoints
};

void declare_train_knobs(Config& cfg);
// Reads the knobs; cross-checks what single knobs cannot (heads divide dim, stop_at <= steps, ...).
Result<TrainConfig> train_config_from(const Config& cfg);

// Learning rate at 1-based step s: linear warmup, then cosine from lr to lr * min_lr_frac at `steps`.
float learning_rate(const TrainConfig& tc, int64_t step);

}  // namespace tt
