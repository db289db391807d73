#include "exec/executor.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/bf16.h"
#include "core/log.h"
#include "core/units.h"

namespace tt {

namespace {
// (keeping bf16 gradients where the empty plan asked for them: Note [bf16 gradients])
Plan resident_plan(int layers, bool bf16_grads) {
  Plan p = Plan::resolve("in-core", layers, 2).value();
  p.bf16_grads = bf16_grads;
  return p;
}

// Where the resident sets and some blocks' gradients share memory (Note [gradients in dead activations]).
ActivationArena arena_of(const ExecSpec& spec) {
  return activation_arena(spec.plan, spec.model, spec.batch, spec.compute);
}

// Note [gradient segments]: whether segment s (0: the embeddings, 1..L: the blocks, L + 1: the final norm) has a
// buffer of its own, "grads.seg<s>": not where the block's gradients stream through the slots or live in the
// activation arena.
bool own_grad_buffer(const Plan& plan, const ActivationArena& arena, int L, int s) {
  if (s == 0) return !arena.holds_embedding_grads();
  return !(s >= 1 && s <= L && (plan.grads_streamed(s - 1) || arena.holds_grads(s - 1)));
}

}  // namespace

HeadInGrads Executor::head_in_grads(const ExecSpec& spec) {
  HeadInGrads h;
  const Plan& plan = spec.plan;
  const int L = spec.model.layers;
  if (!grads_share_memory(plan, L) || spec.grad_accum > 1) return h;
  const ActivationArena arena = arena_of(spec);
  const ParamSegments segs = model_segments(spec.model);
  const auto buffer_bytes = [&](int s) {  // segment s's own gradient buffer (Note [bf16 gradients]: its dtype's)
    return static_cast<int64_t>(
        device_alloc_bytes({segs.size[static_cast<size_t>(s)]}, segment_grad_dtype(plan, spec.compute, L, s)));
  };
  std::vector<int64_t> room(static_cast<size_t>(L) + 2, 0);  // [segment] bytes left in its own buffer
  for (int s = 1; s <= L; ++s)
    if (own_grad_buffer(plan, arena, L, s)) room[static_cast<size_t>(s)] = buffer_bytes(s);
  const int64_t chunk = spec.lm_chunk_rows > 0 ? spec.lm_chunk_rows
                                               : model_default_lm_chunk_rows(spec.model, spec.batch, spec.compute);
  std::vector<TensorRequest> head;
  for (TensorRequest& r : model_fixed_tensors(spec.model, spec.batch, spec.compute, chunk))
    if (r.head) head.push_back(std::move(r));
  std::stable_sort(head.begin(), head.end(), [](const TensorRequest& a, const TensorRequest& b) {
    return device_alloc_bytes(a.shape, a.dtype) > device_alloc_bytes(b.shape, b.dtype);
  });
  for (const TensorRequest& r : head) {
    const int64_t n = static_cast<int64_t>(device_alloc_bytes(r.shape, r.dtype));
    for (int s = L; s >= 1; --s) {
      int64_t& left = room[static_cast<size_t>(s)];
      if (left < n) continue;
      h.at[r.name] = {s, buffer_bytes(s) - left};
      left -= n;
      h.bytes += n;
      break;
    }
  }
  return h;
}

const char* ExecSpec::bf16_grads_refusal() const {
  return compute != DType::kF32 && compute != DType::kBF16 ? "computing in f32 or bf16"
         : plan.cpu_optimizer()                             ? "AdamW on the device (not --optimizer cpu)"
         : plan.managed_grads                               ? "gradients not in managed memory"
         : grad_accum > 1 ? "one micro-batch a step (--grad-accum 1: bf16 sums would lose bits)"
         : data_ranks > 1 && shard_optimizer ? "an optimizer not sharded (--shard-optimizer off)"
                                             : nullptr;
}

void apply_grad_dtype(GradDtype want, ExecSpec& spec) {
  if (want != GradDtype::kAuto) {
    spec.plan.bf16_grads = want == GradDtype::kBF16;
  } else if (!spec.plan.grad_dtype_named) {
    // (Data ranks would average bf16 gradients, which PyTorch's DDP does only with its compression hook: named.)
    spec.plan.bf16_grads =
        spec.compute == DType::kBF16 && spec.data_ranks == 1 && spec.bf16_grads_refusal() == nullptr;
  }
}

Status ExecSpec::validate() const {
  TT_RETURN_IF(data_ranks < 1 || batch < 1, kInvalidArgument, "batch %d over %d data-parallel ranks", batch,
               data_ranks);
  TT_TRY(model.validate());
  TT_RETURN_IF(tp_rank < 0 || tp_rank >= model.tp, kInvalidArgument, "tensor-parallel rank %d of %d", tp_rank,
               model.tp);
  TT_RETURN_IF(data_rank < 0 || data_rank >= data_ranks, kInvalidArgument, "data-parallel rank %d of %d", data_rank,
               data_ranks);
  if (shard_optimizer && plan.cpu_optimizer()) {
    // Note [sharded optimizer]: a rank's host state holds only its shares, so the parts of a plan that read the
    // whole compute copy or the gradients from host memory, or exchange them in managed memory, do not combine.
    bool streamed = false;
    for (int l = 0; l < static_cast<int>(plan.layers.size()); ++l)
      streamed = streamed || plan.params_streamed(l) || plan.grads_streamed(l);
    TT_RETURN_IF(streamed, kUnimplemented,
                 "--shard-optimizer with parameters or gradients streamed from the host (offload-params, "
                 "offload-all): not built (a rank's host keeps only its shares of them); shard with resident "
                 "parameters, or stream without sharding");
    TT_RETURN_IF(plan.managed_params || plan.managed_grads, kUnimplemented,
                 "--shard-optimizer with the CPU optimizer's exchange in managed memory: not built");
  }
  TT_RETURN_IF(batch < 1, kInvalidArgument, "--batch must be >= 1, got %d", batch);
  TT_RETURN_IF(grad_accum < 1, kInvalidArgument, "--grad-accum must be >= 1, got %d", grad_accum);
  if (grad_accum > 1) {  // Note [gradient accumulation]: the gradients must stay in their own device buffers
    bool streamed = false;
    for (int l = 0; l < static_cast<int>(plan.layers.size()); ++l) streamed = streamed || plan.grads_streamed(l);
    TT_RETURN_IF(plan.managed_grads, kUnimplemented,
                 "--grad-accum %d with plan %s: accumulating managed gradients is not built yet; use a plan whose "
                 "gradients stay on the device or stream to the host, or --grad-accum 1 with a larger --batch",
                 grad_accum, plan.source.c_str());
    // Note [gradients summed on the host] in plan/schedule.h.
    TT_RETURN_IF(streamed && (data_ranks > 1 || model.tp > 1), kUnimplemented,
                 "--grad-accum %d with plan %s over a mesh: gradients streamed to the host are summed there, which "
                 "is not built with data or tensor parallel (their reductions are made on the device); use a plan "
                 "whose gradients stay on the device",
                 grad_accum, plan.source.c_str());
    TT_RETURN_IF(plan.grads_in_activations, kInvalidArgument,
                 "--grad-accum %d: gradients kept in later blocks' activation memory would be overwritten by the "
                 "next micro-batch's forward; set grads_in_activations false",
                 grad_accum);
  }
  if (plan.bf16_grads) {  // Note [bf16 gradients] in exec/executor.h: what the first version takes
    const char* why = bf16_grads_refusal();
    TT_RETURN_IF(why != nullptr, kUnimplemented,
                 "--grad-dtype bf16 with plan %s: built for %s only; use --grad-dtype f32%s", plan.source.c_str(),
                 why, plan.grad_dtype_named ? " (or remove the plan's \"grad_dtype\": \"bf16\")" : " or auto");
  }
  TT_RETURN_IF(input_scatter && data_ranks < 2, kInvalidArgument, "an input scattered over %d data rank(s)",
               data_ranks);
  TT_RETURN_IF(static_cast<int>(plan.layers.size()) != model.layers, kInvalidArgument,
               "the plan places %zu layers but the model has %d", plan.layers.size(), model.layers);
  const DType md = master_dtype_for(compute);
  TT_RETURN_IF(plan.cpu_optimizer() && md != DType::kF32, kInvalidArgument,
               "the CPU optimizer keeps an f32 master; computing in %s keeps a %s master", dtype_name(compute),
               dtype_name(md));
  TT_RETURN_IF(plan.needs_cpu_optimizer() && !plan.cpu_optimizer(), kInvalidArgument,
               "plan %s streams parameters, gradients or optimizer state to the host, which needs the CPU optimizer "
               "(\"optimizer\": \"cpu\" in the plan, or --optimizer cpu)",
               plan.source.c_str());
  TT_RETURN_IF(hyper.speculate && !plan.cpu_optimizer(), kInvalidArgument,
               "--speculative-update applies to the CPU optimizer (--optimizer cpu, or \"optimizer\": \"cpu\" in the "
               "plan)");
  if (plan.host_ring) {  // Note [host buffers in rings] in plan/schedule.h
    const std::string why = plan.host_ring_refusal();
    TT_RETURN_IF(!why.empty(), kInvalidArgument, "plan %s: host_buffers \"ring\": %s", plan.source.c_str(),
                 why.c_str());
    TT_RETURN_IF(hyper.speculate, kInvalidArgument,
                 "plan %s: host_buffers \"ring\" with --speculative-update: the speculative update writes a second "
                 "whole set of host state; use one or the other", plan.source.c_str());
    TT_RETURN_IF(shard_optimizer && data_ranks > 1, kUnimplemented,
                 "plan %s: host_buffers \"ring\" with --shard-optimizer: not built (a rank's shares are compact "
                 "already)", plan.source.c_str());
  }
  if (plan.device_optimizer_segments > 0) {  // Note [optimizer split] in plan/schedule.h
    const std::string why = plan.optimizer_split_refusal(model.layers + 2);
    TT_RETURN_IF(!why.empty(), kInvalidArgument, "plan %s: device_optimizer_segments %d: %s", plan.source.c_str(),
                 plan.device_optimizer_segments, why.c_str());
    TT_RETURN_IF(hyper.speculate, kUnimplemented,
                 "plan %s: device_optimizer_segments with --speculative-update: not built; use one or the other",
                 plan.source.c_str());
    TT_RETURN_IF(shard_optimizer && data_ranks > 1, kUnimplemented,
                 "plan %s: device_optimizer_segments with --shard-optimizer: not built", plan.source.c_str());
  }
  const RingLayout r = ring_layout(plan);
  TT_RETURN_IF(r.swap.size() > 0 && plan.swap_slots() < 2, kInvalidArgument,
               "swapping activations needs at least 2 slots, got %d", plan.swap_slots());
  TT_RETURN_IF(r.params.size() > 0 && plan.param_slots() < 2, kInvalidArgument,
               "streaming parameters needs at least 2 slots, got %d", plan.param_slots());
  for (int l = 0; l < model.layers; ++l)
    TT_RETURN_IF((plan.managed_params && plan.params_streamed(l)) || (plan.managed_grads && plan.grads_streamed(l)),
                 kInvalidArgument,
                 "plan %s: block %d streams its parameters or gradients from the host, which are also placed in "
                 "managed memory; choose one", plan.source.c_str(), l);
  TT_RETURN_IF(plan.managed_optim && plan.cpu_optimizer(), kInvalidArgument,
               "plan %s: the CPU optimizer keeps AdamW's state and the fp32 master in host memory: \"optim_state\" "
               "cannot be managed with it (\"param\" and \"grad\" can: Note [managed optimizer exchange])",
               plan.source.c_str());
  const unsigned swapped = plan.swapped_parts();
  for (int l = 0; l < model.layers; ++l)
    TT_RETURN_IF(plan.activation(l) == ActPlacement::kSwap && plan.held_parts(l) != swapped, kInvalidArgument,
                 "block %d: swapped blocks must agree on whether their MLP half and their LayerNorm outputs are "
                 "rebuilt (they share slots)", l);
  return Status::ok();
}

// The allocation order is the one the model had before the executor existed: the parameters and their compute
// copies, the gradients, the inputs, the shared rebuilt sets, the swap slots, each block's own activations, the
// rest of the model's tensors; the optimizer's; the input staging; then the host buffers.
Result<Inventory> Executor::inventory(const ExecSpec& spec_in) {
  ExecSpec spec = spec_in;
  if (spec.plan.layers.empty()) spec.plan = resident_plan(spec.model.layers, spec.plan.bf16_grads);
  TT_TRY(spec.validate());
  const ModelConfig& cfg = spec.model;
  const Plan& plan = spec.plan;
  const DType dt = spec.compute, md = master_dtype_for(dt);
  const int L = cfg.layers, S = L + 2;
  const int64_t P = model_num_params(cfg);
  const ParamSegments segs = model_segments(cfg);
  const RingLayout rings = ring_layout(plan);
  const bool cpu = plan.cpu_optimizer();
  Inventory inv;
  using TC = TensorClass;
  // Parameters: the device master (device optimizer), and the compute copy: one buffer, or with streamed
  // parameters one per resident segment and the streamed blocks' slots (Note [streamed parameters]).
  // Issue 20: a state class the plan puts in managed memory comes from the managed pool.
  auto state = [&](const std::string& name, Shape shape, DType dtype, TC cls) {
    const bool managed = cls == TC::kParam ? plan.managed_params : cls == TC::kGrad ? plan.managed_grads
                                                                                   : plan.managed_optim;
    if (managed) {
      inv.add_managed(name, shape, dtype, cls);
    } else {
      inv.add_device(name, shape, dtype, cls);
    }
  };
  // Note [optimizer split] (plan/schedule.h): the device segments' master and moments, the first elements of the
  // model's layout.
  const int64_t on_device = cpu ? segs.offset[static_cast<size_t>(plan.device_optimizer_segments)] : P;
  if (spec.master_in_halves()) {  // Note [master in two halves] in core/bf16.h: its high halves are the compute copy
    TT_CHECK(rings.params.size() == 0, "a master in two halves needs the compute copy in one buffer");
    state("params.low", {P}, DType::kBF16, TC::kParam);
  } else if (on_device > 0) {
    state("params", {on_device}, md, TC::kParam);
  }
  if (rings.params.size() > 0) {
    for (int s = 0; s < S; ++s)
      if (!(s >= 1 && s <= L && plan.params_streamed(s - 1)))
        inv.add_device("params.compute.seg" + std::to_string(s), {segs.size[static_cast<size_t>(s)]}, dt, TC::kParam);
    for (int i = 0; i < rings.params.slots; ++i)
      inv.add_device("params.slot" + std::to_string(i), {segs.size[1]}, dt, TC::kParam);
  } else if (md != dt || cpu) {
    state("params.compute", {P}, dt, TC::kParam);
  }
  // Gradients (Note [gradient segments]): one buffer per segment; streamed blocks share two slots.
  // Note [gradients in dead activations]: a segment that lives in the activation arena has no entry of its own.
  const ActivationArena arena = arena_of(spec);
  for (int s = 0; s < S; ++s)
    if (own_grad_buffer(plan, arena, L, s))
      state("grads.seg" + std::to_string(s), {segs.size[static_cast<size_t>(s)]}, segment_grad_dtype(plan, dt, L, s),
            TC::kGrad);
  for (int i = 0; i < rings.grads.slots; ++i)
    inv.add_device("grads.slot" + std::to_string(i), {segs.size[1]}, md, TC::kGrad);
  const int64_t chunk = spec.lm_chunk_rows;
  // The model's other tensors in its order (Note [model families]): those before the first of a layer, then each
  // block's after its activations, then the rest.
  const std::vector<TensorRequest> fixed = model_fixed_tensors(cfg, spec.batch, dt, chunk);
  const HeadInGrads head = head_in_grads(spec);  // Note [head in gradients]: those have no entry of their own
  size_t next_fixed = 0;
  auto add_fixed_until = [&](auto stop) {
    for (; next_fixed < fixed.size() && !stop(fixed[next_fixed]); ++next_fixed) {
      const TensorRequest& r = fixed[next_fixed];
      // (A block's output lies in its set where the set is in the arena: arena_set_bytes.)
      if (!head.holds(r.name) && !arena.holds_set(r.layer)) inv.add_device(r.name, r.shape, r.dtype, r.cls, r.layer);
    }
  };
  add_fixed_until([](const TensorRequest& r) { return r.layer >= 0; });
  // A block's activations: their own set for resident blocks, one shared set for the recomputed ones, a few slots
  // for the swapped ones; shared sets for the parts rebuilt apart (Note [MLP half], Note [rebuilt norms], Note
  // [rebuilt activation]).
  auto add_block = [&](const std::string& prefix, int l, unsigned parts) {
    for (const TensorRequest& a : model_block_activations(cfg, spec.batch, dt, parts))
      inv.add_device(prefix + a.name, a.shape, a.dtype, a.cls, l);
  };
  bool any_mlp = false, any_norms = false, any_act = false;
  for (int l = 0; l < L; ++l) {
    any_mlp = any_mlp || plan.mlp_rebuilt(l);
    any_norms = any_norms || plan.norms_rebuilt(l);
    any_act = any_act || plan.act_rebuilt(l);
  }
  if (plan.count(ActPlacement::kRecompute) > 0) add_block("recompute.", -1, kPartAll);
  if (any_mlp) add_block("recompute_mlp.", -1, kPartMlp);
  if (any_norms) add_block("recompute_norms.", -1, kPartNorms);
  if (any_act) add_block("recompute_act.", -1, kPartAct);
  const size_t swap_bytes = device_bytes_of(model_block_activations(cfg, spec.batch, dt, plan.swapped_parts()));
  for (int i = 0; i < rings.swap.slots; ++i)
    inv.add_device("swap.slot" + std::to_string(i), {static_cast<int64_t>(swap_bytes)}, DType::kU8, TC::kActivation);
  // Note [gradients in dead activations]: the resident sets and the gradients that live among them in one entry,
  // carved like a swap slot, where the arena holds any gradients (before the first block's fixed tensors).
  if (arena.bytes > 0) inv.add_device("activations", {arena.bytes}, DType::kU8, TC::kActivation);
  for (int l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    if (plan.activation(l) == ActPlacement::kResident && !arena.holds_set(l)) add_block(p, l, plan.held_parts(l));
    // Note [managed activations]: one managed entry per managed block, carved like a swap slot.
    if (plan.managed_block(l))
      inv.add_managed("managed.h." + std::to_string(l),
                      {static_cast<int64_t>(device_bytes_of(model_block_activations(cfg, spec.batch, dt, plan.held_parts(l))))},
                      DType::kU8, TC::kActivation, l);
    add_fixed_until([l](const TensorRequest& r) { return r.layer != l; });
  }
  add_fixed_until([](const TensorRequest&) { return false; });
  // The optimizer's device buffers.
  if (on_device > 0) {  // Note [sharded optimizer]: this rank's shares only
    const int64_t moments =
        spec.shard_optimizer && !cpu ? OptimizerShard::moment_elements(segs, spec.data_ranks) : on_device;
    // (The split CPU optimizer's names apart from its host moments': Note [optimizer split].)
    state(cpu ? "adam.m.device" : "adam.m", {moments}, md, TC::kOptimState);
    state(cpu ? "adam.v.device" : "adam.v", {moments}, md, TC::kOptimState);
  }
  inv.add_device("adam.grad_norm_sq", {1}, md, TC::kWorkspace);
  // Note [tensor parallel]: with tp > 1 each segment's replicated part, then each one's sharded part.
  inv.add_device("adam.norm_parts", {spec.model.tp > 1 ? 2 * S : S}, md, TC::kWorkspace);
  if (spec.input_staging_slots > 0) inv.add_device("input.next", {2, spec.batch, cfg.seq}, DType::kI32, TC::kInput);
  // ExecSpec::input_scatter: data rank 0 stages and holds the global batch (each rank's tokens and targets in turn).
  const bool global_input = spec.input_scatter && spec.data_rank == 0;
  if (global_input && spec.input_staging_slots > 0)
    inv.add_device("input.global", {spec.data_ranks, 2, spec.batch, cfg.seq}, DType::kI32, TC::kInput);
  // Host: the swapped blocks' copies (all but the last swap_slots, which never leave their slots), the master and
  // its staging copy, AdamW's state (Note [master on host]) and its second set (Note [speculative update]), the
  // input staging slots.
  for (int l = 0; l < L; ++l)
    if (rings.swap.holds(l) && !rings.swap.last_in_slot(rings.swap.index(l)))
      inv.add_host("swap.h." + std::to_string(l), swap_bytes, TC::kActivation);
  if (cpu) {
    // Note [sharded optimizer]: sharded, the host state holds this rank's shares only.
    const size_t n = static_cast<size_t>(spec.shard_optimizer ? OptimizerShard::moment_elements(segs, spec.data_ranks)
                                                              : P);
    // Note [managed optimizer exchange]: managed gradients are read where they are, and a managed compute copy is
    // written where it is: no host copy of either.
    // Note [pinned and pageable host memory] in plan/inventory.h: the moments never leave the host, nor does the
    // master where a bf16 compute copy is what the copies move.
    const bool master_pageable = dt != DType::kF32;
    inv.add_host("params.master", n * sizeof(float), TC::kParam, master_pageable);
    if (plan.host_ring) {  // Note [host buffers in rings] in plan/schedule.h: slots of the largest segment's size
      const int64_t largest = *std::max_element(segs.size.begin(), segs.size.end());
      for (int i = 0; i < kHostRingSlots; ++i) {
        inv.add_host("grads.ring" + std::to_string(i), static_cast<size_t>(largest) * sizeof(float), TC::kGrad);
        if (dt != DType::kF32)
          inv.add_host("params.ring" + std::to_string(i), static_cast<size_t>(largest) * dtype_size(dt), TC::kParam);
      }
    } else {
      if (dt != DType::kF32 && !plan.managed_params)
        inv.add_host("params.compute.host", n * dtype_size(dt), TC::kParam);
      if (!plan.managed_grads) inv.add_host("adam.grads", n * sizeof(float), TC::kGrad);
    }
    // Note [gradients summed on the host]: the staging ring and the host's parts of the norm.
    if (any_grads_summed_on_host(spec.schedule_spec())) {
      for (int i = 0; i < std::max(1, rings.grads.slots); ++i)
        inv.add_host("grads.staging" + std::to_string(i), segs.size[1] * sizeof(float), TC::kGrad);
      inv.add_host("adam.host_norm_parts", S * sizeof(float), TC::kWorkspace);
    }
    inv.add_host("adam.m", n * sizeof(float), TC::kOptimState, true);
    inv.add_host("adam.v", n * sizeof(float), TC::kOptimState, true);
    if (spec.hyper.speculate) {
      inv.add_host("adam.master.next", n * sizeof(float), TC::kParam, master_pageable);
      inv.add_host("adam.m.next", n * sizeof(float), TC::kOptimState, true);
      inv.add_host("adam.v.next", n * sizeof(float), TC::kOptimState, true);
      if (dt != DType::kF32 && !plan.managed_params)
        inv.add_host("params.compute.host.next", n * dtype_size(dt), TC::kParam);
    }
    inv.add_host("adam.norm", sizeof(float), TC::kWorkspace);
  }
  for (int i = 0; i < spec.input_staging_slots; ++i)
    inv.add_host("input.staging" + std::to_string(i),
                 static_cast<size_t>(2 * (global_input ? spec.data_ranks : 1)) * static_cast<size_t>(spec.batch) *
                     static_cast<size_t>(cfg.seq) * sizeof(int32_t),
                 TC::kInput);
  // Note [host one step ahead] (exec/trainer.cc): the pinned slots a training step's losses and squared gradient
  // norm are read back through, two so that one step can be read while the next runs.
  if (spec.input_staging_slots > 0)
    for (int i = 0; i < 2; ++i)
      inv.add_host("step.readback" + std::to_string(i),
                   (static_cast<size_t>(spec.grad_accum) * static_cast<size_t>(spec.batch) *
                        static_cast<size_t>(cfg.seq) + 1) * sizeof(float),
                   TC::kInput);
  return inv;
}

int64_t Executor::managed_device_bytes(const ExecSpec& spec, const Inventory& inventory) {
  const RingLayout rings =
      ring_layout(spec.plan.layers.empty() ? resident_plan(spec.model.layers, spec.plan.bf16_grads) : spec.plan);
  int64_t resident = 0, largest = 0;
  for (const InventoryEntry& e : inventory.entries()) {
    if (e.where != Inventory::kManaged) continue;
    if (e.layer >= 0 && rings.um.holds(e.layer)) {
      largest = std::max(largest, static_cast<int64_t>(e.bytes));
    } else {
      resident += static_cast<int64_t>(e.bytes);
    }
  }
  return resident + largest * rings.um.slots;
}

int Executor::largest_optimizer_split(const ExecSpec& spec, const std::function<bool(const Inventory&)>& fits,
                                      Inventory* out) {
  const int S = spec.model.layers + 2;
  if (!spec.plan.cpu_optimizer() || !spec.plan.optimizer_split_refusal(S).empty() || spec.hyper.speculate ||
      spec.shard_optimizer)
    return 0;
  auto with = [&](int k, Inventory* inv) {
    ExecSpec t = spec;
    t.plan.device_optimizer_segments = k;
    if (!t.validate().is_ok()) return false;
    Result<Inventory> r = inventory(t);
    if (!r.is_ok() || !fits(r.value())) return false;
    if (inv != nullptr) *inv = std::move(r.value());
    return true;
  };
  int lo = 0, hi = S - 1;  // 0 is the spec as it is (no split)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (with(mid, nullptr)) lo = mid;
    else hi = mid - 1;
  }
  if (lo > 0 && out != nullptr) TT_CHECK(with(lo, out), "optimizer split: %d segments fit once and not again", lo);
  return lo;
}

