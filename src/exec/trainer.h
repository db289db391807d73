// exec/trainer: one training run of the GPT: loads data, picks the backend, checks the model fits the device budget
// before allocating anything, trains with AdamW and the LR schedule, evaluates, checkpoints, resumes, and reports
// progress lines and a metrics JSON.
//
// Trainer::create resolves the configuration into a RunSpec (resolve_run: backend by name, dtype, plan, budget,
// feasibility; nothing allocated), then builds the run: the backend, the executor (exec/executor.h: inventory,
// model, optimizer, schedule), the sampler, and resumes from a checkpoint.
//
//   TT_ASSIGN_OR_RETURN(auto trainer, Trainer::create(train_config));
//   TT_ASSIGN_OR_RETURN(TrainSummary s, trainer->run());
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/rng.h"
#include "core/stop.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "backend/registry.h"
#include "exec/checkpoint.h"
#include "exec/executor.h"
#include "exec/grad_reducer.h"
#include "mesh/mesh.h"
#include "plan/plan.h"
#include "exec/train_config.h"
#include "model/model.h"

namespace tt {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double ms = 0;
  double tokens_per_s = 0;
};

struct EvalRecord {
  int64_t step = 0;
  double loss = 0;
  int64_t batches = 0;
};

struct TrainSummary {
  int64_t first_step = 0;  // first step run by this invocation
  int64_t last_step = 0;
  double first_loss = 0;
  double last_loss = 0;
  double last_val_loss = -1;  // < 0: never evaluated
  double median_ms = 0;
  double median_tokens_per_s = 0;
  double wall_s = 0;
  int64_t device_peak_bytes = 0;
  // Note [host one step ahead]: steps enqueued while the step before them was still unfinished.
  int64_t steps_enqueued_ahead = 0;
  // Note [stopping early] (exec/trainer.cc): why the run stopped before its end ("" when it did not): "SIGTERM",
  // "the time limit of 90 min"; the checkpoint (when there is a --checkpoint-dir) is of last_step.
  std::string stopped;
};

// Pinned host slots the next batches are staged in (Note [input staging]).
constexpr int kInputStagingSlots = 2;

// What a configuration resolves to before anything is allocated: the backend, the compute dtype, the plan, the
// executor's spec and its inventory (with what the backend keeps for itself), the budget, and whether it fits.
// Cheap enough to call in a loop (no data is read, nothing is allocated).
struct RunSpec {
  std::string backend;   // "cpu" or "cuda"
  BackendProbe probe;
  // Note [dry run without the GPU]: a dry run of --backend cuda on a machine without a usable GPU (a login node):
  // what a run on one would take, bf16, against --device-budget where one is given.
  bool gpu_absent = false;
  ExecSpec exec;
  BackendReserve reserve;
  // The configuration's attention options with the workspace cap resolved (Note [automatic attention workspace]).
  AttentionOptions attention;
  Inventory inventory;
  int64_t budget = 0;    // device bytes: the device pool's and the managed pages the plan keeps on the device
  // Issue 20: the managed pool (a reservation of Unified Memory, beside the device pool) and what of it the plan
  // keeps on the device at once (Executor::managed_device_bytes); the device pool gets budget - managed_device.
  int64_t managed_total = 0, managed_device = 0;
  // What the device holds at once: the device pool's need (inventory, backend reserve) and managed_device.
  int64_t device_need() const { return inventory.total(Inventory::kDevice) + managed_device; }
  bool budget_auto = false;
  bool fits_device = false, fits_host = false;
  // Note [host memory of a run]: the machine's RAM, what of it is available now, and what the run takes of it.
  int64_t host_ram = 0, host_available = 0;
  int64_t host_need() const;
  std::string describe_host_need() const;  // its parts: the host slab's classes, managed pages, the CPU's arena
  // One line per plan that would fit when this one does not (for the error).
  std::string alternatives;
  // Set when the host buffers were made rings so that the run fits the host (host_buffers auto).
  std::string host_ring_note;
  // Set when --device-optimizer-segments auto put some segments' AdamW on the device (Note [optimizer split]).
  std::string split_note;
};
// cfg.model.vocab must be set (from the data).
Result<RunSpec> resolve_run(const TrainConfig& cfg);
// Note [automatic attention workspace]: with the automatic budget, whether the run keeps the larger automatic
// attention workspace (its backend reserve `reserve`) rather than the 512 MiB floor's (`floor_reserve`): yes unless
// only the floor lets the run's need plus the automatic budget's 5% fit the usable free memory.
bool keep_automatic_workspace(int64_t need_without_reserve, int64_t reserve, int64_t floor_reserve, int64_t usable);
// The backend options of a run of cfg (its threads, simulated delays, host memory placement, attention) with this
// budget and reserve: the trainer's, and the calibration's (perf/planner.cc).
BackendOptions run_backend_options(const TrainConfig& cfg, int64_t budget, int64_t scratch_bytes = 0,
                                   int64_t attention_workspace_bytes = 0);
