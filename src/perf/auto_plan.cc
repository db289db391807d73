#include "perf/auto_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <optional>

#include "core/units.h"

namespace tt::perf {

namespace {

constexpr int kLocalSearchReplays = 600;  // the local search's own replays at most (a 48-block model: ~1 s)

// The choices of Note [automatic plan] other than the counts.
struct Shape {
  OptimizerPlacement opt = OptimizerPlacement::kDevice;
  bool stream_params = false;
  int swap_parts = 0;      // kParts's index: what swapped blocks rebuild in their backward
  int resident_parts = 0;  // the same for resident blocks
  int slots = 2;
};

// What a resident or swapped block may rebuild in its backward, by how much it saves: nothing; its GELU and
// LayerNorm outputs (Note [rebuilt activation], Note [rebuilt norms]: element-wise kernels); its MLP half (Note [MLP
// half]: a GEMM again); that and its LayerNorm outputs. (The GELU output alone, which a JSON plan may ask for, saves
// 4 of 6 C a token for about as little work: the search leaves it out, which keeps the 48-block search under 5 s.)
struct Parts {
  bool gelu, norms, mlp;
  const char* name;
};
constexpr Parts kParts[] = {{false, false, false, ""},
                            {true, true, false, "GELU and norms rebuilt"},
                            {false, false, true, "MLP rebuilt"},
                            {false, true, true, "MLP and norms rebuilt"}};
constexpr int kNumParts = static_cast<int>(std::size(kParts));

void set_parts(LayerPlan& lp, int parts) {
  const Parts& p = kParts[parts];
  lp.act_recompute = p.gelu;
  lp.mlp_recompute = p.mlp;
  lp.norms_recompute = p.norms;
}

int parts_index(const LayerPlan& lp) {
  for (int i = 0; i < kNumParts; ++i)
    if (kParts[i].mlp == lp.mlp_recompute && kParts[i].norms == lp.norms_recompute &&
        (kParts[i].mlp || kParts[i].gelu == lp.act_recompute))
      return i;
  return 0;
}

Plan make_plan(int L, const Shape& s, const std::vector<ActPlacement>& acts) {
  Plan p;
  p.source = "auto";
  p.swap_prefetch = s.slots - 1;
  p.optimizer = s.opt;
  for (int l = 0; l < L; ++l) {
    LayerPlan lp;
    lp.activation = acts[static_cast<size_t>(l)];
    if (lp.activation == ActPlacement::kSwap) set_parts(lp, s.swap_parts);
    if (lp.activation == ActPlacement::kResident) set_parts(lp, s.resident_parts);
    if (s.stream_params) lp.param = lp.grad = lp.optim_state = StatePlacement::kHostStreamed;
    p.layers.push_back(lp);
  }
  return p;
}

std::vector<ActPlacement> by_counts(int L, int n_swap, int n_rec) {
  std::vector<ActPlacement> a(static_cast<size_t>(L), ActPlacement::kResident);
  for (int l = 0; l < L; ++l)
    a[static_cast<size_t>(l)] = l < n_swap ? ActPlacement::kSwap
                                : l < n_swap + n_rec ? ActPlacement::kRecompute
                                                     : ActPlacement::kResident;
  return a;
}

std::vector<Shape> shapes() {
  std::vector<Shape> r;
  const std::pair<OptimizerPlacement, bool> opts[] = {
      {OptimizerPlacement::kDevice, false}, {OptimizerPlacement::kCpu, false}, {OptimizerPlacement::kCpu, true}};
  for (const auto& [opt, stream] : opts)
    for (int sp = 0; sp < kNumParts; ++sp)
      for (int rp = 0; rp < kNumParts; ++rp)
        for (int slots : {2, 3}) r.push_back({opt, stream, sp, rp, slots});
  return r;
}

// Sizes and predicts plans under one configuration: the backend's reserve and the budget are resolved once.
class Evaluator {
 public:
  static Result<Evaluator> make(const TrainConfig& cfg, const Profile& profile) {
    Evaluator ev(cfg, profile);
    TrainConfig c = cfg;
    c.plan_value.reset();
    c.plan = "in-core";
    c.optimizer = OptimizerPlacement::kDevice;
    c.speculative_update = false;
    c.host_buffers = "auto";  // the base is the device optimizer's, which has no host buffers
    c.device_optimizer_segments = "plan";  // nor a split (Note [optimizer split])
    TT_ASSIGN_OR_RETURN(ev.base_, resolve_run(c));
    ev.in_core_need_ = ev.base_.inventory.total(Inventory::kDevice);
    ev.budget_ = ev.base_.budget;
    if (ev.base_.budget_auto && ev.base_.probe.device_memory)
      ev.budget_ = ev.base_.probe.free_bytes - ev.base_.probe.auto_budget_headroom;
    return ev;
  }
  int64_t budget() const { return budget_; }
  int64_t in_core_need() const { return in_core_need_; }
  int sized = 0, evaluated = 0;

