// perf/auto_plan: the plan with the least predicted step time that fits the device budget (`--plan auto`).
//
// Note [automatic plan]
// Blocks are alike, so a plan is described by counts and an order: the first n_swap blocks swap (their copies have
// the longest time to finish before the backward needs them back), the next n_recompute are recomputed, the rest
// stay resident; swapped blocks move everything, or their attention half (MLP rebuilt), or less (norms rebuilt too);
// resident blocks may likewise rebuild their MLP half and norms; 2 or 3 swap slots; the optimizer on the device, or
// on the host with parameters resident or streamed. From one recomputed block on, memory falls as n_recompute
// grows (each one more gives up its own set; the set the recomputed blocks share is there from the first, and may
// hold more than a resident block that rebuilds its halves; with Note [gradients in dead activations] a resident
// set may also hold its predecessor's gradients, which a recomputed one cannot, so only nearly), so for each of the
// other choices and each n_swap the smallest n_recompute that fits is 0 or is found by bisection over 1..L - n_swap
// on the inventory (nothing is simulated for plans that do not fit), and that one plan is replayed
// (perf/simulator.h) with the machine's costs. Every such candidate is kept. The order matters a little (a
// recomputed block between swapped ones gives their copies time), so from the fastest three, and from the fastest
// plan of each optimizer placement not among them, a local search changes one block's placement or exchanges two
// neighbours' while that makes the plan faster and it still fits (at most 600 more replays); the fastest wins.
// The second kind of start is there because, with the gradients in dead activations, a device-optimizer plan's
// memory depends on which blocks neighbour which: the best plan can swap blocks that no count-and-order plan of the
// fastest three (all with the CPU optimizer) reaches, and the local search from the fastest device-optimizer plan
// does. Up to kExactLayers blocks the search is exact instead: every assignment of resident, recompute and swap to
// each block, with every other choice. tests/perf/auto_plan_test.cc holds the heuristic to within 1.5% of the exact
// search's step on 6 blocks of its synthetic machine, and the 48-block search to a time bound (the long tier). The
// heuristic is not exact: a plan that swaps non-adjacent blocks (0, 1, 2 and 4, say) can be beyond one move of the
// local search.
//
//   TT_ASSIGN_OR_RETURN(AutoPlan a, choose_plan(train_config, profile));
//   train_config.plan_value = a.best.run.exec.plan;   // and a.explain() says why
#pragma once

#include <string>
#include <vector>

#include "perf/planner.h"

namespace tt::perf {

constexpr int kExactLayers = 5;

struct AutoPlan {
  PlanRow best;                   // the chosen plan, predicted
  std::vector<PlanRow> finalists;  // the fastest few that fit, fastest first (best is the first)
  int evaluated = 0;              // plans replayed
  int sized = 0;                  // inventories computed
  int improved = 0;               // moves the local search made
  double seconds = 0;             // the search's own time
  int64_t budget = 0;             // what "fits" was judged against
  int64_t in_core_need = 0;       // what the in-core plan would need
  bool exact = false;             // every per-block assignment was tried
  // "swap 6 (attention; MLP and norms rebuilt), recompute 2, resident 8 | 3 swap slots | optimizer device"
  static std::string describe(const Plan& plan);
  // A few lines: what was chosen, its prediction, what it beats, and the search.
  std::string explain(int lines = 5) const;
};

// cfg.model.vocab set; cfg.device_budget 0: the device's usable memory. An error when nothing fits, with the least
// memory any candidate needs.
Result<AutoPlan> choose_plan(const TrainConfig& cfg, const Profile& profile, bool exact = false);

// Note [automatic micro-batch]
// With `--micro-batch auto --plan auto` a step's --batch B is fixed and the search chooses both how it is split and
// the plan: for each micro-batch M that divides B (a multiple of the data ranks), choose_plan on batch M with
// B / M accumulated micro-batches (whose predicted step counts every pass: Note [gradient accumulation]); the
// fastest fitting pair wins. A larger micro-batch runs fewer, larger kernels and copies the swapped activations of
// fewer passes, and needs more memory for its activations, which a plan pays for by recomputing or swapping: the
// model prices the trade. The profile must hold every candidate's kernels (the rows of each, unioned).
struct MicroBatchChoice {
  int micro_batch = 0, grad_accum = 0;
  AutoPlan plan;
};
struct AutoMicroBatch {
  MicroBatchChoice best;
  std::vector<std::string> candidates;  // one line a micro-batch tried, largest first
  std::string explain(int lines = 5) const;
};
// The micro-batches of a step of `batch` sequences over `data_ranks` ranks, largest first.
std::vector<int> micro_batch_candidates(int batch, int data_ranks);
// cfg.batch: the step's sequences, cfg.grad_accum 1. An error when nothing fits at any micro-batch.
Result<AutoMicroBatch> choose_micro_batch(const TrainConfig& cfg, const Profile& profile);

// The candidates choose_plan considers, as plans (for tests and `tiertrain plan --explain`): the count-ordered family
// of Note [automatic plan], or with exact every per-block assignment (small models only).
std::vector<Plan> candidate_plans(int layers, bool exact);

// What a plan needs and how fast it is predicted to run under cfg (its optimizer and budget).
Result<PlanRow> evaluate_plan(const TrainConfig& cfg, const Plan& plan, const Profile& profile);

}  // namespace tt::perf