ScheduleSpec ExecSpec::schedule_spec() const {
  ScheduleSpec s;
  s.model = model;
  s.batch = batch;
  s.compute = compute;
  s.plan = plan;
  s.speculate = hyper.speculate;
  s.lm_chunk_rows = lm_chunk_rows > 0 ? lm_chunk_rows : model_default_lm_chunk_rows(model, batch, compute);
  s.input_staging_slots = input_staging_slots;
  s.data_ranks = data_ranks;
  s.grad_accum = grad_accum;
  s.shard_optimizer = shard_optimizer && plan.cpu_optimizer();
  s.norm_beside = norm_beside;
  return s;
}

Result<std::unique_ptr<Executor>> Executor::create(Backend& backend, ExecSpec spec, ModelFactory model) {
  if (spec.plan.layers.empty()) spec.plan = resident_plan(spec.model.layers, spec.plan.bf16_grads);
  if (spec.lm_chunk_rows <= 0) spec.lm_chunk_rows = model_default_lm_chunk_rows(spec.model, spec.batch, spec.compute);
  TT_TRY(spec.validate());
  std::unique_ptr<Executor> ex(new Executor(backend, std::move(spec)));
  TT_ASSIGN_OR_RETURN(ex->inventory_, inventory(ex->spec_));
  ex->rings_ = ring_layout(ex->spec_.plan);
  ex->arena_ = arena_of(ex->spec_);
  ex->head_ = head_in_grads(ex->spec_);
  ex->schedule_ = compile_schedule(ex->spec_.schedule_spec(), ex->inventory_);
  TT_TRY(ex->schedule_.validate());
  for (size_t i = 0; i < ex->schedule_.events.size(); ++i) ex->events_.push_back(backend.create_event());
  ex->comm_done_ = backend.create_event();
  if (ex->rings_.swap.size() > 0 && ex->rings_.swap.size() <= ex->spec_.plan.swap_slots())
    TT_LOG(WARN, MEM, "%d swapped blocks and %d swap slots: every swapped block stays in its slot, nothing is "
           "copied (swap more blocks than slots to save device memory)", ex->rings_.swap.size(),
           ex->spec_.plan.swap_slots());
  TT_TRY(ex->allocate_and_bind(model));
  const ModelConfig& cfg = ex->spec_.model;
  TT_LOG(INFO, EXEC, "%s: %lld parameters, device pool in use %s", cfg.describe().c_str(),
         static_cast<long long>(model_num_params(cfg)),
         format_bytes(static_cast<int64_t>(backend.pool().in_use())).c_str());
  return ex;
}

