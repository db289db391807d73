// Fuzz target: a Hugging Face model folder (exec/hf): its config.json read for a model (model_config_from_hf through
// each family's strict reader) and its safetensors header checked whole. The input is a folder in one piece: 4 bytes
// (little-endian) of config.json's length, config.json, then model.safetensors. Every accepted configuration
// validates; every accepted tensor lies within its file, has the bytes its dtype and shape need, and overlaps none.
#include <algorithm>
#include <cstring>
#include <vector>

#include "exec/hf.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  if (n > size - 4) return 0;
  tt::fuzz::Scratch& scratch = tt::fuzz::Scratch::get();
  (void)scratch.fresh_folder("hf");
  const std::string config = scratch.write("hf/config.json", tt::fuzz::as_text(data + 4, n));
  const std::string weights =
      scratch.write("hf/model.safetensors", tt::fuzz::as_text(data + 4 + n, size - 4 - n));
  const std::string dir = config.substr(0, config.rfind('/'));
  auto cfg = tt::read_hf_config(dir, 16);
  if (tt::fuzz::accepted(cfg) && cfg.value()) {
    TT_FUZZ_REQUIRE(cfg.value()->validate().is_ok());
    TT_FUZZ_REQUIRE(cfg.value()->seq == 16);
  }
  auto tensors = tt::read_safetensors(dir);
  if (!tt::fuzz::accepted(tensors)) return 0;
  const uint64_t file = size - 4 - n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : tensors.value()) {
    uint64_t count = 1;
    for (int64_t d : e.shape) {
      TT_FUZZ_REQUIRE(d >= 0);
      count *= static_cast<uint64_t>(d);
    }
    TT_FUZZ_REQUIRE(e.bytes == count * tt::dtype_size(e.dtype));
    TT_FUZZ_REQUIRE(e.begin <= file && e.bytes <= file - e.begin);
    if (e.bytes > 0) ranges.emplace_back(e.begin, e.begin + e.bytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) TT_FUZZ_REQUIRE(ranges[i].first >= ranges[i - 1].second);
  return 0;
}
