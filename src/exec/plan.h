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
// moments and an fp32 master copy of all parameters in host memory (model/adamw.h). Per-layer host_streamed state is
// refused for now (not implemented yet), with a message saying so.
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
  StatePlacement param = StatePlacement::kResident;
  StatePlacement grad = StatePlacement::kResident;
  StatePlacement optim_state = StatePlacement::kResident;
};

struct Plan {
  std::string source;  // the shortcut, or the file it came from
  std::vector<LayerPlan> layers;
  int swap_prefetch = 1;  // swapped blocks brought back ahead of their backward; device slots = prefetch + 1
  std::string optimizer = "device";

  // A shortcut (in-core, recompute, swap-activations, offload-params, offload-all) or a path to a JSON plan.
  static Result<Plan> resolve(const std::string& name, int layers, int swap_slots);
  // default_prefetch: swap_prefetch when the JSON does not give it (from --swap-slots).
  static Result<Plan> from_json(const nlohmann::json& j, int layers, const std::string& source,
                                int default_prefetch = 1);
  nlohmann::json to_json() const;
  GptOptions model_options() const;
  // "swap 6, recompute 4, resident 2 (swap prefetch 1)"
  std::string summary() const;
};

}  // namespace tt