Status Executor::allocate_and_bind(const ModelFactory& model) {
  // Issue 20: the managed pool, one reservation of exactly the inventory's managed bytes.
  if (const int64_t managed = inventory_.total(Inventory::kManaged); managed > 0) {
    memory::UmDriver* um = be_.um();
    TT_RETURN_IF(um == nullptr, kFailedPrecondition,
                 "plan %s places data in managed memory (Unified Memory), which the %s backend does not offer",
                 spec_.plan.source.c_str(), be_.describe().c_str());
    // One piece more than the entries, so that the pool starts on a 2 MiB boundary (Inventory::add_managed).
    const size_t align = Inventory::kManagedAlignBytes;
    TT_ASSIGN_OR_RETURN(managed_base_,
                        um->reserve(static_cast<size_t>(managed) + align, spec_.um_allow_oversubscription));
    const uintptr_t b = reinterpret_cast<uintptr_t>(managed_base_);
    void* aligned = reinterpret_cast<void*>((b + align - 1) / align * align);
    managed_pool_ = std::make_unique<memory::DevicePool>(aligned, static_cast<size_t>(managed), be_.device(),
                                                         &be_.stats());
    managed_pool_->set_tier(memory::Tier::kManaged);
  }
  // The setup pass: every allocation of the run, in order, with the advice and first placement of managed entries.
  for (const Op& op : schedule_.pass(Pass::kSetup)) {
    const InventoryEntry* found = inventory_.find(op.name);
    TT_RETURN_IF(found == nullptr, kInternal, "the schedule allocates %s, which the inventory does not hold",
                 op.name.c_str());
    const InventoryEntry& e = *found;
    if (e.backend_owned) continue;
    if (op.kind == OpKind::kUmAdvise) {
      TT_TRY(be_.um()->advise(um_ranges(op),
                              spec_.plan.um.advice(e.cls, e.layer >= 0 &&
                                                              spec_.plan.activation(e.layer) == ActPlacement::kManagedOffload)));
      continue;
    }
    if (op.kind == OpKind::kUmPrefetch) {
      be_.um()->prefetch(um_ranges(op), static_cast<memory::UmPlace>(op.place), be_.compute_stream());
      continue;
    }
    if (e.where == Inventory::kManaged) {  // whole 2 MiB pieces: every entry starts on a page of its own
      TT_ASSIGN_OR_RETURN(void* p, managed_pool_->allocate_bytes(e.bytes, e.cls, e.name));
      const Tensor t(p, e.shape, e.dtype, e.cls, be_.device());
      managed_.push_back(t);
      by_name_[e.name] = t;
    } else if (e.where == Inventory::kDevice) {
      TT_ASSIGN_OR_RETURN(Tensor t, be_.pool().allocate(e.shape, e.dtype, e.cls, e.name));
      device_.push_back(t);
      by_name_[e.name] = t;
    } else {
      // Note [pinned and pageable host memory] in plan/inventory.h.
      memory::HostPool& from = e.pageable ? be_.pageable_pool() : be_.host_pool();
      TT_ASSIGN_OR_RETURN(void* p, from.allocate(e.request, e.cls, e.name));
      host_.push_back({p, e.pageable});
      host_by_name_[e.name] = p;
    }
  }
  auto dev = [&](const std::string& n) {
    auto it = by_name_.find(n);
    return it == by_name_.end() ? Tensor() : it->second;
  };
  auto host = [&](const std::string& n) -> void* {
    auto it = host_by_name_.find(n);
    return it == host_by_name_.end() ? nullptr : it->second;
  };
  const ModelConfig& cfg = spec_.model;
  const Plan& plan = spec_.plan;
  const int L = cfg.layers, S = L + 2;
  const ParamSegments segs = model_segments(cfg);
  ModelTensors t;
  // Parameters' compute copies and gradients per segment.
  master_ = spec_.master_in_halves() ? dev("params.low") : dev("params");
  compute_flat_ = dev("params.compute");
  const Tensor flat = compute_flat_.raw() ? compute_flat_ : master_;
  for (int i = 0; i < rings_.params.slots; ++i) param_slots_.push_back(dev("params.slot" + std::to_string(i)));
  for (int i = 0; i < rings_.grads.slots; ++i) grad_slots_.push_back(dev("grads.slot" + std::to_string(i)));
  for (int s = 0; s < S; ++s) {
    const size_t k = static_cast<size_t>(s);
    const Shape shape{segs.size[k]};
    const int l = s - 1;
    if (s >= 1 && s <= L && plan.params_streamed(l)) {
      t.params.push_back(param_slots_[static_cast<size_t>(rings_.params.slot(l))].view(0, shape));
    } else if (flat.raw()) {
      t.params.push_back(flat.view(segs.offset[k], shape));
    } else {
      t.params.push_back(dev("params.compute.seg" + std::to_string(s)));
    }
    if (s >= 1 && s <= L && plan.grads_streamed(l)) {
      t.grads.push_back(grad_slots_[static_cast<size_t>(rings_.grads.slot(l))].view(0, shape));
    } else if ((s >= 1 && s <= L && arena_.holds_grads(l)) || (s == 0 && arena_.holds_embedding_grads())) {
      // Note [gradients in dead activations]: in the arena, among the later blocks' sets.
      const Tensor a = dev("activations");
      const int64_t at = s == 0 ? arena_.embedding_grads_at : arena_.grads_at[static_cast<size_t>(l)];
      t.grads.push_back(Tensor(static_cast<char*>(a.raw()) + at, shape, segment_grad_dtype(plan, spec_.compute, L, s),
                               TensorClass::kGrad, a.device()));
    } else {
      t.grads.push_back(dev("grads.seg" + std::to_string(s)));
    }
  }
  // A set of block tensors in one allocation: each carved out of it, 256-byte aligned, as prefix + its name.
  // Returns the bytes carved.
  auto carve = [&](const Tensor& set, const std::string& prefix, unsigned parts) {
    size_t off = 0;
    for (const TensorRequest& a : model_block_activations(cfg, spec_.batch, spec_.compute, parts)) {
      by_name_[prefix + a.name] = Tensor(static_cast<char*>(set.raw()) + off, a.shape, a.dtype, a.cls, set.device());
      off += device_alloc_bytes(a.shape, a.dtype);
    }
    return off;
  };
  // Swap slots, under the names of the shared sets.
  const unsigned swapped = plan.swapped_parts();
  for (int i = 0; i < rings_.swap.slots; ++i) {
    const Tensor slot = dev("swap.slot" + std::to_string(i));
    swap_slots_.push_back(slot);
    carve(slot, "swap" + std::to_string(i) + ".", swapped);
  }
  // Managed blocks' sets (Note [managed activations]), under "managed<l>.".
  for (int l = 0; l < L; ++l)
    if (plan.managed_block(l))
      carve(dev("managed.h." + std::to_string(l)), "managed" + std::to_string(l) + ".", plan.held_parts(l));
  // The sets in the arena (Note [gradients in dead activations]), under their usual names.
  if (arena_.bytes > 0) {
    const Tensor a = dev("activations");
    for (int l = 0; l < L; ++l)
      if (arena_.holds_set(l)) {
        char* set = static_cast<char*>(a.raw()) + arena_.set_at[static_cast<size_t>(l)];
        size_t off = carve(Tensor(set, {1}, DType::kU8, TensorClass::kActivation, a.device()),
                           "h." + std::to_string(l) + ".", plan.held_parts(l));
        for (const TensorRequest& r : model_block_fixed_tensors(cfg, spec_.batch, spec_.compute, l)) {  // its output
          by_name_[r.name] = Tensor(set + off, r.shape, r.dtype, r.cls, a.device());
          off += device_alloc_bytes(r.shape, r.dtype);
        }
      }
  }
  swap_host_.assign(static_cast<size_t>(L), nullptr);
  for (int l = 0; l < L; ++l) swap_host_[static_cast<size_t>(l)] = host("swap.h." + std::to_string(l));
  // Each block's activations: from its own set, the shared recompute set or its swap slot; the parts rebuilt
  // apart from the shared sets of those parts.
  for (int l = 0; l < L; ++l) {
    const std::string own = "h." + std::to_string(l) + ".";
    const ActPlacement pl = plan.activation(l);
    const std::string p = pl == ActPlacement::kRecompute ? std::string("recompute.")
                          : pl == ActPlacement::kSwap ? "swap" + std::to_string(rings_.swap.slot(l)) + "."
                          : plan.managed_block(l)     ? "managed" + std::to_string(l) + "."
                                                      : own;
    const std::string& h = own;
    for (const TensorRequest& r : model_block_activations(cfg, spec_.batch, spec_.compute, kPartNorms))
      t.named[h + r.name] = dev((plan.norms_rebuilt(l) ? std::string("recompute_norms.") : p) + r.name);
    for (const TensorRequest& r : model_block_activations(cfg, spec_.batch, spec_.compute, kPartCore))
      t.named[h + r.name] = dev(p + r.name);
    for (const TensorRequest& r : model_block_activations(cfg, spec_.batch, spec_.compute, kPartFc))
      t.named[h + r.name] = dev((plan.mlp_rebuilt(l) ? std::string("recompute_mlp.") : p) + r.name);
    for (const TensorRequest& r : model_block_activations(cfg, spec_.batch, spec_.compute, kPartAct))
      t.named[h + r.name] = dev((plan.mlp_rebuilt(l)   ? std::string("recompute_mlp.")
                                 : plan.act_rebuilt(l) ? std::string("recompute_act.")
                                                       : p) +
                                r.name);
  }
  for (const TensorRequest& r : model_fixed_tensors(cfg, spec_.batch, spec_.compute, spec_.lm_chunk_rows)) {
    const auto in = head_.at.find(r.name);
    if (in == head_.at.end()) {
      t.named[r.name] = dev(r.name);
      continue;
    }
    // Note [head in gradients]: in a block's gradient buffer, dead until its backward.
    const Tensor& g = t.grads[static_cast<size_t>(in->second.segment)];
    t.named[r.name] = Tensor(static_cast<char*>(g.raw()) + in->second.offset, r.shape, r.dtype, r.cls, g.device());
  }
  model_ = model ? model(be_, cfg, spec_.batch, spec_.compute, std::move(t))
                 : create_model(be_, cfg, spec_.batch, spec_.compute, std::move(t));
  model_->set_tp_rank(spec_.tp_rank);
  model_->set_act_apart(plan.act_apart());  // Note [rebuilt activation]
  {
    std::vector<char> apart(static_cast<size_t>(cfg.layers), 0);  // Note [gradients summed on the host]
    for (int l = 0; l < cfg.layers; ++l) apart[static_cast<size_t>(l)] = grads_summed_on_host(spec_.schedule_spec(), l);
    model_->set_blocks_summed_elsewhere(std::move(apart));
  }
  // The optimizer's state.
  OptimizerBuffers ob;
  ob.master = master_;
  ob.master_in_halves = spec_.master_in_halves();
  ob.m = dev(plan.cpu_optimizer() ? "adam.m.device" : "adam.m");
  ob.v = dev(plan.cpu_optimizer() ? "adam.v.device" : "adam.v");
  ob.norm_sq = dev("adam.grad_norm_sq");
  ob.parts = dev("adam.norm_parts");
  // Note [device update by segment]; Note [optimizer split] in plan/schedule.h.
  if (!plan.cpu_optimizer() || plan.device_optimizer_segments > 0) ob.compute = compute_flat_;
  if (plan.cpu_optimizer()) ob.device_segments = plan.device_optimizer_segments;
  if (plan.cpu_optimizer()) {
    auto f = [&](const char* n) { return static_cast<float*>(host(n)); };
    ob.sets[0] = {f("params.master"), f("adam.m"), f("adam.v"), static_cast<uint16_t*>(host("params.compute.host"))};
    ob.sets[1] = {f("adam.master.next"), f("adam.m.next"), f("adam.v.next"),
                  static_cast<uint16_t*>(host("params.compute.host.next"))};
    ob.host_grads = f("adam.grads");
    ob.host_norm = f("adam.norm");
    if (plan.host_ring)  // Note [host buffers in rings] in plan/schedule.h
      for (int i = 0; i < kHostRingSlots; ++i) {
        ob.grad_ring.push_back(f(("grads.ring" + std::to_string(i)).c_str()));
        if (spec_.compute != DType::kF32)
          ob.param_ring.push_back(static_cast<uint16_t*>(host("params.ring" + std::to_string(i))));
      }
    const ScheduleSpec ss = spec_.schedule_spec();
    if (any_grads_summed_on_host(ss)) {  // Note [gradients summed on the host]
      for (int i = 0; i < std::max(1, rings_.grads.slots); ++i)
        ob.grad_staging.push_back(f(("grads.staging" + std::to_string(i)).c_str()));
      ob.host_parts = f("adam.host_norm_parts");
      ob.host_summed.assign(static_cast<size_t>(model_->num_segments()), 0);
      for (int l = 0; l < cfg.layers; ++l) ob.host_summed[static_cast<size_t>(1 + l)] = grads_summed_on_host(ss, l);
    }
    // Note [managed optimizer exchange].
    if (plan.managed_grads) ob.grads_in_place = true;
    if (plan.managed_params) {
      ob.compute_out = compute_flat_;
      if (spec_.compute != DType::kF32)
        ob.sets[0].bf16 = ob.sets[1].bf16 = static_cast<uint16_t*>(compute_flat_.raw());
    }
  }
  OptimizerShard shard;
  if (spec_.shard_optimizer) shard = {spec_.data_rank, spec_.data_ranks};
  opt_ = std::make_unique<Optimizer>(be_, *model_, plan.optimizer, spec_.hyper, ob, shard);
  input_next_ = dev("input.next");
  if (spec_.input_scatter && spec_.data_rank == 0) input_global_ = dev("input.global");
  for (int i = 0; i < spec_.input_staging_slots; ++i) {
    input_host_.push_back(static_cast<int32_t*>(host("input.staging" + std::to_string(i))));
    input_slot_read_.push_back(be_.create_event());
  }
  if (spec_.input_staging_slots > 0)
    for (int i = 0; i < 2; ++i) step_readback_[i] = static_cast<float*>(host("step.readback" + std::to_string(i)));
  return be_.compute_stream().synchronize();
}