  // The spec of a plan; false when the plan is not valid for this model (checked by ExecSpec::validate).
  bool spec(const Plan& plan, ExecSpec* e) const {
    *e = base_.exec;
    e->plan = plan;
    e->plan.grads_in_activations = base_.exec.plan.grads_in_activations;  // the run's knobs
    // (Note [bf16 gradients]: named bf16 refuses the CPU optimizer's plans; auto gives them f32)
    apply_grad_dtype(cfg_.grad_dtype, *e);
    e->hyper.speculate = plan.cpu_optimizer() && cfg_.speculative_update;
    // Note [host buffers in rings]: --host-buffers ring for every plan that can have them, whole for none.
    if (cfg_.host_buffers != "auto")
      e->plan.host_ring = cfg_.host_buffers == "ring" && plan.host_ring_refusal().empty() && !e->hyper.speculate;
    // Note [optimizer split]: a count given (plan: 0) stands for every CPU-optimizer plan that can split; with auto
    // none here, and row() gives the plan as many segments as fit beside it.
    e->plan.device_optimizer_segments = 0;
    if (const int k = fixed_split(); k > 0 && split_allowed(*e)) e->plan.device_optimizer_segments = k;
    return e->validate().is_ok();
  }
  int fixed_split() const {
    const std::string& d = cfg_.device_optimizer_segments;
    return d == "auto" ? -1 : d == "plan" ? 0 : std::stoi(d);
  }
  bool split_allowed(const ExecSpec& e) const {
    return e.plan.cpu_optimizer() && !e.hyper.speculate && !e.shard_optimizer &&
           e.plan.optimizer_split_refusal(e.model.layers + 2).empty();
  }
  // Note [optimizer split]: the most segments whose AdamW fits on the device beside the plan (the trainer's auto:
  // within the budget, with the automatic budget's 5% on top), by bisection; e and inv become that plan's.
  void fill_split(ExecSpec* e, Inventory* inv) {
    // (None on the CPU backend, whose device memory is the host's: as the trainer's auto.)
    if (!base_.probe.device_memory || fixed_split() >= 0 || e->plan.device_optimizer_segments > 0) return;
    Inventory chosen;
    const int lo = Executor::largest_optimizer_split(
        *e,
        [&](const Inventory& i) {
          ++sized;
          const int64_t n = i.total(Inventory::kDevice) + base_.reserve.reserved_bytes;
          return base_.budget_auto ? n + n / 20 <= budget_ : n <= budget_;
        },
        &chosen);
    if (lo == 0) return;
    *inv = std::move(chosen);
    e->plan.device_optimizer_segments = lo;
  }
  // The plan's inventory; with --host-buffers auto, as the trainer decides (resolve_run): the rings where the whole
  // host copies do not fit the host's available memory and the rings do (e->plan then says so).
  Result<Inventory> inventory(ExecSpec* e) const {
    TT_ASSIGN_OR_RETURN(Inventory inv, Executor::inventory(*e));
    if (cfg_.host_buffers != "auto" || e->plan.host_ring || inv.total(Inventory::kHost) <= base_.host_available)
      return inv;
    ExecSpec ring = *e;
    ring.plan.host_ring = true;
    if (!ring.validate().is_ok()) return inv;
    Result<Inventory> r = Executor::inventory(ring);
    if (!r.is_ok() || r.value().total(Inventory::kHost) > base_.host_available) return inv;
    *e = ring;
    return r;
  }
  // Device bytes the plan needs (with the backend's reserve), or -1 when it is invalid or its host part does not fit
  // the host's available memory (as the trainer refuses it: Note [host memory of a run]).
  int64_t need(const Plan& plan) {
    ExecSpec e;
    if (!spec(plan, &e)) return -1;
    auto inv = inventory(&e);
    ++sized;
    if (!inv.is_ok() || inv.value().total(Inventory::kHost) > base_.host_available) return -1;
    return inv.value().total(Inventory::kDevice) + base_.reserve.reserved_bytes;
  }
  bool fits(const Plan& plan) {
    const int64_t n = need(plan);
    return n >= 0 && n <= budget_;
  }
  Result<PlanRow> row(const Plan& plan) {
    PlanRow r;
    r.plan = "auto";
    r.optimizer = plan.optimizer;
    r.run = base_;
    TT_RETURN_IF(!spec(plan, &r.run.exec), kInvalidArgument, "the plan does not suit this model");
    TT_ASSIGN_OR_RETURN(r.run.inventory, inventory(&r.run.exec));
    fill_split(&r.run.exec, &r.run.inventory);
    r.run.inventory.add_backend_reserved(base_.reserve.reserved_bytes);
    r.run.budget = budget_;
    r.run.budget_auto = base_.budget_auto;
    r.run.fits_device = r.run.inventory.total(Inventory::kDevice) <= budget_;
    r.run.fits_host = r.run.inventory.total(Inventory::kHost) <= base_.host_available;
    r.run.alternatives.clear();
    r.schedule = compile_schedule(r.run.exec.schedule_spec(), r.run.inventory);
    std::vector<PlanRow> one;
    one.push_back(std::move(r));
    TT_TRY(predict(one, profile_, cfg_.threads));
    ++evaluated;
    return std::move(one.front());
  }

