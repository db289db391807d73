#include "plan/plan.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/config.h"

namespace tt {

const char* act_placement_name(ActPlacement p) {
  switch (p) {
    case ActPlacement::kResident: return "resident";
    case ActPlacement::kRecompute: return "recompute";
    case ActPlacement::kSwap: return "swap";
    case ActPlacement::kManaged: return "managed";
    case ActPlacement::kManagedOffload: return "managed_offload";
  }
  return "?";
}

const char* optimizer_placement_name(OptimizerPlacement p) { return p == OptimizerPlacement::kCpu ? "cpu" : "device"; }

Result<OptimizerPlacement> parse_optimizer_placement(const std::string& s) {
  if (s == "device") return OptimizerPlacement::kDevice;
  if (s == "cpu") return OptimizerPlacement::kCpu;
  return make_status(StatusCode::kInvalidArgument, "optimizer must be \"device\" or \"cpu\", got '%s'", s.c_str());
}

namespace {

using nlohmann::json;

Result<ActPlacement> parse_activation(const std::string& s, const std::string& where) {
  if (s == "resident") return ActPlacement::kResident;
  if (s == "swap") return ActPlacement::kSwap;
  if (s == "recompute") return ActPlacement::kRecompute;
  if (s == "managed") return ActPlacement::kManaged;
  if (s == "managed_offload") return ActPlacement::kManagedOffload;
  if (s == "host_streamed")
    return make_status(StatusCode::kInvalidArgument,
                       "%s: activations cannot be host_streamed (that is for parameters, gradients and optimizer "
                       "state); use swap",
                       where.c_str());
  return make_status(StatusCode::kInvalidArgument,
                     "%s: unknown activation placement '%s' (resident, swap, recompute, managed or managed_offload)", where.c_str(), s.c_str());
}

Result<StatePlacement> parse_state(const std::string& s, const std::string& where) {
  if (s == "resident") return StatePlacement::kResident;
  if (s == "host_streamed") return StatePlacement::kHostStreamed;
  return make_status(StatusCode::kInvalidArgument, "%s: unknown placement '%s' (resident or host_streamed)",
                     where.c_str(), s.c_str());
}

const char* state_name(StatePlacement p) { return p == StatePlacement::kHostStreamed ? "host_streamed" : "resident"; }

// Applies the keys of one layer object onto `lp`.
Status apply_layer(const json& o, LayerPlan* lp, const std::string& where) {
  TT_RETURN_IF(!o.is_object(), kInvalidArgument, "%s: expected an object like {\"activation\": \"swap\"}",
               where.c_str());
  for (const auto& [key, value] : o.items()) {
    const std::string at = where + "." + key;
    if (key == "activation" && value.is_object()) {
      // Note [MLP half], Note [rebuilt norms], Note [rebuilt activation]: {"attention": P, "mlp": Q, "norms": R,
      // "act": G}, where Q is P or "recompute"; R (optional; P when absent) is P or "recompute"; G (optional; Q when
      // absent) is Q or "recompute". "gelu" is an older name of "act".
      constexpr const char* kParts[4] = {"attention", "mlp", "norms", "act"};
      constexpr const char* kWhat[4] = {"attention half", "MLP half", "normalisations' outputs (norms)",
                                        "MLP activation's output (act)"};
      ActPlacement parts[4] = {ActPlacement::kResident, ActPlacement::kResident, ActPlacement::kResident,
                               ActPlacement::kResident};
      bool given[4] = {false, false, false, false};
      for (const auto& [half, hv] : value.items()) {
        const std::string hat = at + "." + half;
        const int i = half == "gelu" ? 3 : static_cast<int>(std::find(kParts, kParts + 4, half) - kParts);
        TT_RETURN_IF(i == 4, kInvalidArgument, "%s: unknown part '%s' (attention, mlp, norms, act)", at.c_str(),
                     half.c_str());
        TT_RETURN_IF(!hv.is_string(), kInvalidArgument, "%s: expected a string", hat.c_str());
        TT_ASSIGN_OR_RETURN(parts[i], parse_activation(hv.get<std::string>(), hat));
        given[i] = true;
      }
      TT_RETURN_IF(!given[0] || !given[1], kInvalidArgument,
                   "%s: give both halves: {\"attention\": ..., \"mlp\": ...} (and optionally \"norms\", "
                   "\"act\")",
                   at.c_str());
      if (!given[2]) parts[2] = parts[0];
      if (!given[3]) parts[3] = parts[1];
      if (parts[0] == ActPlacement::kRecompute) {
        TT_RETURN_IF(parts[1] != ActPlacement::kRecompute || parts[2] != ActPlacement::kRecompute ||
                         parts[3] != ActPlacement::kRecompute,
                     kInvalidArgument, "%s: a recomputed attention half rebuilds the whole block: use \"recompute\"",
                     at.c_str());
      }
      for (int i : {1, 2, 3}) {
        const int from = i == 3 ? 1 : 0;  // the activation's output goes with the MLP half, the rest with the attention half
        TT_RETURN_IF(parts[i] != parts[from] && parts[i] != ActPlacement::kRecompute, kInvalidArgument,
                     "%s: the %s can be placed apart from the %s only by recomputing %s (%s %s, %s %s); or place "
                     "them alike",
                     at.c_str(), kWhat[i], kWhat[from], i == 2 ? "them" : "it", kParts[from],
                     act_placement_name(parts[from]), kParts[i], act_placement_name(parts[i]));
      }
      lp->activation = parts[0];
      lp->mlp_recompute = parts[0] != ActPlacement::kRecompute && parts[1] == ActPlacement::kRecompute;
      lp->norms_recompute = parts[0] != ActPlacement::kRecompute && parts[2] == ActPlacement::kRecompute;
      lp->act_recompute = lp->mlp_recompute || (parts[0] != ActPlacement::kRecompute &&
                                                 parts[3] == ActPlacement::kRecompute);
      continue;
    }
    TT_RETURN_IF(!value.is_string(), kInvalidArgument, "%s: expected a string", at.c_str());
    const std::string v = value.get<std::string>();
    if (key == "activation") {
      TT_ASSIGN_OR_RETURN(lp->activation, parse_activation(v, at));
      lp->mlp_recompute = false;
      lp->norms_recompute = false;
      lp->act_recompute = false;
    } else if (key == "param") {
      TT_ASSIGN_OR_RETURN(lp->param, parse_state(v, at));
    } else if (key == "grad") {
      TT_ASSIGN_OR_RETURN(lp->grad, parse_state(v, at));
    } else if (key == "optim_state") {
      TT_ASSIGN_OR_RETURN(lp->optim_state, parse_state(v, at));
    } else {
      return make_status(StatusCode::kInvalidArgument,
                         "%s: unknown tensor class '%s' (activation, param, grad, optim_state)", where.c_str(),
                         key.c_str());
    }
  }
  return Status::ok();
}

// A layer number: 1 to 6 decimal digits, nothing else.
bool parse_layer_number(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoi(s);
  return true;
}

// "3" or "2-5" (inclusive) within [0, layers).
Status parse_range(const std::string& key, int layers, int* first, int* last) {
  const size_t dash = key.find('-');
  const bool ok = parse_layer_number(key.substr(0, dash), first) &&
                  (dash == std::string::npos ? (*last = *first, true) : parse_layer_number(key.substr(dash + 1), last));
  TT_RETURN_IF(!ok, kInvalidArgument, "plan: layers: '%s' is not a layer number or a range like 2-5", key.c_str());
  TT_RETURN_IF(*first < 0 || *last >= layers || *first > *last, kInvalidArgument,
               "plan: layers: '%s' is outside the model's layers 0-%d", key.c_str(), layers - 1);
  return Status::ok();
}

// An integer in [lo, hi], without the silent wrap-around of get<int>() on larger values.
bool int_in(const json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {  // also larger than any int64_t
    const uint64_t x = v.get<uint64_t>();
    return x <= static_cast<uint64_t>(hi) && static_cast<int64_t>(x) >= lo;
  }
  if (!v.is_number_integer()) return false;
  const int64_t x = v.get<int64_t>();
  return x >= lo && x <= hi;
}

// {"preferred": "device"|"host"|"none", "accessed_by": ["device", "host"], "read_mostly": bool}
Result<memory::UmAdvice> parse_advice(const json& o, const std::string& at) {
  TT_RETURN_IF(!o.is_object(), kInvalidArgument,
               "%s: expected an object like {\"preferred\": \"device\", \"accessed_by\": [\"host\"]}", at.c_str());
  memory::UmAdvice a;
  for (const auto& [key, v] : o.items()) {
    if (key == "preferred") {
      TT_RETURN_IF(!v.is_string() || (v != "device" && v != "host" && v != "none"), kInvalidArgument,
                   "%s.preferred: \"device\", \"host\" or \"none\", got %s", at.c_str(), v.dump().c_str());
      a.preferred = v == "device" ? memory::UmPlace::kDevice : v == "host" ? memory::UmPlace::kHost : memory::UmPlace::kNone;
    } else if (key == "accessed_by") {
      TT_RETURN_IF(!v.is_array(), kInvalidArgument, "%s.accessed_by: a list of \"device\" and \"host\"", at.c_str());
      for (const json& x : v) {
        TT_RETURN_IF(!x.is_string() || (x != "device" && x != "host"), kInvalidArgument,
                     "%s.accessed_by: \"device\" or \"host\", got %s", at.c_str(), x.dump().c_str());
        (x == "device" ? a.accessed_by_device : a.accessed_by_host) = true;
      }
    } else if (key == "read_mostly") {
      TT_RETURN_IF(!v.is_boolean(), kInvalidArgument, "%s.read_mostly: true or false", at.c_str());
      a.read_mostly = v.get<bool>();
    } else {
      return make_status(StatusCode::kInvalidArgument, "%s: unknown key '%s' (preferred, accessed_by, read_mostly)",
                         at.c_str(), key.c_str());
    }
  }
  return a;
}

json advice_json(const memory::UmAdvice& a) {
  json by = json::array();
  if (a.accessed_by_device) by.push_back("device");
  if (a.accessed_by_host) by.push_back("host");
  return {{"preferred", memory::um_place_name(a.preferred)}, {"accessed_by", by}, {"read_mostly", a.read_mostly}};
}

// "um": {"prefetch": bool, "discard": bool, "release_params": bool,
//        "advice": "none" | "default" | {"param": {...}, "grad": ..., "optim_state": ...,
//        "activation": ..., "activation_offload": ...}}
Status parse_um(const json& o, UmPolicy* um, const std::string& at) {
  TT_RETURN_IF(!o.is_object(), kInvalidArgument, "%s: expected an object like {\"prefetch\": true, \"advice\": \"default\"}",
               at.c_str());
  for (const auto& [key, v] : o.items()) {
    if (key == "prefetch") {
      TT_RETURN_IF(!v.is_boolean(), kInvalidArgument, "%s.prefetch: true or false", at.c_str());
      um->prefetch = v.get<bool>();
    } else if (key == "discard") {
      TT_RETURN_IF(!v.is_boolean(), kInvalidArgument, "%s.discard: true or false", at.c_str());
      um->discard = v.get<bool>();
    } else if (key == "release_params") {
      TT_RETURN_IF(!v.is_boolean(), kInvalidArgument, "%s.release_params: true or false", at.c_str());
      um->release_params = v.get<bool>();
    } else if (key == "advice") {
      if (v.is_string()) {
        TT_RETURN_IF(v != "none" && v != "default", kInvalidArgument,
                     "%s.advice: \"none\", \"default\" or an object per kind of data", at.c_str());
        const bool prefetch = um->prefetch, discard = um->discard, release = um->release_params;
        *um = v == "default" ? UmPolicy::advised() : UmPolicy{};
        um->prefetch = prefetch;
        um->discard = discard;
        um->release_params = release;
        continue;
      }
      TT_RETURN_IF(!v.is_object(), kInvalidArgument, "%s.advice: \"none\", \"default\" or an object", at.c_str());
      for (const auto& [kind, a] : v.items()) {
        memory::UmAdvice* dst = kind == "param"                ? &um->param
                                : kind == "grad"               ? &um->grad
                                : kind == "optim_state"        ? &um->optim_state
                                : kind == "activation"         ? &um->activation
                                : kind == "activation_offload" ? &um->activation_offload
                                                               : nullptr;
        TT_RETURN_IF(dst == nullptr, kInvalidArgument,
                     "%s.advice: unknown kind '%s' (param, grad, optim_state, activation, activation_offload)",
                     at.c_str(), kind.c_str());
        TT_ASSIGN_OR_RETURN(*dst, parse_advice(a, at + ".advice." + kind));
      }
    } else if (key != "comment") {
      return make_status(StatusCode::kInvalidArgument, "%s: unknown key '%s' (prefetch, discard, release_params, advice)", at.c_str(),
                         key.c_str());
    }
  }
  return Status::ok();
}

}  // namespace

Result<Plan> Plan::from_json(const json& j, int layers, const std::string& source, int default_prefetch) {
  TT_RETURN_IF(!j.is_object(), kInvalidArgument, "plan %s: expected a JSON object", source.c_str());
  Plan p;
  p.source = source;
  p.swap_prefetch = default_prefetch;
  LayerPlan def;
  for (const auto& [key, value] : j.items()) {
    if (key == "version") {
      TT_RETURN_IF(!int_in(value, 1, 1), kInvalidArgument, "plan %s: version %s is not supported (1 is)",
                   source.c_str(), value.dump().c_str());
    } else if (key == "optimizer") {
      TT_RETURN_IF(!value.is_string() || (value != "device" && value != "cpu"), kInvalidArgument,
                   "plan %s: optimizer must be \"device\" or \"cpu\", got %s", source.c_str(), value.dump().c_str());
      p.optimizer = parse_optimizer_placement(value.get<std::string>()).value();
    } else if (key == "param_prefetch") {
      TT_RETURN_IF(!int_in(value, 1, 1023), kInvalidArgument,
                   "plan %s: param_prefetch must be an integer in 1..1023, got %s", source.c_str(),
                   value.dump().c_str());
      p.param_prefetch = value.get<int>();
    } else if (key == "swap_prefetch") {
      TT_RETURN_IF(!int_in(value, 1, 1023), kInvalidArgument,
                   "plan %s: swap_prefetch must be an integer in 1..1023, got %s", source.c_str(),
                   value.dump().c_str());
      p.swap_prefetch = value.get<int>();
    } else if (key == "default") {
      TT_TRY(apply_layer(value, &def, "plan " + source + ": default"));
    } else if (key == "managed") {
      TT_RETURN_IF(!value.is_array(), kInvalidArgument,
                   "plan %s: managed: a list of the state classes in managed memory (param, grad, optim_state)",
                   source.c_str());
      for (const json& c : value) {
        TT_RETURN_IF(!c.is_string() || (c != "param" && c != "grad" && c != "optim_state"), kInvalidArgument,
                     "plan %s: managed: param, grad or optim_state, got %s (activations are placed per layer: "
                     "\"activation\": \"managed\")",
                     source.c_str(), c.dump().c_str());
        (c == "param" ? p.managed_params : c == "grad" ? p.managed_grads : p.managed_optim) = true;
      }
    } else if (key == "um") {
      TT_TRY(parse_um(value, &p.um, "plan " + source + ": um"));
    } else if (key == "grads_in_activations") {
      TT_RETURN_IF(!value.is_boolean(), kInvalidArgument, "plan %s: grads_in_activations must be true or false, got %s",
                   source.c_str(), value.dump().c_str());
      p.grads_in_activations = value.get<bool>();
    } else if (key == "grad_dtype") {
      TT_RETURN_IF(!value.is_string() || (value != "f32" && value != "bf16"), kInvalidArgument,
                   "plan %s: grad_dtype must be \"f32\" or \"bf16\", got %s", source.c_str(), value.dump().c_str());
      p.bf16_grads = value == "bf16";
      p.grad_dtype_named = true;
    } else if (key == "host_buffers") {
      TT_RETURN_IF(!value.is_string() || (value != "whole" && value != "ring"), kInvalidArgument,
                   "plan %s: host_buffers must be \"whole\" or \"ring\", got %s", source.c_str(),
                   value.dump().c_str());
      p.host_ring = value == "ring";
    } else if (key == "device_optimizer_segments") {
      TT_RETURN_IF(!int_in(value, 0, layers + 1), kInvalidArgument,
                   "plan %s: device_optimizer_segments must be an integer in 0..%d (the model has %d segments; all "
                   "of them on the device is \"optimizer\": \"device\"), got %s",
                   source.c_str(), layers + 1, layers + 2, value.dump().c_str());
      p.device_optimizer_segments = value.get<int>();
    } else if (key != "layers" && key != "comment") {
      return make_status(StatusCode::kInvalidArgument,
                         "plan %s: unknown key '%s' (version, optimizer, swap_prefetch, param_prefetch, managed, um, "
                         "grads_in_activations, grad_dtype, host_buffers, device_optimizer_segments, default, layers, "
                         "comment)",
                         source.c_str(), key.c_str());
    }
  }
  p.layers.assign(static_cast<size_t>(layers), def);
  if (j.contains("layers")) {
    const json& ls = j.at("layers");
    if (ls.is_array()) {
      TT_RETURN_IF(static_cast<int>(ls.size()) != layers, kInvalidArgument,
                   "plan %s: layers has %zu entries but the model has %d layers", source.c_str(), ls.size(), layers);
      for (int l = 0; l < layers; ++l)
        TT_TRY(apply_layer(ls[static_cast<size_t>(l)], &p.layers[static_cast<size_t>(l)],
                           "plan " + source + ": layers[" + std::to_string(l) + "]"));
    } else if (ls.is_object()) {
      std::set<int> seen;
      for (const auto& [key, value] : ls.items()) {
        int first = 0, last = 0;
        TT_TRY(parse_range(key, layers, &first, &last));
        for (int l = first; l <= last; ++l) {
          TT_RETURN_IF(!seen.insert(l).second, kInvalidArgument, "plan %s: layer %d is given twice", source.c_str(),
                       l);
          TT_TRY(apply_layer(value, &p.layers[static_cast<size_t>(l)], "plan " + source + ": layers." + key));
        }
      }
    } else {
      return make_status(StatusCode::kInvalidArgument, "plan %s: layers must be an array or an object",
                         source.c_str());
    }
  }
  // Note [MLP half], Note [rebuilt norms], Note [rebuilt activation]: swapped blocks share slots of one size, so they all
  // swap the same parts.
  int first_swap = -1;
  for (int l = 0; l < layers; ++l) {
    if (p.activation(l) != ActPlacement::kSwap) continue;
    if (first_swap < 0) {
      first_swap = l;
      continue;
    }
    TT_RETURN_IF(p.held_parts(l) != p.held_parts(first_swap), kInvalidArgument,
                 "plan %s: swapped layers %d and %d differ in whether their MLP half, their activation output or "
                 "their norm outputs are recomputed; swapped layers share device slots, so all of them must swap the "
                 "same parts",
                 source.c_str(), first_swap, l);
  }
  // Host-streamed parameters, gradients and optimizer state all need the CPU optimizer, which the trainer checks
  // once --optimizer has had its say (Plan::needs_cpu_optimizer).
  return p;
}

// The default table, the fastest of the variants tried (docs/benchmarks/2026-12-02-h200-um-defaults/): parameters
// and gradients preferred on the device and mapped on both processors (with only the parameters mapped on the
// device, the CPU optimizer's exchange was slower and brought GPU page faults, which this table has none of);
// offloaded activations mapped on the device (never the slowest of the three variants tried, but within the
// run-to-run variation of no advice).
UmPolicy UmPolicy::advised() {
  UmPolicy u;
  u.param = {.preferred = memory::UmPlace::kDevice, .accessed_by_device = true, .accessed_by_host = true};
  u.grad = {.preferred = memory::UmPlace::kDevice, .accessed_by_device = true, .accessed_by_host = true};
  u.optim_state = {.preferred = memory::UmPlace::kDevice};
  u.activation = {.preferred = memory::UmPlace::kDevice};
  u.activation_offload = {.accessed_by_device = true};
  u.prefetch = true;
  return u;
}

const memory::UmAdvice& UmPolicy::advice(TensorClass cls, bool offload) const {
  switch (cls) {
    case TensorClass::kParam: return param;
    case TensorClass::kGrad: return grad;
    case TensorClass::kOptimState: return optim_state;
    default: return offload ? activation_offload : activation;
  }
}

std::string Plan::host_ring_refusal() const {
  if (!cpu_optimizer()) return "host buffers in rings are the CPU optimizer's (the device optimizer keeps none)";
  if (managed_params || managed_grads)
    return "managed parameters or gradients are exchanged where they are (Note [managed optimizer exchange])";
  for (int l = 0; l < static_cast<int>(layers.size()); ++l)
    if (params_streamed(l) || grads_streamed(l))
      return "block " + std::to_string(l) +
             " streams its parameters or gradients, which go through the whole host copies every pass";
  return "";
}

std::string Plan::optimizer_split_refusal(int segments) const {
  if (!cpu_optimizer()) return "it splits the CPU optimizer (the device optimizer updates every segment on the device)";
  if (device_optimizer_segments >= segments)
    return "all " + std::to_string(segments) + " segments on the device is the device optimizer (--optimizer device)";
  if (uses_managed()) return "managed memory is not built with it";
  for (int l = 0; l < static_cast<int>(layers.size()); ++l)
    if (params_streamed(l) || grads_streamed(l) || layers[static_cast<size_t>(l)].optim_state == StatePlacement::kHostStreamed)
      return "block " + std::to_string(l) + " streams its parameters, gradients or optimizer state (not built with it)";
  return "";
}

bool Plan::uses_managed() const {
  if (managed_params || managed_grads || managed_optim) return true;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l)
    if (managed_block(l)) return true;
  return false;
}