Executor::~Executor() {
  (void)be_.synchronize_all();
  opt_.reset();
  model_.reset();
  for (auto it = host_.rbegin(); it != host_.rend(); ++it)
    (it->second ? be_.pageable_pool() : be_.host_pool()).free(it->first);
  for (auto it = device_.rbegin(); it != device_.rend(); ++it) be_.pool().free(*it);
  for (auto it = managed_.rbegin(); it != managed_.rend(); ++it) managed_pool_->free(*it);
  managed_pool_.reset();
  if (managed_base_ != nullptr) be_.um()->release(managed_base_);
}

std::vector<memory::UmRange> Executor::um_ranges(const Op& op) const {
  auto it = by_name_.find(op.entry);
  TT_CHECK(it != by_name_.end(), "%s: no managed entry %s", op.name.c_str(), op.entry.c_str());
  const Tensor& t = it->second;
  if (op.entry == "params.compute" && op.segment >= 0) {  // Note [managed optimizer exchange]: one segment of it
    const SegmentPieces p = segment_pieces(segments_, op.segment, static_cast<int64_t>(dtype_size(t.dtype())));
    char* base = static_cast<char*>(t.raw());  // on a piece of its own (Inventory::add_managed)
    auto range = [&](int64_t from, int64_t to) {
      return memory::UmRange{base + from, static_cast<size_t>(to - from)};
    };
    // (Schedule::validate refused a part on a segment without a whole piece.)
    switch (op.um_part) {
      case Op::UmPart::kWhole:
        return {range(p.begin, p.end)};
      case Op::UmPart::kInner:
        TT_CHECK(p.has_inner(), "%s: the segment holds no whole piece", op.name.c_str());
        return {range(p.lo, p.hi)};
      case Op::UmPart::kEnds: {
        TT_CHECK(p.has_inner(), "%s: the segment holds no whole piece", op.name.c_str());
        std::vector<memory::UmRange> ends;
        if (p.begin < p.lo) ends.push_back(range(p.begin, p.lo));
        if (p.hi < p.end) ends.push_back(range(p.hi, p.end));
        return ends;
      }
    }
  }
  const InventoryEntry* e = inventory_.find(op.entry);
  TT_CHECK(e != nullptr && e->where == Inventory::kManaged, "%s: %s is not a managed entry", op.name.c_str(),
           op.entry.c_str());
  return {{t.raw(), e->bytes}};  // the whole 2 MiB pieces it owns
}

