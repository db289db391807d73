// Fuzz target: a JSON plan (--plan FILE: plan/plan) for a model of 1-16 layers (from the input's first byte). An
// accepted plan must survive its own JSON: to_json -> from_json gives the same plan.
#include "plan/plan.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int layers = 1 + data[0] % 16;
  const nlohmann::json j = tt::fuzz::parse_json(data + 1, size - 1);
  if (j.is_discarded()) return 0;
  auto plan = tt::Plan::from_json(j, layers, "fuzz.json", 1);
  if (!tt::fuzz::accepted(plan)) return 0;
  TT_FUZZ_REQUIRE(plan.value().layers.size() == static_cast<size_t>(layers));
  const nlohmann::json out = plan.value().to_json();
  auto again = tt::Plan::from_json(out, layers, "fuzz.json", 1);
  TT_FUZZ_REQUIRE(again.is_ok());
  TT_FUZZ_REQUIRE(again.value().to_json() == out);
  return 0;
}