bool Plan::needs_cpu_optimizer() const {
  for (const LayerPlan& lp : layers)
    if (lp.param == StatePlacement::kHostStreamed || lp.grad == StatePlacement::kHostStreamed ||
        lp.optim_state == StatePlacement::kHostStreamed)
      return true;
  return false;
}

Result<Plan> Plan::resolve(const std::string& name, int layers, int swap_slots) {
  const int prefetch = swap_slots - 1;
  auto all = [&](ActPlacement a) {
    Plan p;
    p.source = name;
    p.layers.assign(static_cast<size_t>(layers), LayerPlan{a});
    p.swap_prefetch = prefetch;
    return p;
  };
  if (name == "in-core") return all(ActPlacement::kResident);
  if (name == "in-core-selective") {
    Plan p = all(ActPlacement::kResident);
    for (LayerPlan& lp : p.layers) lp.norms_recompute = lp.act_recompute = true;
    return p;
  }
  if (name == "recompute") return all(ActPlacement::kRecompute);
  if (name == "swap-activations") return all(ActPlacement::kSwap);
  if (name == "swap-attention-recompute-mlp" || name == "swap-attention-recompute-mlp-norms") {
    Plan p = all(ActPlacement::kSwap);
    for (LayerPlan& lp : p.layers) {
      lp.mlp_recompute = true;
      lp.norms_recompute = name == "swap-attention-recompute-mlp-norms";
    }
    return p;
  }
  if (name == "offload-params" || name == "offload-all") {
    // Every block's parameters and gradients streamed through device slots, AdamW and the master on the host; with
    // offload-all the activations are swapped to host memory too.
    Plan p = all(name == "offload-all" ? ActPlacement::kSwap : ActPlacement::kResident);
    for (LayerPlan& lp : p.layers) lp.param = lp.grad = lp.optim_state = StatePlacement::kHostStreamed;
    p.optimizer = OptimizerPlacement::kCpu;
    return p;
  }
  if (name == "um" || name == "um-advised" || name == "um-swap-activations") {
    // Issue 20. um: every block's activations and all model state in managed memory, no advice, no prefetch (what
    // default UM gives); um-advised: the same with the advice table and the schedule's prefetches; um-swap-activations:
    // swap-activations through managed memory (prefetches and discards instead of copies), model state resident.
    const bool swap = name == "um-swap-activations";
    Plan p = all(swap ? ActPlacement::kManagedOffload : ActPlacement::kManaged);
    p.managed_params = p.managed_grads = p.managed_optim = !swap;
    if (name != "um") p.um = UmPolicy::advised();
    return p;
  }
  if (Status s = require_regular_file(name, "--plan"); !s.is_ok() && s.code() != StatusCode::kNotFound) return s;
  std::ifstream f(name);
  TT_RETURN_IF(!f, kInvalidArgument,
               "--plan %s: not a plan name (in-core, in-core-selective, recompute, swap-activations, "
               "swap-attention-recompute-mlp, "
               "swap-attention-recompute-mlp-norms, offload-params, offload-all, um, um-advised, "
               "um-swap-activations) nor a readable JSON file",
               name.c_str());
  std::stringstream text;
  text << f.rdbuf();
  TT_ASSIGN_OR_RETURN(json j, parse_json_unique_keys(text.str(), "plan " + name));
  // --swap-slots gives the prefetch distance unless the file names one.
  return from_json(j, layers, name, prefetch);
}

