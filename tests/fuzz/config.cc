// Fuzz target: a configuration file (--config, TIERTRAIN_CONFIG: core/config) over the train command's knobs, then the
// typed configuration of a run (exec/train_config) from what it set.
#include "core/config.h"
#include "exec/train_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tt::fuzz::Scratch::get().write("config.json", tt::fuzz::as_text(data, size));
  tt::Config cfg;
  tt::declare_train_knobs(cfg);
  if (!tt::fuzz::accepted(cfg.load_file(path))) return 0;
  (void)cfg.describe();
  (void)cfg.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)tt::fuzz::accepted(tt::train_config_from(cfg));
  return 0;
}