// The backend of a resolved run, with the run's host memory reserved (the inventory's host part, in one slab).
Result<std::unique_ptr<Backend>> create_run_backend(const TrainConfig& cfg, const RunSpec& r);

class Trainer {
 public:
  // `out` receives the progress lines (stdout in the CLI; nullptr: quiet). With config.dry_run it prints what the
  // run would need (device memory per class against the budget, host memory) and allocates nothing; run() then
  // refuses, and dry_run_fits() says whether the run would fit.
  static Result<std::unique_ptr<Trainer>> create(const TrainConfig& config, FILE* out = stdout);
  bool dry_run_fits() const { return dry_run_fits_; }
  ~Trainer();

  // Runs from the current step (0, or the resumed one) to --stop-at or --steps; or, when `stop` asks for it (a
  // signal, the time limit), to the end of the steps in flight, with a checkpoint there (Note [stopping early]).
  Result<TrainSummary> run(const StopRequest* stop = nullptr);

  Model& model() { return ex_->model(); }
  Optimizer& optimizer() { return ex_->optimizer(); }
  Executor& executor() { return *ex_; }
  Backend& backend() { return *backend_; }
  const RunSpec& run_spec() const { return spec_; }
  const data::TokenDataset& dataset() const { return dataset_; }
  const std::vector<StepRecord>& history() const { return history_; }
  const std::vector<EvalRecord>& evals() const { return evals_; }
  int64_t step() const { return step_; }
  // Mean validation loss over --eval-batches batches (or as many as the split holds).
  Result<EvalRecord> evaluate();

