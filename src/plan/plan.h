// plan/plan: where every tensor class of every layer lives during training, and where the optimizer runs: the Plan
// of docs/ARCHITECTURE.md, from a CLI shortcut or a JSON file, validated before anything is allocated.
//
//   TT_ASSIGN_OR_RETURN(Plan plan, Plan::resolve("swap-activations", cfg.model.layers, /*swap_slots=*/2));
//   TT_ASSIGN_OR_RETURN(Plan plan, Plan::resolve("plans/mix.json", cfg.model.layers, 2));
//   if (plan.swapped(3)) ...; plan.optimizer == OptimizerPlacement::kCpu
//
// JSON (docs/PLANS.md):
//   {"version": 1, "optimizer": "device", "swap_prefetch": 1,
//    "default": {"activation": "swap"},
//    "layers": {"0-3": {"activation": "recompute"}, "11": {"activation": "resident"}}}
// "layers" may instead be an array with one object per layer. Per layer and class: "activation" is resident, swap or
// recompute; "param", "grad" and "optim_state" are resident or host_streamed; "optimizer": "cpu" keeps the AdamW
// moments and the fp32 master of all parameters in host memory (exec/optimizer.h), and every host_streamed class needs
// it. A host_streamed "param" is uploaded into one of param_prefetch + 1 device slots ahead of each use (Note
// [streamed parameters] in plan/schedule.h); a host_streamed "grad" leaves the device right after its backward;
// a host_streamed "optim_state" asks for the CPU optimizer, which keeps every layer's state on the host but for the
// first "device_optimizer_segments" segments' (Note [optimizer split] in plan/schedule.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "memory/um.h"
#include "model/model.h"

