// Fuzz target: a chat template (data/chat_template: render_chat), the input being the template's text, run on a
// fixed conversation with and without the generation prompt. Accepted or refused, never a crash or a hang (the
// interpreter bounds its nesting, its ranges and its output); the same template renders the same text again.
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string tmpl(tt::fuzz::as_text(data, size));
  const std::vector<tt::ChatMessage> messages = {
      {"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "{{ not a template }}"}};
  auto plain = tt::render_chat(tmpl, messages, false, {"<s>", "</s>"});
  auto with = tt::render_chat(tmpl, messages, true, {"<s>", "</s>"});
  (void)tt::fuzz::accepted(plain);
  (void)tt::fuzz::accepted(with);
  // The same template runs the same way each time.
  auto again = tt::render_chat(tmpl, messages, false, {"<s>", "</s>"});
  TT_FUZZ_REQUIRE(again.is_ok() == plain.is_ok());
  if (plain.is_ok()) TT_FUZZ_REQUIRE(again.value() == plain.value());
  return 0;
}