Stream& Executor::stream(StreamId s) {
  switch (s) {
    case StreamId::kCompute: return be_.compute_stream();
    case StreamId::kH2D: return be_.h2d_stream();
    case StreamId::kD2H: return be_.d2h_stream();
    case StreamId::kHost: return be_.host_stream();
    case StreamId::kComm: return be_.comm_stream();
  }
  return be_.compute_stream();
}

// --- parameters ---

Status Executor::init_params(uint64_t seed) {
  const size_t n = static_cast<size_t>(model_->num_params());
  // Note [tensor parallel]: a rank's shard of the whole model's initial values, so that a mesh starts where one
  // device does (the whole model passes through host memory once).
  auto init = [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    if (spec_.model.tp == 1) return model_init_values(spec_.model, seed, out);
    const ModelConfig whole = spec_.model.whole();
    auto all = std::make_unique_for_overwrite<T[]>(static_cast<size_t>(model_num_params(whole)));
    model_init_values(whole, seed, all.get());
    model_take_shard(spec_.model, spec_.tp_rank, all.get(), out, sizeof(T));
  };
  if (model_->master_dtype() == DType::kF64) {
    auto host = std::make_unique_for_overwrite<double[]>(n);
    init(host.get());
    return upload_params(host.get());
  }
  if (opt_->on_cpu() && !opt_->shard().on() && spec_.model.tp == 1) {
    // Straight into the host master (Note [master on host]): a second whole copy of the model in host memory would
    // be 4 bytes a parameter more than the run was counted for (an 8B model: 30 GiB).
    TT_TRY(be_.synchronize_all());  // no update or upload of the master is in flight
    model_init_values(spec_.model, seed, opt_->host_master());
    return master_loaded();
  }
  auto host = std::make_unique_for_overwrite<float[]>(n);  // every element is written
  init(host.get());
  return upload_params(host.get());
}