json Plan::to_json() const {
  json ls = json::array();
  for (const LayerPlan& lp : layers) {
    json act = act_placement_name(lp.activation);
    if (lp.activation != ActPlacement::kRecompute && (lp.mlp_recompute || lp.norms_recompute || lp.act_recompute)) {
      act = {{"attention", act_placement_name(lp.activation)},
             {"mlp", lp.mlp_recompute ? "recompute" : act_placement_name(lp.activation)}};
      if (lp.norms_recompute) act["norms"] = "recompute";
      if (lp.act_recompute && !lp.mlp_recompute) act["act"] = "recompute";
    }
    ls.push_back({{"activation", act},
                  {"param", state_name(lp.param)},
                  {"grad", state_name(lp.grad)},
                  {"optim_state", state_name(lp.optim_state)}});
  }
  json j = {{"version", 1},         {"optimizer", optimizer_placement_name(optimizer)}, {"swap_prefetch", swap_prefetch},
            {"param_prefetch", param_prefetch}, {"layers", ls}};
  if (!grads_in_activations) j["grads_in_activations"] = false;
  // (Only where the plan names it: a type auto resolved is the run's, not the plan's; metrics say it apart.)
  if (grad_dtype_named) j["grad_dtype"] = grad_dtype_name();
  if (host_ring) j["host_buffers"] = "ring";
  if (device_optimizer_segments > 0) j["device_optimizer_segments"] = device_optimizer_segments;
  if (managed_params || managed_grads || managed_optim) {
    json m = json::array();
    if (managed_params) m.push_back("param");
    if (managed_grads) m.push_back("grad");
    if (managed_optim) m.push_back("optim_state");
    j["managed"] = m;
  }
  if (uses_managed() || !(um == UmPolicy{}))
    j["um"] = {{"prefetch", um.prefetch},
               {"discard", um.discard},
               {"release_params", um.release_params},
               {"advice",
                {{"param", advice_json(um.param)},
                 {"grad", advice_json(um.grad)},
                 {"optim_state", advice_json(um.optim_state)},
                 {"activation", advice_json(um.activation)},
                 {"activation_offload", advice_json(um.activation_offload)}}}};
  return j;
}