namespace tt {

// Where a block keeps its activations (all but its output, which every block keeps: its successor's input).
//  kResident: in its own device buffers.
//  kRecompute (Note [recompute]): in one activation set shared by all recomputed blocks, rebuilt from the block's
//    input right before its backward. The same kernels on the same inputs give the same bits.
//  kSwap (Note [swap] in plan/schedule.cc): copied to host memory on the d2h stream right after the block's forward
//    and brought back on the h2d stream for its backward, through swap_prefetch + 1 device slots shared by the
//    swapped blocks.
// Every mix is bit-identical to keeping everything resident.
// Note [MLP half]: a resident or swapped block may also have its MLP half (fch, fch_gelu: 8 of its 15 C per token)
// recomputed: those two live in one set shared by such blocks, and the block's backward rebuilds them from ln2 with
// the forward's kernel (matmul_gelu_forward) before it uses them; the rest of the block (its attention half) stays
// resident or swaps. Swapped blocks then move only their attention half.
// Note [rebuilt norms]: a resident or swapped block may likewise have its LayerNorm outputs (ln1, ln2 and their
// statistics: 2 of its 15 C per token) rebuilt: they live in one set shared by such blocks, and the block's backward
// rebuilds them with layernorm_forward, ln1 from the block's input (which every block keeps) and ln2 from res2,
// before anything reads them (Model::rebuild_norms: the same bits). A swapped block then moves 5 C per token with its
// MLP half rebuilt (qkv, atty, res2), not 7: in the forward the copies out, not the kernels, bound a swapped block
// (docs/benchmarks/2026-11-30-h200x2-ooc-d4096-tight/), and two LayerNorms cost little next to moving their outputs.
// Note [rebuilt activation]: a resident or swapped block whose MLP half is kept may have only its activation's
// output (GPT-2's GELU output fch_gelu: 4 of its 15 C per token; the Llama family's SwiGLU output) rebuilt: it lives
// in one set shared by such blocks, and the block's backward rebuilds it from the pre-activation with an element-wise
// kernel (Model::rebuild_act) instead of rerunning the GEMM as the MLP half's rebuild does. So that the rebuild gives
// the forward's bits, such a block's forward runs its activation as that kernel too (Model::set_act_apart; GPT-2:
// matmul_forward then gelu_forward rather than the GELU in the GEMM's epilogue): on the CPU backend the same
// arithmetic as the fused op (the run is bit-identical to in-core), on a GPU a different rounding of the GELU (the
// fused epilogue rounds gelu of the f32 sum once; apart, the sum is rounded to bf16 first), so the run is
// bit-identical to in-core with the same kernels and within the tolerances of the fused run. At d4096 B8 T2048 it
// saves 15 of 16 blocks' 0.5 GiB fch_gelu, for two element-wise passes over fch a block.
// Note [managed activations] (issue 20, plan/schedule.cc):
//  kManaged: in its own set in managed memory (memory/um.h), which stays on the device: Unified Memory's pages,
//    placed by the plan's advice (Plan::um) and, with um.prefetch, on the device from set-up.
//  kManagedOffload: the same, but with um.prefetch the schedule moves the pages as swap moves its copies: to the host
//    after the block's forward, back ahead of its backward (swap_prefetch blocks ahead), and discards them after the
//    backward (dead until the next forward, so they never migrate for their contents). Without um.prefetch the
//    driver moves them on faults alone (default UM).
enum class ActPlacement { kResident, kRecompute, kSwap, kManaged, kManagedOffload };
constexpr int kNumActPlacements = 5;
const char* act_placement_name(ActPlacement p);
enum class StatePlacement { kResident, kHostStreamed };
// Where AdamW runs and keeps its moments and the fp32 master: on the device, or on the host (Note [master on host]
// in exec/optimizer.h).
enum class OptimizerPlacement { kDevice, kCpu };
const char* optimizer_placement_name(OptimizerPlacement p);
Result<OptimizerPlacement> parse_optimizer_placement(const std::string& s);
// The knob grad_dtype (Note [bf16 gradients] in exec/executor.h): auto gives bf16 block gradients where the compute is
// bf16 and the run takes them (apply_grad_dtype in exec/executor.h), f32 elsewhere.
enum class GradDtype { kAuto, kF32, kBF16 };

struct LayerPlan {
  ActPlacement activation = ActPlacement::kResident;
  // Note [MLP half]: the block's MLP half recomputed while the rest is `activation` (resident or swap). In JSON:
  // "activation": {"attention": "swap", "mlp": "recompute"}.
  bool mlp_recompute = false;
  // Note [rebuilt norms]: the block's LayerNorm outputs rebuilt in its backward while the rest is `activation`. In
  // JSON: "activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}.
  bool norms_recompute = false;
  // Note [rebuilt activation]: the block's activation output rebuilt in its backward (its MLP half otherwise kept). In
  // JSON: "activation": {"attention": "resident", "mlp": "resident", "act": "recompute"}.
  bool act_recompute = false;
  StatePlacement param = StatePlacement::kResident;
  StatePlacement grad = StatePlacement::kResident;
  StatePlacement optim_state = StatePlacement::kResident;
};

// Issue 20: Unified Memory's advice per kind of data, and whether the schedule moves managed pages itself
// (prefetches and discards: Note [managed activations] in plan/schedule.cc). The kinds: param, grad, optim_state,
// activation (blocks placed "managed") and activation_offload (blocks placed "managed_offload").
struct UmPolicy {
  memory::UmAdvice param, grad, optim_state, activation, activation_offload;
  bool prefetch = false;
  // With prefetch: offloaded activations are discarded once dead (after their backward, or an evaluation's forward);
  // false: moved to the host instead (a prefetch of dead pages: slower, but no discard, whose results on a GPU were
  // not always bit-identical: docs/benchmarks/2026-12-02-h200-um-race/). Note [managed activations].
  bool discard = true;
  // With prefetch, discard and the CPU optimizer's managed compute copy: after each segment's backward the pieces
  // wholly inside it are released instead of moved to the host (Note [managed optimizer exchange]). Off by default:
  // it moves fewer bytes to the host, but its gain in time is small and not consistent, and on some machines the
  // released pages came back through GPU page faults, which the default path has none of
  // (docs/benchmarks/2026-12-03-h200-um-exchange-release/). Ignored (and not in summary()) without all four; only
  // train steps release (Pass::kTrain: an update follows in the same pass).
  bool release_params = false;
  // The default advice, the fastest of those tried (docs/PLANS.md; docs/benchmarks/2026-12-02-h200-um-defaults/):
  // parameters, gradients, AdamW state and resident activations preferred on the device, parameters and gradients
  // mapped on both processors, offloaded activations mapped on the device.
  static UmPolicy advised();
  const memory::UmAdvice& advice(TensorClass cls, bool offload) const;
  bool operator==(const UmPolicy&) const = default;
};

struct Plan {
  std::string source;  // the shortcut, or the file it came from
  std::vector<LayerPlan> layers;
  int swap_prefetch = 1;  // swapped blocks brought back ahead of their backward; device slots = prefetch + 1
  int param_prefetch = 1;  // streamed parameter blocks uploaded ahead of their use; device slots = prefetch + 1
  OptimizerPlacement optimizer = OptimizerPlacement::kDevice;
  // Issue 20: whole-model state in managed memory (JSON "managed": ["param", "grad", "optim_state"]): the parameters
  // (and their compute copy), every gradient segment, AdamW's moments. Device optimizer only for now.
  bool managed_params = false, managed_grads = false, managed_optim = false;
  UmPolicy um;
  // Note [gradients in dead activations] (plan/schedule.h): a block's gradients may live in the next block's own
  // activation set, dead once that block's backward is done; and the head's tensors in blocks' gradient buffers
  // before their backward (Note [head in gradients] in exec/executor.h). JSON "grads_in_activations": false (or the
  // knob grads_in_activations) keeps every gradient segment and head tensor in a buffer of its own.
  bool grads_in_activations = true;
  // Note [bf16 gradients] (exec/executor.h): the blocks' gradient segments in bf16 (JSON "grad_dtype": "bf16", or
  // the knob grad_dtype), as autocast's weight gradients are; the embeddings' and the final norm's in f32.
  bool bf16_grads = false;
  bool grad_dtype_named = false;  // the JSON plan names grad_dtype: the knob's auto leaves it as the plan says
  const char* grad_dtype_name() const { return bf16_grads ? "bf16" : "f32"; }  // as the knob and JSON spell it
  // Note [host buffers in rings] (plan/schedule.h): with the CPU optimizer, the gradients' host copy and the staging
  // copy of the compute copy as two-slot rings each segment passes through after the backward (JSON "host_buffers":
  // "ring"), instead of a place for every parameter ("whole", the default).
  bool host_ring = false;
  // Note [optimizer split] (plan/schedule.h): with the CPU optimizer, the first device_optimizer_segments parameter
  // segments (segment 0 the embeddings, 1 + l block l: Note [gradient segments] in model/model.h) keep their fp32
  // master and AdamW moments on the device and are updated there; the others on the host. JSON
  // "device_optimizer_segments": K; 0 (the default): every segment on the host.
  int device_optimizer_segments = 0;