void Executor::tp_sum(const char* name, const Tensor& t) {
  TT_CHECK(tp_reducer_ != nullptr, "tensor parallel (tp %d) without a reducer over the model dimension (%s)",
           spec_.model.tp, name);
  if (prof_) prof_->mark(name);
  tp_reducer_->sum(t, be_.compute_stream());
}

void Executor::tp_max(const char* name, const Tensor& t) {
  TT_CHECK(tp_reducer_ != nullptr, "tensor parallel (tp %d) without a reducer over the model dimension (%s)",
           spec_.model.tp, name);
  if (prof_) prof_->mark(name);
  tp_reducer_->max(t, be_.compute_stream());
}

// Note [sharded optimizer]: each data rank's share of one segment's new parameters to every rank, in `stream`'s
// order. Equal shares (the ranks divide the segment, as GPT-2's blocks at 2, 4 or 8): one in-place allgather; else a
// broadcast from each owner.
void Executor::gather_param_shares(const Tensor& segment, Stream& stream) {
  TT_CHECK(reducer_ != nullptr, "a sharded optimizer without the data-parallel reducer");
  const int64_t n = segment.numel();
  if (n % spec_.data_ranks == 0) {
    reducer_->allgather(segment, stream);
    return;
  }
  for (int r = 0; r < spec_.data_ranks; ++r) {
    const auto [lo, hi] = OptimizerShard::range(n, r, spec_.data_ranks);
    if (lo < hi) reducer_->broadcast(segment.view(lo, {hi - lo}), r, stream);
  }
}

Status Executor::upload_params(const void* host) {
  const ModelTensors& t = model_->tensors();
  if (spec_.master_in_halves()) {  // Note [master in two halves]: split here, both halves up, a piece at a time
    const float* whole = static_cast<const float*>(host);
    const int64_t n = master_.numel(), piece = std::max<int64_t>(1, std::min(n, spec_.halves_piece));
    std::vector<uint16_t> high(static_cast<size_t>(piece)), low(high.size());
    for (int64_t at = 0; at < n; at += piece) {
      const int64_t k = std::min(piece, n - at);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < k; ++i) {
        high[static_cast<size_t>(i)] = bf16_high(whole[at + i]);
        low[static_cast<size_t>(i)] = bf16_low(whole[at + i], high[static_cast<size_t>(i)]);
      }
      be_.copy_h2d(compute_flat_.view(at, {k}), high.data(), be_.compute_stream());
      be_.copy_h2d(master_.view(at, {k}), low.data(), be_.compute_stream());
      TT_TRY(be_.compute_stream().synchronize());  // (before the piece's buffers take the next)
    }
    return Status::ok();
  }
  if (!opt_->on_cpu()) {
    be_.copy_h2d(master_, host, be_.compute_stream());
    if (compute_flat_.raw()) be_.convert(compute_flat_, master_);
    return be_.compute_stream().synchronize();
  }
  // Note [master on host]: the master and its staging copy on the host, then every resident segment's device copy;
  // streamed blocks are uploaded by each pass (Note [streamed parameters]).
  TT_TRY(be_.synchronize_all());  // no update or upload of the master is in flight
  TT_CHECK(spec_.compute == DType::kBF16 || spec_.compute == DType::kF32, "no host conversion of the master to %s",
           dtype_name(spec_.compute));
  TT_TRY(opt_->upload_master(static_cast<const float*>(host)));
  if (opt_->shard().on()) {
    // Note [sharded optimizer]: the host holds only this rank's shares; the device copy is the whole model's, from
    // `host` itself (converted here with bf16 compute, as upload_master converts the shares: the same bits).
    const float* whole = static_cast<const float*>(host);
    std::vector<uint16_t> bf16;
    if (spec_.compute == DType::kBF16) {
      bf16.resize(static_cast<size_t>(model_->num_params()));
      for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = bf16_high(whole[i]);
    }
    for (int s = 0; s < model_->num_segments(); ++s) {
      const size_t off = static_cast<size_t>(segments_.offset[static_cast<size_t>(s)]);
      be_.copy_h2d(t.params[static_cast<size_t>(s)],
                   bf16.empty() ? static_cast<const void*>(whole + off) : static_cast<const void*>(bf16.data() + off),
                   be_.compute_stream());
    }
    return be_.compute_stream().synchronize();
  }
  return upload_compute_copies();
}

Status Executor::master_loaded() {
  TT_CHECK(opt_->host_state_whole(), "master_loaded is for an unsharded CPU optimizer");
  TT_TRY(be_.synchronize_all());
  TT_TRY(opt_->master_written());
  return upload_compute_copies();
}

// The resident segments' compute copies from the CPU optimizer's host state (unsharded); streamed blocks are
// uploaded by each pass (Note [streamed parameters]).
Status Executor::upload_compute_copies() {
  const ModelTensors& t = model_->tensors();
  const HostAdamState& st = opt_->current();
  // (A managed bf16 compute copy was written where it is: Note [managed optimizer exchange].)
  if (spec_.plan.managed_params && st.bf16 != nullptr) return Status::ok();
  // Note [host buffers in rings]: no whole staging copy; each segment converted into one buffer, then sent.
  std::vector<char> one;
  if (opt_->host_ring()) one.resize(static_cast<size_t>(*std::max_element(segments_.size.begin(), segments_.size.end())) *
                                    dtype_size(spec_.compute));
  for (int s = 0; s < model_->num_segments(); ++s) {
    if (s >= 1 && s <= spec_.model.layers && spec_.plan.params_streamed(s - 1)) continue;
    if (one.empty()) {
      be_.copy_h2d(t.params[static_cast<size_t>(s)], opt_->host_compute(s), be_.compute_stream());
      continue;
    }
    opt_->compute_copy(s, one.data());
    be_.copy_h2d(t.params[static_cast<size_t>(s)], one.data(), be_.compute_stream());
    TT_TRY(be_.compute_stream().synchronize());  // before the buffer takes the next segment
  }
  return be_.compute_stream().synchronize();
}