 private:
  Evaluator(const TrainConfig& cfg, const Profile& profile) : cfg_(cfg), profile_(profile) {}
  TrainConfig cfg_;
  const Profile& profile_;
  RunSpec base_;
  int64_t budget_ = 0, in_core_need_ = 0;
};

std::string parts_name(const LayerPlan& lp) { return kParts[parts_index(lp)].name; }

// The parts of the plan's blocks placed `a` (swapped blocks agree; resident ones do in the plans searched), or -1.
int parts_of(const Plan& p, ActPlacement a) {
  for (const LayerPlan& lp : p.layers)
    if (lp.activation == a) return parts_index(lp);
  return -1;
}

// Plans one move from p: a block placed otherwise (taking the parts its new placement has in p, or each choice of
// parts when no block has it), or two neighbouring blocks exchanged.
std::vector<Plan> neighbours(const Plan& p) {
  std::vector<Plan> r;
  const int L = static_cast<int>(p.layers.size());
  for (int l = 0; l < L; ++l) {
    for (const ActPlacement a : {ActPlacement::kResident, ActPlacement::kRecompute, ActPlacement::kSwap}) {
      if (a == p.layers[static_cast<size_t>(l)].activation) continue;
      const int known = a == ActPlacement::kRecompute ? 0 : parts_of(p, a);
      for (int parts = 0; parts < kNumParts; ++parts) {
        if (known >= 0 && parts != known) continue;
        Plan q = p;
        LayerPlan& lp = q.layers[static_cast<size_t>(l)];
        lp.activation = a;
        set_parts(lp, a == ActPlacement::kRecompute ? 0 : parts);
        r.push_back(std::move(q));
      }
    }
  }
  for (int l = 0; l + 1 < L; ++l) {
    if (p.layers[static_cast<size_t>(l)].activation == p.layers[static_cast<size_t>(l) + 1].activation) continue;
    Plan q = p;
    std::swap(q.layers[static_cast<size_t>(l)], q.layers[static_cast<size_t>(l) + 1]);
    r.push_back(std::move(q));
  }
  return r;
}

}  // namespace

std::vector<Plan> candidate_plans(int L, bool exact) {
  std::vector<Plan> r;
  for (const Shape& s : shapes()) {
    if (exact) {
      std::vector<ActPlacement> a(static_cast<size_t>(L), ActPlacement::kResident);
      int64_t total = 1;
      for (int l = 0; l < L; ++l) total *= 3;
      for (int64_t code = 0; code < total; ++code) {
        int64_t c = code;
        for (int l = 0; l < L; ++l, c /= 3) a[static_cast<size_t>(l)] = static_cast<ActPlacement>(c % 3);
        r.push_back(make_plan(L, s, a));
      }
    } else {
      for (int n_swap = 0; n_swap <= L; ++n_swap)
        for (int n_rec = 0; n_swap + n_rec <= L; ++n_rec) r.push_back(make_plan(L, s, by_counts(L, n_swap, n_rec)));
    }
  }
  return r;
}

Result<PlanRow> evaluate_plan(const TrainConfig& cfg, const Plan& plan, const Profile& profile) {
  TT_ASSIGN_OR_RETURN(Evaluator ev, Evaluator::make(cfg, profile));
  return ev.row(plan);
}

Result<AutoPlan> choose_plan(const TrainConfig& cfg, const Profile& profile, bool exact) {
  const auto t0 = std::chrono::steady_clock::now();
  TT_ASSIGN_OR_RETURN(Evaluator ev, Evaluator::make(cfg, profile));
  const int L = cfg.model.layers;
  exact = exact || L <= kExactLayers;
  AutoPlan out;
  out.budget = ev.budget();
  out.in_core_need = ev.in_core_need();
  out.exact = exact;
  // The fastest few so far, fastest first; between equally fast plans, the one that copies less (what the replay
  // hides may still cost a little), then the one that takes less device memory. Equally fast: the same step to the
  // microsecond, since replays that sum the same costs in another order may differ in the last bits (in the CPU test
  // of plan_accuracy_test.cc, a plan swapping three blocks behind the CPU optimizer's exposed copies, predicted as
  // fast as in-core, was once chosen and ran slower).
  constexpr size_t kKeep = 8;
  std::vector<PlanRow> kept;
  auto faster = [](const PlanRow& a, const PlanRow& b) {
    const int64_t ua = std::llround(a.sim.step_seconds * 1e6), ub = std::llround(b.sim.step_seconds * 1e6);
    if (ua != ub) return ua < ub;
    if (a.copy_bytes != b.copy_bytes) return a.copy_bytes < b.copy_bytes;
    return a.run.inventory.total(Inventory::kDevice) < b.run.inventory.total(Inventory::kDevice);
  };
  int64_t least = -1;
  std::optional<PlanRow> family_best[2];  // the fastest fitting plan of each optimizer placement
  auto consider = [&](const Plan& p) -> Status {
    const int64_t n = ev.need(p);
    if (n >= 0 && (least < 0 || n < least)) least = n;
    if (n < 0 || n > ev.budget()) return Status::ok();
    TT_ASSIGN_OR_RETURN(PlanRow r, ev.row(p));
    const size_t fam = static_cast<size_t>(r.optimizer);
    if (!family_best[fam] || faster(r, *family_best[fam])) family_best[fam] = r;
    if (kept.size() == kKeep && !faster(r, kept.back())) return Status::ok();
    kept.insert(std::upper_bound(kept.begin(), kept.end(), r, faster), std::move(r));
    if (kept.size() > kKeep) kept.pop_back();
    return Status::ok();
  };
  if (exact) {
    for (const Plan& p : candidate_plans(L, true)) TT_TRY(consider(p));
  } else {
    for (const Shape& s : shapes()) {
      // Shapes that differ only in choices no block uses are the same plan: skip the repeats.
      for (int n_swap = 0; n_swap <= L; ++n_swap) {
        if (n_swap == 0 && (s.swap_parts != 0 || s.slots != 2)) continue;
        // The smallest n_rec that fits (Note [automatic plan]): none, or else by bisection over 1..L - n_swap.
        auto plan_of = [&](int n_rec) { return make_plan(L, s, by_counts(L, n_swap, n_rec)); };
        int lo = 0;
        if (!ev.fits(plan_of(0))) {
          int hi = L - n_swap;
          if (hi == 0 || !ev.fits(plan_of(hi))) {
            const int64_t n = ev.need(plan_of(hi));
            if (n >= 0 && (least < 0 || n < least)) least = n;
            continue;
          }
          lo = 1;
          while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (ev.fits(plan_of(mid))) hi = mid;
            else lo = mid + 1;
          }
        }
        if (n_swap + lo == L && s.resident_parts != 0) continue;  // no resident block: a repeat
        TT_TRY(consider(plan_of(lo)));
      }
    }
  }
  // Local search from the fastest few (Note [automatic plan]): one block's placement changed, or two neighbours'
  // exchanged, while that makes the plan faster and it fits.
  if (!exact && !kept.empty()) {
    const int budget_rows = ev.evaluated + kLocalSearchReplays;
    const size_t starts = std::min<size_t>(3, kept.size());
    std::vector<Plan> from;
    for (size_t i = 0; i < starts; ++i) from.push_back(kept[i].run.exec.plan);
    // And the fastest of each optimizer placement not among them: a family that the counts and order leave behind
    // (Note [gradients in dead activations] makes a device-optimizer plan's memory depend on which blocks neighbour
    // which) gets a local search too.
    for (const OptimizerPlacement o : {OptimizerPlacement::kDevice, OptimizerPlacement::kCpu}) {
      const bool have = std::any_of(from.begin(), from.end(), [&](const Plan& p) { return p.optimizer == o; });
      const std::optional<PlanRow>& b = family_best[static_cast<size_t>(o)];
      if (!have && b) from.push_back(b->run.exec.plan);
    }
    for (Plan cur : from) {
      TT_ASSIGN_OR_RETURN(PlanRow cur_row, ev.row(cur));
      for (int round = 0; round < 4 * L && ev.evaluated < budget_rows; ++round) {
        bool improved = false;
        for (const Plan& p : neighbours(cur)) {
          if (ev.evaluated >= budget_rows) break;
          if (!ev.fits(p)) continue;
          TT_ASSIGN_OR_RETURN(PlanRow r, ev.row(p));
          if (!faster(r, cur_row)) continue;
          cur = p;
          cur_row = r;
          improved = true;
          ++out.improved;
        }
        if (!improved) break;
      }
      TT_TRY(consider(cur));
    }
  }
  TT_RETURN_IF(kept.empty(), kOutOfMemory,
               "no plan fits the device budget of %s: the smallest needs %s (in-core needs %s); raise "
               "--device-budget or lower --batch or --seq",
               format_bytes(ev.budget()).c_str(), least < 0 ? "?" : format_bytes(least).c_str(),
               format_bytes(ev.in_core_need()).c_str());
  out.evaluated = ev.evaluated;
  out.sized = ev.sized;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.best = kept.front();
  out.finalists = std::move(kept);
  return out;
}

