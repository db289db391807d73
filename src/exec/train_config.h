// exec/train_config: the knobs of `tiertrain train`, declared once in the config registry (core/config.h), and the
// typed TrainConfig the trainer reads them into.
//
//   Config cfg;
//   declare_train_knobs(cfg);
//   ... cfg.set(...) from file, env and flags ...
//   TT_ASSIGN_OR_RETURN(TrainConfig tc, train_config_from(cfg));
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/attention_options.h"
#include "backend/gemm_options.h"
#include "core/config.h"
#include "memory/um.h"
#include "plan/plan.h"
#include "model/model.h"

namespace tt {

constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

struct TrainConfig {
  ModelConfig model;  // vocab comes from the data
  // The model knobs set by a flag, a variable or a config file ("layers", "family", ...): the others may be taken from
  // a Hugging Face folder's config.json (--from-safetensors) or the checkpoint a run resumes (adopt_model).
  std::set<std::string> model_knobs_given;
  int batch = 16;
  int grad_accum = 1;  // micro-batches of `batch` a step (Note [gradient accumulation] in exec/executor.h)
  // --micro-batch auto: `batch` is the step's until the automatic plan splits it (Note [automatic micro-batch] in
  // perf/auto_plan.h: cli's choose_train_plan sets batch, grad_accum and the plan, and clears this)
  bool micro_batch_auto = false;
  bool allow_nonfinite = false;  // load checkpoints holding NaN or infinity (check_finite_tensor): forensics
  std::string data = kDefaultCorpus;
  double val_fraction = 0.05;

  int64_t steps = 2000;
  int64_t stop_at = 0;  // > 0: stop after this step (the schedule still spans `steps`)
  double time_limit_min = 0;  // > 0: stop early after this much wall time (Note [stopping early], exec/trainer.cc)
  float lr = 3e-3f;
  bool lr_auto = false;  // lr came from auto_learning_rate (the knob was 0)
  float min_lr_frac = 0.1f;
  int64_t warmup = 30;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  uint64_t seed = 1337;

  std::string backend = "auto";  // auto | cpu | cuda
  std::string dtype = "auto";
  std::string plan = "in-core";  // a shortcut, a JSON plan file, or "auto" (the CLI chooses: perf/auto_plan.h)
  bool plan_given = false;       // --plan was set (flag, environment or file), not left at its default
  std::optional<Plan> plan_value;  // the plan itself (the automatic one), used instead of `plan` when set
  std::optional<OptimizerPlacement> optimizer;  // --optimizer device|cpu overrides the plan's ("plan": unset)
  bool speculative_update = false;  // CPU optimizer: Note [speculative update] in exec/optimizer.h
  int swap_slots = 2;    // auto | f32 | bf16 (compute dtype; auto: bf16 on a GPU, f32 on the CPU)
  int64_t device_budget = 0;     // bytes; 0 = automatic
  int threads = 0;
  int64_t cpu_copy_delay_us = 0;  // CPU backend: simulated host<->device link latency
  int64_t cpu_compute_delay_us = 0;  // CPU backend: added to every compute op (slow kernels, for tests)
  int64_t cpu_host_delay_us = 0;     // CPU backend: added to every piece of host-stream work (a slow host optimizer)
  int64_t lm_chunk_rows = 0;  // the LM head's logits rows at once (0: the model's default)
  bool um_allow_oversubscription = false;  // issue 20: managed memory beyond the GPU's free memory (unsafe if shared)
  // Note [host buffers in rings] (plan/schedule.h): auto (whole unless only rings fit the host), whole or ring.
  std::string host_buffers = "auto";
  // Note [optimizer split] (plan/schedule.h): plan (as the plan says: none unless it gives a count), auto (as many segments as fit the device
  // beside the run, unless the plan gives a count; none on the CPU backend) or a count.
  std::string device_optimizer_segments = "auto";
  bool grads_in_activations = true;  // Note [gradients in dead activations] (plan/schedule.h); false: the knob off
  // The knob grad_dtype: Note [bf16 gradients] (exec/executor.h); auto: bf16 where the run computes in bf16 and takes
  // them (a JSON plan that names grad_dtype keeps its own), else f32.
  GradDtype grad_dtype = GradDtype::kAuto;
  bool norm_beside_backward = true;  // Note [norm beside the backward] (plan/schedule.cc); false: in the step
  // issue 20: managed prefetches to the host in pieces of this many MiB (0: whole)
  int64_t um_host_piece_mib = memory::kDefaultUmHostPieceBytes >> 20;
  bool host_ahead = true;  // Note [host one step ahead] (exec/trainer.cc): step k + 1 enqueued before k's loss is read
  bool um_counters = false;  // issue 20: count Unified Memory's page faults and migrations per step (CUPTI on a GPU)
  int host_numa_node = -1;        // host pool placement; -1: automatic
  AttentionOptions attention{};   // a GPU: cuDNN's fused attention or our kernels (attention_impl, ...)
  GemmImpl gemm = GemmImpl::kCublas;  // a GPU: the bf16 GEMMs without an epilogue (gemm_impl)
  int64_t xent_blocks = 0;  // a GPU: the fused cross-entropy's grid (Note [cross-entropy rows in flight]); 0: a row each
  bool cpu_lock_host_memory = false;

