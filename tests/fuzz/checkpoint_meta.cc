// Fuzz target: a checkpoint's metadata (exec/checkpoint), read strictly, then checked against a run with the same
// model and data, so that the sampler's position is checked too (data::windows_drawn over a training split of up to
// 2^20 tokens, sized from the input). Every accepted state must have the ranges the reader promises.
#include "exec/checkpoint.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json meta = tt::fuzz::parse_json(data, size);
  if (meta.is_discarded()) return 0;
  auto st = tt::checkpoint_state_from_meta(meta, "fuzz.ttf");
  if (!tt::fuzz::accepted(st)) return 0;
  const tt::CheckpointState& s = st.value();
  TT_FUZZ_REQUIRE(s.step >= 0 && s.batch >= 1);
  TT_FUZZ_REQUIRE(s.model.vocab >= 1 && s.model.layers >= 1 && s.model.dim >= 1 && s.model.heads >= 1 &&
                  s.model.seq >= 1);
  TT_FUZZ_REQUIRE(s.config.is_object());
  tt::CheckpointState expected = s;
  expected.train_tokens = s.data_fingerprint % (uint64_t(1) << 20);
  (void)tt::fuzz::accepted(tt::check_checkpoint_continues(s, expected, "fuzz.ttf"));
  expected.model.dim = s.model.dim == 1 ? 2 : 1;  // a mismatch must be refused
  TT_FUZZ_REQUIRE(!tt::check_checkpoint_continues(s, expected, "fuzz.ttf").is_ok());
  return 0;
}