std::string AutoPlan::describe(const Plan& plan) {
  int swap = 0, rec = 0, res = 0;
  std::string swap_parts, res_parts;
  bool streamed = false;
  for (int l = 0; l < static_cast<int>(plan.layers.size()); ++l) {
    const LayerPlan& lp = plan.layers[static_cast<size_t>(l)];
    streamed |= lp.param == StatePlacement::kHostStreamed;
    switch (lp.activation) {
      case ActPlacement::kSwap: ++swap, swap_parts = parts_name(lp); break;
      case ActPlacement::kRecompute: ++rec; break;
      case ActPlacement::kResident: ++res, res_parts = parts_name(lp); break;
      case ActPlacement::kManaged:         // (the automatic plan places nothing in managed memory: issue 20)
      case ActPlacement::kManagedOffload: break;
    }
  }
  std::string s;
  auto add = [&](const std::string& t) { s += (s.empty() ? "" : ", ") + t; };
  if (swap) add(str_format("swap %d%s", swap, swap_parts.empty() ? "" : (" (" + swap_parts + ")").c_str()));
  if (rec) add(str_format("recompute %d", rec));
  if (res) add(str_format("resident %d%s", res, res_parts.empty() ? "" : (" (" + res_parts + ")").c_str()));
  if (swap) s += str_format(" | %d swap slots", plan.swap_slots());
  s += str_format(" | optimizer %s%s", optimizer_placement_name(plan.optimizer),
                  streamed ? ", parameters streamed from the host" : "");
  if (plan.cpu_optimizer() && plan.device_optimizer_segments > 0)  // Note [optimizer split]
    s += str_format(", the first %d segments' on the device", plan.device_optimizer_segments);
  return s;
}

