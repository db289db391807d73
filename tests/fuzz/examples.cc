// Fuzz target: fine-tuning examples (data/finetune: tokenize_example), the input being JSON Lines, read through a
// small byte-level tokenizer with Llama 3's special tokens and chat template (written once to a scratch folder).
// Every line is accepted or refused; an accepted one's ids are in the vocabulary, the counted ones no more than all,
// and the counts add up.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/finetune.h"
#include "data/tokenizer.h"
#include "../gpt2_vocab.h"
#include "fuzz_util.h"

namespace {

const tt::Tokenizer& tokenizer() {
  static const tt::Tokenizer* tok = [] {
    using nlohmann::json;
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[tt::testing::gpt2_char_of(b)] = b;
    vocab[tt::testing::gpt2_char_of('h') + tt::testing::gpt2_char_of('e')] = 256;
    json added = json::array();
    int id = 257;
    for (const char* t : {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"})
      added.push_back({{"id", id++}, {"content", t}, {"special", true}});
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    const json t = {{"added_tokens", added},   {"pre_tokenizer", byte_level}, {"decoder", byte_level},
                    {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h e"}}}}};
    tt::fuzz::Scratch& scratch = tt::fuzz::Scratch::get();
    (void)scratch.fresh_folder("examples");
    scratch.write("examples/tokenizer.json", t.dump());
    const std::string path = scratch.write(
        "examples/tokenizer_config.json",
        json{{"eos_token", "<|eot_id|>"},
             {"bos_token", "<|begin_of_text|>"},
             {"chat_template",
              "{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
              "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set "
              "content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
              "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"}}
            .dump());
    auto loaded = tt::Tokenizer::load(path.substr(0, path.rfind('/')));
    TT_FUZZ_REQUIRE(loaded.is_ok());
    return new tt::Tokenizer(std::move(loaded).value());
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tt::Tokenizer& tok = tokenizer();
  const std::string_view text = tt::fuzz::as_text(data, size);
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    std::vector<uint32_t> ids;
    tt::data::FinetuneStats stats;
    if (!tt::fuzz::accepted(tt::data::tokenize_example(line, tok, "line", &ids, &stats))) continue;
    TT_FUZZ_REQUIRE(stats.examples == 1);
    TT_FUZZ_REQUIRE(stats.tokens == static_cast<int64_t>(ids.size()));
    int64_t counted = 0;
    for (uint32_t id : ids) {
      TT_FUZZ_REQUIRE(static_cast<int>(id & ~tt::data::kNoLoss) < tok.vocab());
      counted += (id & tt::data::kNoLoss) ? 0 : 1;
    }
    TT_FUZZ_REQUIRE(counted == stats.counted && counted <= stats.tokens);
  }
  return 0;
}