  // Issue 21: the named device mesh (mesh/mesh.h) this run is one rank of, and its layout rules; "" for one
  // process. Data parallel today (batch over a mesh dimension: Note [data parallel] in plan/schedule.cc).
  std::string mesh;
  std::string layout;
  std::string input = "direct";  // direct | via-root | replicated (Note [data-parallel input] in exec/trainer.cc)
  bool shard_optimizer = false;  // Note [sharded optimizer] in exec/optimizer.h (ZeRO-1 over the batch dimension)

  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  std::string resume;  // "" | "latest" | path of a checkpoint file
  std::string init_from;  // a checkpoint (file, folder, run folder) whose parameters start a new run
  std::string from_safetensors;  // a Hugging Face folder (or .safetensors file) that starts a new run (exec/hf.h)

  int64_t eval_every = 100;
  int64_t eval_batches = 20;
  std::string metrics_out;
  std::string run_dir;        // Note [run folder]; "" none (resolved: never "auto" once apply_run_dir ran)
  std::string metrics_jsonl;  // appended as the run goes
  int64_t sample_tokens = 200;  // with run_dir: sampled from the final checkpoint at the end
  int64_t log_every = 10;
  bool profile = false;  // time every op (after the first step) and print a table at the end
  std::string trace;     // write a Chrome/Perfetto trace of the steps (after the first) to this file
  bool dry_run = false;  // print what the run would need and allocate nothing (the CLI's --dry-run)
  std::string schedule_out;  // with dry_run: write the schedule and inventory as JSON here (--schedule)

  nlohmann::json resolved;  // every knob as set, for metrics and checkpoints
};

void declare_train_knobs(Config& cfg);

// Note [run folder]
// A run with --run-dir DIR keeps what it makes in one folder, so that a finished (or killed) run can be found,
// read and continued: DIR/config.json (every knob as resolved, written before the first step), DIR/metrics.jsonl
// (one JSON record per logged step and per evaluation, appended and flushed as they happen, then the summary: a
// killed run keeps its curve), DIR/metrics.json (the whole run at the end, as --metrics-out), DIR/checkpoints/ (the
// final checkpoint, and --checkpoint-every's), DIR/sample.txt (--sample-tokens of text drawn from the final
// checkpoint). "auto" is runs/<local date-time>. The flags for each file (--checkpoint-dir, --metrics-out,
// --metrics-jsonl) still win. A folder that already holds a run is refused unless the run resumes from it
// (--resume), which appends to its metrics.jsonl.
//
// --steps 0 (the default): 2000 on a GPU, 800 on the CPU backend (the default model's main job in about 2 minutes
// on 2 cores), recorded with that origin.
Status apply_backend_defaults(Config& cfg);

// Sets the knobs run_dir implies (origin "from --run-dir"), `now` naming an "auto" folder (YYYYmmdd-HHMMSS).
Status apply_run_dir(Config& cfg, const std::string& now);
// Reads the knobs; cross-checks what single knobs cannot (heads divide dim, stop_at <= steps, ...).
Result<TrainConfig> train_config_from(const Config& cfg);
// The model of `from` (a Hugging Face folder's, a resumed checkpoint's), named `source` in errors, for cfg: `from`
// replaces every model knob not given (TrainConfig::model_knobs_given) and the vocabulary. A knob given that
// disagrees is an error naming both: a bad flag when `strict` (a folder), a checkpoint that does not match the run
// otherwise ("dim is 16 in the checkpoint but 32 now", as check_checkpoint_continues says it).
Status adopt_model(TrainConfig& cfg, const ModelConfig& from, const std::string& source, bool strict);

// The peak learning rate when none is given (--lr 0): 3e-3 x min(1, 128 / dim). 3e-3 suits the default model
// (d128); Adam moves every weight by about the learning rate on its first steps, and the change in a layer's
// output grows with its width, so wider models need it smaller. At d4096 GPT-2-initialised models diverged after a
// 3-step warm-up even at a third of this rate, on the CPU and CUDA backends and in PyTorch alike (the model, not a
// kernel), and learned at this rate with the default 30-step warm-up (docs/benchmarks/2026-11-30-h200x2-width-check/).
// The values follow GPT-3's table within 25% (6e-4 at d768, 2e-4 at d2048, 1.2e-4 at d4096).
float auto_learning_rate(int dim);

// Learning rate at 1-based step s: linear warmup, then cosine from lr to lr * min_lr_frac at `steps`.
float learning_rate(const TrainConfig& tc, int64_t step);

}  // namespace tt