Status Executor::download_params(void* host) {
  if (spec_.master_in_halves()) {  // Note [master in two halves]: both halves down, joined here, a piece at a time
    float* whole = static_cast<float*>(host);
    const int64_t n = master_.numel(), piece = std::max<int64_t>(1, std::min(n, spec_.halves_piece));
    std::vector<uint16_t> high(static_cast<size_t>(piece)), low(high.size());
    for (int64_t at = 0; at < n; at += piece) {
      const int64_t k = std::min(piece, n - at);
      be_.copy_d2h(high.data(), compute_flat_.view(at, {k}), be_.compute_stream());
      be_.copy_d2h(low.data(), master_.view(at, {k}), be_.compute_stream());
      TT_TRY(be_.compute_stream().synchronize());
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < k; ++i)
        whole[at + i] = bf16_join(high[static_cast<size_t>(i)], low[static_cast<size_t>(i)]);
    }
    return Status::ok();
  }
  if (!opt_->on_cpu()) {
    be_.copy_d2h(host, master_, be_.compute_stream());
    return be_.compute_stream().synchronize();
  }
  return opt_->download_master(static_cast<float*>(host));
}

Status Executor::download_grads(void* host) {
  TT_RETURN_IF(!grads_valid_, kFailedPrecondition,
               "download_grads after a forward that followed the last backward: plan %s keeps gradients in "
               "activation memory or the head's tensors in gradient buffers (Note [gradients in dead activations], "
               "Note [head in gradients]), which that forward overwrote; read them first, or set "
               "grads_in_activations false", spec_.plan.source.c_str());
  const size_t esize = dtype_size(model_->master_dtype());
  const ParamSegments& segs = model_->segments();
  std::vector<std::pair<int, std::vector<uint16_t>>> widen;  // Note [bf16 gradients]: (segment, its bf16 copy)
  for (int s = 0; s < model_->num_segments(); ++s) {
    TT_RETURN_IF(s >= 1 && s <= spec_.model.layers && spec_.plan.grads_streamed(s - 1), kFailedPrecondition,
                 "download_grads: block %d's gradients are streamed", s - 1);
    const Tensor& g = model_->tensors().grads[static_cast<size_t>(s)];
    if (g.dtype() == DType::kBF16) {
      widen.emplace_back(s, std::vector<uint16_t>(static_cast<size_t>(g.numel())));
      be_.copy_d2h(widen.back().second.data(), g, be_.compute_stream());
      continue;
    }
    be_.copy_d2h(static_cast<char*>(host) + static_cast<size_t>(segs.offset[static_cast<size_t>(s)]) * esize, g,
                 be_.compute_stream());
  }
  TT_TRY(be_.compute_stream().synchronize());
  for (const auto& [s, g] : widen) {  // (an f32 master: bf16 gradients are made with f32 or bf16 compute only)
    float* out = static_cast<float*>(host) + segs.offset[static_cast<size_t>(s)];
    for (size_t i = 0; i < g.size(); ++i) out[i] = bf16_to_float(g[i]);
  }
  return Status::ok();
}

void Executor::wait_all() {
  if (!opt_->on_cpu()) return;
  // The compute stream waits for every segment's update (host stream) and copy back (h2d stream), whatever the
  // forward has waited for already (an event never recorded is no wait).
  for (const Op& op : schedule_.pass(Pass::kStep))
    if (op.kind == OpKind::kRecord) be_.compute_stream().wait(*events_[static_cast<size_t>(op.event)]);
}

// --- passes ---

void Executor::model_forward() {
  model_->forward_blocks(*this);
  model_->lm_head(*this, /*with_backward=*/false);
}

void Executor::model_backward() {
  model_->lm_head(*this, /*with_backward=*/true);
  model_->backward_blocks(*this);
}

void Executor::model_train() {
  model_->forward_blocks(*this);
  model_backward();
}

// Note [gradients in dead activations]: a forward overwrites the gradients that live in activation sets; a step
// of them, or reading them, is refused after it. With data-parallel ranks the forward first waits for the
// averages still running in place on the comm stream (the step's pass waits for each; a bare forward would not).
// Note [head in gradients]: so does a forward's head over the gradients that hold its tensors.
bool Executor::grads_in_activations() const {
  return arena_.blocks_with_grads() > 0 || arena_.holds_embedding_grads() || !head_.at.empty();
}
void Executor::forward() {
  if (grads_in_activations()) {
    // (and the norm's parts still reading them: Note [norm beside the backward])
    if (grads_pending_ && (spec_.data_ranks > 1 || norm_beside_backward(schedule_.spec))) {
      be_.comm_stream().record(*comm_done_);
      be_.compute_stream().wait(*comm_done_);
    }
    grads_valid_ = false;
  }
  run_pass(Pass::kForward, &Executor::model_forward);
}
void Executor::backward() {
  // Note [managed activations]: an evaluation forward discards the offloaded blocks' activations.
  TT_CHECK(rings_.um.size() == 0,
           "backward() after forward(): plan %s offloads activations through managed memory, which the evaluation "
           "forward discards; use forward_backward() or train_step()", spec_.plan.source.c_str());
  opt_->begin_step(0.0f, false);
  run_pass(Pass::kBackward, &Executor::model_backward);
  grads_pending_ = grads_valid_ = true;
  norm_parts_current_ = true;
}
void Executor::step(float lr) {
  // Note [norm beside the backward] (plan/schedule.cc): the step sums the parts the last backward computed.
  TT_CHECK(norm_parts_current_ || !norm_beside_backward(schedule_.spec),
           "step() after accumulate_step(): the gradient norm's parts are computed by a step's last backward; end "
           "the step with train_step(lr, speculate, /*accumulated=*/true)");
  TT_CHECK(!grads_pending_ || grads_valid_,
           "step() after a forward that followed the backward: plan %s keeps gradients in later blocks' "
           "activation memory or the head's tensors in gradient buffers (Note [gradients in dead activations], "
           "Note [head in gradients]), which that forward overwrote; step before running another forward, or set "
           "grads_in_activations false", spec_.plan.source.c_str());
  opt_->begin_step(lr, false);
  run_pass(Pass::kStep, &Executor::model_none);
  opt_->end_step();
  grads_pending_ = false;
}
void Executor::forward_backward() {
  opt_->begin_step(0.0f, false);
  run_pass(Pass::kForwardBackward, &Executor::model_train);
  grads_pending_ = grads_valid_ = true;
  norm_parts_current_ = true;
}
void Executor::prefetch() { run_pass(Pass::kPrefetch, &Executor::model_none); }
void Executor::train_step(float lr, bool speculate, bool accumulated) {
  TT_CHECK(!accumulated || spec_.grad_accum > 1, "a step after accumulation in an executor of grad_accum %d",
           spec_.grad_accum);
  model_->set_accumulate_grads(accumulated);
  first_micro_batch_ = !accumulated;
  opt_->begin_step(lr, speculate);
  run_pass(Pass::kTrain, &Executor::model_train);
  opt_->end_step();
  model_->set_accumulate_grads(false);
  grads_pending_ = false;
  grads_valid_ = true;
}
void Executor::accumulate_step(bool first) {
  TT_CHECK(spec_.grad_accum > 1, "accumulate_step in an executor of grad_accum %d", spec_.grad_accum);
  model_->set_accumulate_grads(!first);
  first_micro_batch_ = first;
  opt_->begin_step(0.0f, false);
  run_pass(Pass::kAccumulate, &Executor::model_train);
  model_->set_accumulate_grads(false);
  grads_pending_ = grads_valid_ = true;
  norm_parts_current_ = false;
}

Status Executor::use_schedule(Schedule schedule) {
  TT_TRY(schedule.validate());
  TT_RETURN_IF(schedule.events != schedule_.events || !(schedule.pass(Pass::kSetup) == schedule_.pass(Pass::kSetup)) ||
                   !(schedule.spec.model == spec_.model) || schedule.spec.batch != spec_.batch,
               kInvalidArgument,
               "use_schedule: the schedule is for another model, batch, allocation or event set than this executor's");
  TT_TRY(be_.synchronize_all());
  schedule_ = std::move(schedule);
  return Status::ok();
}

void Executor::run_pass(Pass p, void (Executor::*model_part)()) {
  ops_ = &schedule_.pass(p);
  pos_ = 0;
  in_model_ = false;
  (this->*model_part)();
  run_until_model();
  TT_CHECK(pos_ == ops_->size(), "pass %s: the model stopped at operation %zu of %zu (%s)", pass_name(p), pos_,
           ops_->size(), pos_ < ops_->size() ? (*ops_)[pos_].name.c_str() : "");
  ops_ = nullptr;
}

void Executor::run_until_model() {
  while (pos_ < ops_->size() && (*ops_)[pos_].kind != OpKind::kModel) issue((*ops_)[pos_++]);
}