std::vector<int> micro_batch_candidates(int batch, int data_ranks) {
  std::vector<int> out;
  for (int m = batch; m >= 1; --m)
    if (batch % m == 0 && m % std::max(1, data_ranks) == 0) out.push_back(m);
  return out;
}

Result<AutoMicroBatch> choose_micro_batch(const TrainConfig& cfg, const Profile& profile) {
  TT_RETURN_IF(cfg.grad_accum != 1, kInvalidArgument,
               "the automatic micro-batch splits --batch itself: --grad-accum must be 1, got %d", cfg.grad_accum);
  TT_RETURN_IF(!cfg.mesh.empty(), kUnimplemented,
               "the automatic micro-batch of a mesh run is not built (as the automatic plan of one is not)");
  AutoMicroBatch out;
  std::string least;
  for (const int m : micro_batch_candidates(cfg.batch, 1)) {
    TrainConfig c = cfg;
    c.batch = m;
    c.grad_accum = cfg.batch / m;
    auto a = choose_plan(c, profile);
    if (!a.is_ok()) {
      if (a.status().code() != StatusCode::kOutOfMemory) return a.status();
      out.candidates.push_back(str_format("micro-batch %d x %d: %s", m, c.grad_accum, a.status().message().c_str()));
      if (least.empty()) least = a.status().message();
      continue;
    }
    const PlanRow& r = a.value().best;
    out.candidates.push_back(str_format("micro-batch %d x %d: %.2f ms/step (%s tokens/s), device %s: %s", m,
                                        c.grad_accum, 1e3 * r.sim.step_seconds, format_count(r.tokens_per_s).c_str(),
                                        format_bytes(r.run.inventory.total(Inventory::kDevice)).c_str(),
                                        AutoPlan::describe(r.run.exec.plan).c_str()));
    if (out.best.micro_batch == 0 || r.sim.step_seconds < out.best.plan.best.sim.step_seconds)
      out.best = MicroBatchChoice{m, c.grad_accum, std::move(a.value())};
  }
  TT_RETURN_IF(out.best.micro_batch == 0, kOutOfMemory, "no micro-batch of --batch %d fits: %s", cfg.batch,
               least.c_str());
  return out;
}