 private:
  Trainer() = default;
  // Note [host one step ahead] (exec/trainer.cc): a step enqueued, a step finished (the oldest in flight), and
  // whether step `step` must be finished before the next one is enqueued.
  Status enqueue_step(int64_t step);
  Status finish_step(StepRecord* rec);
  bool finish_before_next(int64_t step, int64_t end) const;
  Status save(int64_t step);
  Status build();  // allocates and wires what spec_ says (create's second half)
  Status write_metrics(const TrainSummary& summary) const;
  Status open_run_dir();                // Note [run folder]: refuses a used one, creates it, writes config.json
  void record(const nlohmann::json& j);  // a line of --metrics-jsonl, flushed
  void print(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void print_profile() const;

  TrainConfig cfg_;
  RunSpec spec_;
  bool dry_run_fits_ = false;
  int64_t allocs_after_first_step_[3] = {0, 0, 0};  // device allocations, host allocations, host slabs
  std::map<std::string, int64_t> um_after_first_step_;  // --um-counters: the totals after the first step
  nlohmann::json um_per_step_;                          // and per step after it, at the end
  FILE* out_ = nullptr;
  data::TokenDataset dataset_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Executor> ex_;
  std::unique_ptr<OpProfiler> profiler_;
  Rng rng_;
  int64_t step_ = 0;
  bool speculate_next_ = true;  // Note [speculative update]: the last norm was under the clip (or no step yet)
  std::vector<int32_t> host_tokens_, host_targets_;  // evaluation batches
  // Note [input staging]: a ring of two pinned host slots (the executor's; Note [slot rings] in plan/schedule.h),
  // each holding a batch's tokens then targets. The training pass takes its batch from the device buffer input.next
  // into the model's inputs (after the copy's input_ready), then draws the next batch through the executor's input
  // source into the next host slot and copies it to input.next on the h2d stream (after the take's
  // input_consumed), while the step computes. A slot is written again two batches later, once the copy that read
  // it has finished (an event per slot in the executor: Note [host one step ahead]).
  data::SamplerState sampler_before_prefetch_;  // what a checkpoint records: the batch in flight is not consumed yet
  std::vector<float> host_losses_;  // evaluate()'s
  std::deque<int64_t> batch_counts_;  // Note [loss mask]: the targets that count of each step drawn, not yet read back
  int64_t fills_ = 0;                 // batches drawn by this process (micro-batch fills_ % grad_accum of a step)
  int64_t step_count_ = 0;            // the targets that count in the step being drawn (all its micro-batches)
  // Note [host one step ahead]: pinned slots a step's losses and squared gradient norm are copied into (step k into
  // slot k % 2), with the event recorded behind the copies; the steps enqueued and not finished, oldest first.
  struct Readback {
    float* losses = nullptr;
    float* norm_sq = nullptr;
    std::unique_ptr<Event> done;
    std::unique_ptr<Event> host_done;  // Note [gradients summed on the host]: the host wrote norm_sq
  };
  Readback readback_[2];
  struct Enqueued {
    int64_t step = 0;
    float lr = 0;
    int slot = 0;
    std::chrono::steady_clock::time_point enqueued;
  };
  std::deque<Enqueued> in_flight_;
  int64_t steps_enqueued_ahead_ = 0;
  std::chrono::steady_clock::time_point last_finish_;
  std::vector<StepRecord> history_;
  std::vector<EvalRecord> evals_;
  FILE* jsonl_ = nullptr;  // --metrics-jsonl, opened (append) at the first record
  bool jsonl_failed_ = false;
  // Issue 21 (--mesh): this rank's mesh, the communicator along the batch dimension (null: one rank), this rank's
  // shard of each global batch, and the gradients' reducer (Note [data parallel] in plan/schedule.cc). Rank 0 of
  // the mesh (the lead) prints and writes the run's files; every rank computes alike.
  std::unique_ptr<mesh::Mesh> mesh_;
  comm::Communicator* data_comm_ = nullptr;
  comm::Communicator* model_comm_ = nullptr;  // Note [tensor parallel] (model/gpt.h): along the heads' dimension
  int shard_ = 0, shards_ = 1;
  std::vector<int32_t> global_inputs_, global_targets_;  // --input replicated, via-root: the whole batch
  std::unique_ptr<GradReducer> reducer_;     // data parallel: the gradients' averages (Note [data parallel])
  std::unique_ptr<GradReducer> tp_reducer_;  // tensor parallel: the partial sums (Note [tensor parallel])
  std::unique_ptr<GradReducer> input_reducer_;  // --input via-root: the batch's scatter (Note [data-parallel input])
  bool lead() const { return mesh_ == nullptr || mesh_->rank() == 0; }
  // The mean over the data-parallel ranks of a value each computed on its shard (itself with one rank).
  Result<double> mean_over_data(double x);
  // Note [stopping early]: the job's reason to stop after this step (0: none), the same on every rank of the mesh
  // (the largest of the ranks' codes: a collective over the world each step when there are several ranks).
  Result<int> agreed_stop(const StopRequest* stop);
  // Every rank of the mesh runs rank 0's configuration (an error names the knobs that differ).
  Status check_same_config();
  // Every rank's parameters are the same bits (the replicas cannot drift apart: an error names the ranks if they do).
  Status check_replicas(const WholeState& whole);

 public:
  // Whether this process writes the run's files and output (rank 0 of its mesh, or alone).
  bool is_lead() const { return lead(); }
};

}  // namespace tt
