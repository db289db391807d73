// exec/plan: where every tensor class of every layer lives during training, and where the optimizer runs: the Plan
// of DESIGN.md, from a CLI shortcut or a JSON file, validated before anything is allocated.
//
//   TT_ASSIGN_OR_RETURN(Plan plan, Plan::resolve("swap-activations", cfg.model.layers, /*swap_slots=*/2));
//   TT_ASSIGN_OR_RETURN(Plan plan, Plan::resolve("plans/mix.json", cfg.model.layers, 2));
//   GptOptions o = plan.model_options();
//
// JSON (docs/PLANS.md):
//   {"version": 1, "optimizer": "device", "swap_prefetch": 1,
//    "default": {"activation": "swap"},
//    "layers": {"0-3": {"activation": "recompute"}, "11": {"activation": "resident"}}}
// "layers" may instead be an array with one object per layer. Per layer and class: "activation" is resident, swap or
// recompute; "param", "grad" and "optim_state" are resident or host_streamed; "optimizer": "cpu" keeps the AdamW
// moments and the fp32 master of all parameters in host memory (model/adamw.h), and every host_streamed class needs
// it. A host_streamed "param" is uploaded into one of param_prefetch + 1 device slots ahead of each use (Note
// [streamed parameters] in model/gpt.h); a host_streamed "grad" leaves the device right after its backward;
// a host_streamed "optim_state" asks for the CPU optimizer, which keeps every layer's state on the host (there is
// no per-layer split of the optimizer).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "model/gpt.h"

namespace tt {

enum class StatePlacement { kResident, kHostStreamed };

struct LayerPlan {
  ActPlacement activation = ActPlacement::kResident;
  // Note [MLP half]: the block's MLP half recomputed while the rest is `activation` (resident or swap). In JSON:
  // "activation": {"attention": "swap", "mlp": "recompute"}.
  bool mlp_recompute = false;
  // Note [rebuilt norms]: the block's LayerNorm outputs rebuilt in its backward while the rest is `activation`. In
  // JSON: "activation": {"attention": "swap", "mlp": "recompute", "norms": "recompute"}.
  bool norms_recompute = false;
  StatePlacement param = StatePlacement::kResident;
  StatePlacement grad = StatePlacement::kResident;
  StatePlacement optim_state = StatePlacement::kResident;
};

struct Plan {
  std::string source;  // the shortcut, or the file it came from
  std::vector<LayerPlan> layers;
  int swap_prefetch = 1;  // swapped blocks brought back ahead of their backward; device slots = prefetch + 1
  int param_prefetch = 1;  // streamed parameter blocks uploaded ahead of their use; device slots = prefetch + 1
  std::string optimizer = "device";

  // A shortcut (in-core, recompute, swap-activations, swap-attention-recompute-mlp,
  // swap-attention-recompute-mlp-norms, offload-params, offload-all) or a path to a JSON plan.
  static Result<Plan> resolve(const std::string& name, int layers, int swap_slots);
  // default_prefetch: swap_prefetch when the JSON does not give it (from --swap-slots).
  static Result<Plan> from_json(const nlohmann::json& j, int layers, const std::string& source,
                                int default_prefetch = 1);
  nlohmann::json to_json() const;
  GptOptions model_options() const;
  // Whether any layer streams its parameters, gradients or optimizer state (all need the CPU optimizer).
  bool needs_cpu_optimizer() const;
  // "swap 6, recompute 4, resident 2 (swap prefetch 1)"
  std::string summary() const;
};

}  // namespace tt