std::string AutoMicroBatch::explain(int lines) const {
  std::string s = str_format("auto micro-batch: %d x %d micro-batches a step\n", best.micro_batch, best.grad_accum);
  s += best.plan.explain(lines);
  for (const std::string& c : candidates) s += "  " + c + "\n";
  return s;
}

std::string AutoPlan::explain(int lines) const {
  const PlanRow& b = best;
  std::string s = str_format(
      "auto plan: %s\n  predicted %.2f ms/step (%s tokens/s), device %s of %s budget (in-core needs %s), host %s, "
      "exposed copies %.2f ms\n",
      describe(b.run.exec.plan).c_str(), 1e3 * b.sim.step_seconds, format_count(b.tokens_per_s).c_str(),
      format_bytes(b.run.inventory.total(Inventory::kDevice)).c_str(), format_bytes(budget).c_str(),
      format_bytes(in_core_need).c_str(), format_bytes(b.run.inventory.total(Inventory::kHost)).c_str(),
      1e3 * b.sim.exposed_wait_seconds);
  s += str_format("  searched %d plans that fit (%d sized%s; %d local improvements) in %.2f s\n", evaluated, sized,
                  exact ? ", every per-block assignment" : "", improved, seconds);
  for (size_t i = 1; i < finalists.size() && static_cast<int>(i) < lines; ++i)
    s += str_format("  next: %.2f ms/step (%+.1f%%) %s\n", 1e3 * finalists[i].sim.step_seconds,
                    100 * (finalists[i].sim.step_seconds / b.sim.step_seconds - 1),
                    describe(finalists[i].run.exec.plan).c_str());
  return s;
}

}  // namespace tt::perf