  // A shortcut (in-core, in-core-selective, recompute, swap-activations, swap-attention-recompute-mlp,
  // swap-attention-recompute-mlp-norms, offload-params, offload-all; Unified Memory: um, um-advised,
  // um-swap-activations) or a path to a JSON plan. in-core-selective: every block resident but its LayerNorm outputs
  // and its GELU output, rebuilt in the backward by element-wise kernels (Note [rebuilt norms], Note [rebuilt activation]).
  static Result<Plan> resolve(const std::string& name, int layers, int swap_slots);
  // default_prefetch: swap_prefetch when the JSON does not give it (from --swap-slots).
  static Result<Plan> from_json(const nlohmann::json& j, int layers, const std::string& source,
                                int default_prefetch = 1);
  nlohmann::json to_json() const;
  // Whether any layer streams its parameters, gradients or optimizer state (all need the CPU optimizer).
  bool needs_cpu_optimizer() const;
  // Why host_ring cannot be used with this plan (streamed or managed parameters or gradients read the whole host
  // copies, and the device optimizer has none), or "" when it can.
  std::string host_ring_refusal() const;
  bool cpu_optimizer() const { return optimizer == OptimizerPlacement::kCpu; }
  // Note [master in two halves] (core/bf16.h): with bf16 compute and AdamW on the device, the device's f32 master is
  // its bf16 compute copy and a 16-bit low half ("params.low"), not a buffer of its own.
  bool master_in_halves(DType compute) const { return compute == DType::kBF16 && !cpu_optimizer(); }
  // Segment s's AdamW runs on the host: the CPU optimizer, and s past the device segments (Note [optimizer split]).
  bool host_updates(int s) const { return cpu_optimizer() && s >= device_optimizer_segments; }
  // Why device_optimizer_segments > 0 cannot be used with this plan, or "" when it can (segments: the model's).
  std::string optimizer_split_refusal(int segments) const;
  // Whether anything lives in managed memory (issue 20).
  bool uses_managed() const;
  bool managed_block(int l) const {
    const ActPlacement a = activation(l);
    return a == ActPlacement::kManaged || a == ActPlacement::kManagedOffload;
  }
  // Block l's managed pages leave the device between its forward and its backward (um.prefetch and
  // managed_offload): Note [managed activations].
  bool offloaded(int l) const { return um.prefetch && activation(l) == ActPlacement::kManagedOffload; }

  // Per block, as the executor reads the plan.
  ActPlacement activation(int l) const { return layers[static_cast<size_t>(l)].activation; }
  // Note [MLP half], Note [rebuilt norms]: the part is rebuilt apart from the rest (never for a recomputed block,
  // which rebuilds everything).
  bool mlp_rebuilt(int l) const {
    return layers[static_cast<size_t>(l)].mlp_recompute && activation(l) != ActPlacement::kRecompute;
  }
  bool norms_rebuilt(int l) const {
    return layers[static_cast<size_t>(l)].norms_recompute && activation(l) != ActPlacement::kRecompute;
  }
  // Note [rebuilt activation]: only the activation output rebuilt (an MLP half rebuilt rebuilds it with the rest).
  bool act_rebuilt(int l) const {
    return layers[static_cast<size_t>(l)].act_recompute && !mlp_rebuilt(l) &&
           activation(l) != ActPlacement::kRecompute;
  }
  // The blocks whose forward runs the activation apart (Model::set_act_apart): those whose activation is rebuilt.
  std::vector<bool> act_apart() const;
  bool params_streamed(int l) const { return layers[static_cast<size_t>(l)].param == StatePlacement::kHostStreamed; }
  bool grads_streamed(int l) const { return layers[static_cast<size_t>(l)].grad == StatePlacement::kHostStreamed; }
  int count(ActPlacement p) const;
  // The parts (model/model.h BlockPart) block l keeps in its own set or swap slot: all but those it rebuilds.
  unsigned held_parts(int l) const;
  // What every swapped block moves (swapped blocks agree: from_json checks); kPartAll when none swaps.
  unsigned swapped_parts() const;
  int swap_slots() const { return swap_prefetch + 1; }
  int param_slots() const { return param_prefetch + 1; }
  // "swap 6, recompute 4, resident 2 (swap prefetch 1)"
  std::string summary() const;
};

}  // namespace tt