int Plan::count(ActPlacement p) const {
  int n = 0;
  for (const LayerPlan& lp : layers) n += lp.activation == p ? 1 : 0;
  return n;
}

unsigned Plan::held_parts(int l) const {
  return kPartAll & ~(mlp_rebuilt(l) ? unsigned(kPartMlp) : 0u) & ~(norms_rebuilt(l) ? unsigned(kPartNorms) : 0u) &
         ~(act_rebuilt(l) ? unsigned(kPartAct) : 0u);
}

std::vector<bool> Plan::act_apart() const {
  std::vector<bool> r(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) r[l] = act_rebuilt(static_cast<int>(l));
  return r;
}

unsigned Plan::swapped_parts() const {
  for (int l = 0; l < static_cast<int>(layers.size()); ++l)
    if (activation(l) == ActPlacement::kSwap) return held_parts(l);
  return kPartAll;
}

std::string Plan::summary() const {
  int n[kNumActPlacements] = {};
  for (const LayerPlan& lp : layers) ++n[static_cast<int>(lp.activation)];
  std::string s;
  for (ActPlacement a : {ActPlacement::kSwap, ActPlacement::kManagedOffload, ActPlacement::kManaged,
                         ActPlacement::kRecompute, ActPlacement::kResident}) {
    const int c = n[static_cast<int>(a)];
    if (c == 0) continue;
    if (!s.empty()) s += ", ";
    s += std::string(act_placement_name(a)) + " " + std::to_string(c);
  }
  if (n[static_cast<int>(ActPlacement::kSwap)] > 0) s += " (swap prefetch " + std::to_string(swap_prefetch) + ")";
  int mlp = 0;
  for (const LayerPlan& lp : layers) mlp += lp.mlp_recompute && lp.activation != ActPlacement::kRecompute ? 1 : 0;
  if (mlp > 0) s += "; the MLP half of " + std::to_string(mlp) + " of them recomputed";
  int norms = 0;
  for (const LayerPlan& lp : layers) norms += lp.norms_recompute && lp.activation != ActPlacement::kRecompute ? 1 : 0;
  if (norms > 0) s += "; the norm outputs of " + std::to_string(norms) + " rebuilt";
  int act = 0;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) act += act_rebuilt(l) ? 1 : 0;
  if (act > 0) s += "; the activation output of " + std::to_string(act) + " rebuilt";
  int grads = 0, params = 0;
  for (const LayerPlan& lp : layers) {
    grads += lp.grad == StatePlacement::kHostStreamed ? 1 : 0;
    params += lp.param == StatePlacement::kHostStreamed ? 1 : 0;
  }
  if (params > 0)
    s += "; parameters of " + std::to_string(params) + " blocks streamed from the host (param prefetch " +
         std::to_string(param_prefetch) + ")";
  if (grads > 0) s += "; gradients of " + std::to_string(grads) + " blocks streamed to the host";
  if (managed_params || managed_grads || managed_optim) {
    std::string m;
    for (auto [on, n] : {std::pair{managed_params, "parameters"}, {managed_grads, "gradients"},
                         {managed_optim, "AdamW state"}})
      if (on) m += (m.empty() ? "" : ", ") + std::string(n);
    s += "; " + m + " in managed memory";
  }
  if (uses_managed()) {
    const bool advised = um.param.any() || um.grad.any() || um.optim_state.any() || um.activation.any() ||
                         um.activation_offload.any();
    s += std::string("; Unified Memory ") + (advised ? "advised" : "without advice") +
         (um.prefetch ? ", pages moved by the schedule" : ", pages moved on faults");
    if (um.prefetch && um.discard && um.release_params && managed_params && cpu_optimizer())
      s += ", the compute copy's whole pieces released after each segment's backward in training steps";
  }
  const bool managed_state = managed_params || managed_grads || managed_optim;
  if (optimizer != OptimizerPlacement::kCpu)
    return source + ": activations " + s + (managed_state ? "; optimizer on device" : "; model state resident, optimizer on device");
  const bool some = params > 0 || grads > 0;
  return source + ": activations " + s + (some ? "; the rest of the parameters and gradients resident" :
                                                 "; parameters and gradients resident") +
         ", AdamW state and fp32 master on the host (CPU optimizer" +
         (host_ring ? ", gradients and compute copy through host rings" : "") +
         (device_optimizer_segments > 0
              ? "; the first " + std::to_string(device_optimizer_segments) + " segments' on the device)"
              : ")");
}

}  // namespace tt