void Executor::at(Boundary b, int segment) {
  TT_CHECK(ops_ != nullptr, "the model announced %s of segment %d outside a pass", boundary_name(b), segment);
  const bool before = b == Boundary::kBeforeForward || b == Boundary::kBeforeHead || b == Boundary::kBeforeBackward;
  const Boundary start = before ? b
                         : b == Boundary::kAfterForward ? Boundary::kBeforeForward
                         : b == Boundary::kAfterHead    ? Boundary::kBeforeHead
                                                        : Boundary::kBeforeBackward;
  if (before) run_until_model();
  TT_CHECK(pos_ < ops_->size() && (*ops_)[pos_].kind == OpKind::kModel && (*ops_)[pos_].boundary == start &&
               (*ops_)[pos_].segment == segment && in_model_ != before,
           "the model reached %s of segment %d where the schedule has %s", boundary_name(b), segment,
           pos_ < ops_->size() ? (*ops_)[pos_].name.c_str() : "its end");
  if (before) {
    in_model_ = true;
    return;
  }
  in_model_ = false;
  ++pos_;
  run_until_model();
}

void Executor::issue(const Op& op) {
  if (op.speculative && !opt_->speculating()) return;
  Stream& st = stream(op.stream);
  const ModelTensors& t = model_->tensors();
  // Copies and host work are spans of their stream in the trace; compute work is a mark on the compute stream.
  const bool span = op.stream != StreamId::kCompute && op.kind != OpKind::kWait && op.kind != OpKind::kRecord &&
                    op.kind != OpKind::kInputFill;
  const int c = span && prof_ ? prof_->span_begin(st, op.name.c_str(), op.bytes) : -1;
  switch (op.kind) {
    case OpKind::kModel:
      TT_CHECK(false, "issue: %s is the model's", op.name.c_str());
      break;
    case OpKind::kWait:
      if (op.stream == StreamId::kCompute && prof_) prof_->mark(op.name.c_str());
      st.wait(*events_[static_cast<size_t>(op.event)]);
      break;
    case OpKind::kRecord:
      st.record(*events_[static_cast<size_t>(op.event)]);
      break;
    case OpKind::kRebuildBlock:
      model_->forward_block(*this, op.layer);
      break;
    case OpKind::kRebuildNorms:
      model_->rebuild_norms(*this, op.layer);
      break;
    case OpKind::kRebuildMlp:
      model_->rebuild_mlp(*this, op.layer);
      break;
    case OpKind::kRebuildAct:
      model_->rebuild_act(*this, op.layer);
      break;
    case OpKind::kSwapOut:
      be_.copy_d2h(swap_host_[static_cast<size_t>(op.layer)], swap_slots_[static_cast<size_t>(op.slot)], st);
      break;
    case OpKind::kSwapIn:
      be_.copy_h2d(swap_slots_[static_cast<size_t>(op.slot)], swap_host_[static_cast<size_t>(op.layer)], st);
      break;
    case OpKind::kParamsIn:
      be_.copy_h2d(param_slots_[static_cast<size_t>(op.slot)], opt_->host_compute(op.segment), st);
      break;
    case OpKind::kGradsOut:
      opt_->grads_out(op.segment, op.slot);
      break;
    case OpKind::kGradsStage:  // Note [gradients summed on the host]
      opt_->grads_stage(op.segment, op.slot);
      break;
    case OpKind::kHostGradAdd:
      opt_->host_grad_add(op.segment, op.slot, first_micro_batch_);
      break;
    case OpKind::kHostNormPart:
      opt_->host_norm_part(op.segment);
      break;
    case OpKind::kHostNormTotal:
      opt_->host_norm_total();
      break;
    case OpKind::kGradReduce:  // Note [data parallel] in plan/schedule.cc
      TT_CHECK(reducer_ != nullptr, "%s: a data-parallel schedule without a gradient reducer", op.name.c_str());
      if (prof_) prof_->mark(op.name.c_str());
      reducer_->reduce(t.grads[static_cast<size_t>(op.segment)], st);
      break;
    case OpKind::kNormPart:
      if (op.stream != StreamId::kCompute) {  // Note [norm beside the backward] in plan/schedule.cc
        opt_->norm_part(op.segment, &st);
        break;
      }
      if (prof_) prof_->mark(op.name.c_str());
      opt_->norm_part(op.segment);
      break;
    case OpKind::kNormTotal:
      if (spec_.model.tp > 1) {  // Note [tensor parallel]: the sharded parts summed over the model's ranks
        const int S = model_->num_segments();
        tp_sum("grad norm (sharded parts)", opt_->norm_parts().view(S, {S}));
      }
      if (prof_) prof_->mark(op.name.c_str());
      opt_->norm_total();
      break;
    case OpKind::kNormOut:
      opt_->norm_out();
      break;
    case OpKind::kHostAdamW:
      opt_->host_update(op.segment, op.speculative, op.slot);
      break;
    case OpKind::kParamsBack:
      opt_->params_back(op.segment, t.params[static_cast<size_t>(op.segment)], op.slot);
      // Note [sharded optimizer]: the others' shares of the segment, on the same stream, before the event the
      // forward waits for.
      if (opt_->shard().on()) gather_param_shares(t.params[static_cast<size_t>(op.segment)], st);
      break;
    case OpKind::kDeviceAdamW:
      if (prof_) prof_->mark(op.name.c_str());
      opt_->device_update(op.segment);  // one segment of a split CPU optimizer's (Note [optimizer split])
      if (opt_->shard().on()) {  // Note [sharded optimizer]: every share of the new parameters from its owner
        if (prof_) prof_->mark("sharded optimizer: parameter allgathers");
        const Tensor all = opt_->model_params();
        for (int s = 0; s < model_->num_segments(); ++s)
          gather_param_shares(all.view(segments_.offset[static_cast<size_t>(s)],
                                       {segments_.size[static_cast<size_t>(s)]}),
                              be_.compute_stream());
      }
      break;
    case OpKind::kAlloc:
    case OpKind::kUmAdvise:
      TT_CHECK(false, "issue: %s belongs to the setup pass", op.name.c_str());
      break;
    case OpKind::kUmPrefetch:  // Note [managed activations]: dead pages placed without moving them, or a prefetch
      if (op.um_dead) be_.um()->discard(um_ranges(op), static_cast<memory::UmPlace>(op.place), st);
      else be_.um()->prefetch(um_ranges(op), static_cast<memory::UmPlace>(op.place), st);
      break;
    case OpKind::kInputFill: {
      // Note [slot rings]: batch k into host slot k % slots, once the copy that last read that slot has finished
      // (Note [input staging]: the trainer may have the step that takes that batch still running; the copy itself,
      // 2 x batch x seq int32, was done long before in practice, so this rarely waits).
      TT_CHECK(input_source_ != nullptr, "the schedule draws a batch, but the executor has no input source");
      const bool reused = input_fills_ >= static_cast<int64_t>(input_host_.size());
      input_slot_ = static_cast<int>(input_fills_++ % static_cast<int64_t>(input_host_.size()));
      if (reused) {  // a failed copy (or scatter) is kept for input_status(), as the reducers keep theirs
        Status read = input_slot_read_[static_cast<size_t>(input_slot_)]->synchronize();
        if (!read.is_ok() && input_status_.is_ok()) input_status_ = std::move(read);
      }
      if (input_scale_.size() != input_host_.size()) input_scale_.assign(input_host_.size(), -1.0f);
      input_scale_[static_cast<size_t>(input_slot_)] = input_source_(input_host_[static_cast<size_t>(input_slot_)]);
      break;
    }
    case OpKind::kInputIn:
      next_scale_ = input_scale_[static_cast<size_t>(input_slot_)];
      if (spec_.input_scatter) {  // Note [data-parallel input]: rank 0's global batch from its device to every rank's
        TT_CHECK(input_reducer_ != nullptr, "--input via-root without the input's reducer");
        if (input_global_.raw() != nullptr)
          be_.copy_h2d(input_global_, input_host_[static_cast<size_t>(input_slot_)], st);
        input_reducer_->scatter(input_global_, input_next_, 0, st);
        st.record(*input_slot_read_[static_cast<size_t>(input_slot_)]);
        break;
      }
      be_.copy_h2d(input_next_, input_host_[static_cast<size_t>(input_slot_)], st);
      st.record(*input_slot_read_[static_cast<size_t>(input_slot_)]);
      break;
    case OpKind::kInputTake: {
      if (prof_) prof_->mark(op.name.c_str());
      const Tensor tokens = model_->tokens(), targets = model_->targets();
      const int64_t bt = tokens.numel();
      be_.copy_d2d(tokens, input_next_.view(0, tokens.shape()), st);
      be_.copy_d2d(targets, input_next_.view(bt, targets.shape()), st);
      model_->set_loss_scale(next_scale_);  // Note [loss mask]: this batch's, for its LM head
      break;
    }
  }
  if (c >= 0) prof_->span_end(st, c);
}

}  // namespace tt
