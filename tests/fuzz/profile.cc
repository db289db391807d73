// Fuzz target: a calibration profile (--profile FILE, the performance model's rates: perf/profile), then the machine
// check that a profile of another machine is refused with.
#include "fuzz_util.h"
#include "perf/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = tt::fuzz::parse_json(data, size);
  if (j.is_discarded()) return 0;
  auto p = tt::perf::Profile::from_json(j);
  if (!tt::fuzz::accepted(p)) return 0;
  (void)p.value().to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
