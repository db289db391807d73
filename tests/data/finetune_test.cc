// data/chat_template and data/finetune: chat templates as jinja2 renders them (with transformers' trim_blocks and
// lstrip_blocks), and fine-tuning examples to tokens with their loss mask.
//  - Llama 3's and ChatML's (Qwen2's) templates, and one using whitespace control, namespaces, slices, filtered
//    loops, filters, tests and operators, give jinja2's text (the expected strings are jinja2 3.1's output);
//  - what the interpreter does not support is an error naming it and its line;
//  - {"prompt", "completion"}: the template's first token and the prompt not counted, the completion and the end
//    token counted; {"messages"}: exactly the assistant's parts counted; malformed lines named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/finetune.h"
#include "data/tokenizer.h"
#include "gpt2_vocab.h"
#include "temp_dir.h"

namespace tt {
namespace {

const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
const char* kChatMl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
    "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";
const char* kFeatures = R"({%- set ns = namespace(n=0, sys='') %}
{%- if messages[0]['role'] == 'system' %}
    {%- set ns.sys = messages[0]['content']|trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set rest = messages %}
{%- endif %}
[{{ ns.sys|upper if ns.sys else 'none' }}]
{% for m in rest if m.role != 'tool' %}
  {% set ns.n = ns.n + 1 %}
  {{ loop.index }}/{{ loop.length }} {{ m.role ~ ':' }} {{ m['content'] }}{% if not loop.last %},{% endif %}

{% endfor %}
{{- ns.n }} {{ rest|length }} {{ 'x' in 'xyz' }} {{ 3 // 2 }} {{ 7 % 3 }} {{ 1.5 * 2 }} {{ none is none }} {{ rest[-1].role }}
{{ {'a': [1, 'b', true, none]}|tojson }} {{ ['p', 'q']|join('+') }} {{ 'a,b'.split(',')|last }} {{ '  s  '.strip() }}
{%- if add_generation_prompt %}<gen>{% endif %})";

const std::vector<ChatMessage> kMessages = {
    {"system", "  Be brief. "}, {"user", "Hi there"}, {"tool", "ignored"}, {"assistant", "Hello!"}};

std::string render(const char* tmpl, bool gen) {
  auto r = render_chat(tmpl, kMessages, gen, ChatOptions{"<|begin_of_text|>", "<|eot_id|>"});
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : std::string();
}

TEST(ChatTemplate, RendersAsJinja2Does) {
  EXPECT_EQ(render(kLlama3, false),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>tool<|end_header_id|>\n\nignored<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
  EXPECT_EQ(render(kLlama3, true), render(kLlama3, false) + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render(kChatMl, true),
            "<|im_start|>system\n  Be brief. <|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>tool\n"
            "ignored<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(kFeatures, false),
            "[BE BRIEF.]\n  1/2 user: Hi there,\n  2/2 assistant: Hello!\n2 3 True 1 1 3.0 True assistant\n"
            "{\"a\": [1, \"b\", true, null]} p+q b s");
  EXPECT_EQ(render(kFeatures, true), render(kFeatures, false) + "<gen>");
}

TEST(ChatTemplate, WhatItCannotRunIsNamedWithItsLine) {
  const auto refused = [](const std::string& tmpl, const std::string& words) {
    auto r = render_chat(tmpl, kMessages, false, {});
    ASSERT_FALSE(r.is_ok()) << tmpl;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  refused("a\n{% macro m() %}{% endmacro %}", "line 2: {% macro %}: not supported");
  refused("{{ messages|wordcount }}", "the filter 'wordcount'");
  refused("{% if true %}x", "without {% endif %}");
  refused("{{ raise_exception('no tools here') }}", "the template raised: no tools here");
  refused("{{ 'x' + 1 }}", "'+' of a string and a integer");
  refused("{{ 'unterminated }}", "never");
  refused("{% endfor %}", "without its opening tag");
}

// A byte-level tokenizer.json (ids 0-255 the bytes) with Llama 3's special tokens, and its tokenizer_config.json.
std::string write_tokenizer(testing::TempDir& dir, const std::string& chat_template) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[testing::gpt2_char_of(b)] = b;
  json added = json::array();
  int id = 256;
  for (const char* t : {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"})
    added.push_back({{"id", id++}, {"content", t}, {"special", true}});
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const json tok = {
      {"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", byte_level}, {"decoder", byte_level},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
        {"special_tokens", {{"<|begin_of_text|>", {{"ids", {256}}}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  dir.write("tokenizer.json", tok.dump());
  json config = {{"eos_token", "<|eot_id|>"}, {"bos_token", {{"content", "<|begin_of_text|>"}}}};
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  dir.write("tokenizer_config.json", config.dump());
  return dir.path();
}

// The ids of an example and the text of those the loss counts.
struct Encoded {
  std::vector<uint32_t> ids;
  std::string counted;
  data::FinetuneStats stats;
};
Encoded encode(const Tokenizer& tok, const std::string& line) {
  Encoded e;
  Status s = data::tokenize_example(line, tok, "test line", &e.ids, &e.stats);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  for (uint32_t id : e.ids)
    if ((id & data::kNoLoss) == 0) e.counted += tok.decode({static_cast<int32_t>(id)}).value();
  return e;
}

TEST(Finetune, PromptAndCompletionCountTheCompletionAndItsEnd) {
  testing::TempDir dir;
  auto tok = Tokenizer::load(write_tokenizer(dir, kLlama3));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->end_of_text(), 257);
  EXPECT_EQ(tok->bos_text(), "<|begin_of_text|>");
  const Encoded e = encode(*tok, R"({"prompt": "2+2=", "completion": " 4"})");
  ASSERT_EQ(e.ids.size(), 1 + 4 + 2 + 1u);
  EXPECT_EQ(e.ids[0], 256u | data::kNoLoss);  // <|begin_of_text|>, the template's
  EXPECT_EQ(e.ids[1], '2' | data::kNoLoss);
  EXPECT_EQ(e.counted, " 4<|eot_id|>");
  EXPECT_EQ(e.stats.examples, 1);
  EXPECT_EQ(e.stats.counted, 3);
  EXPECT_EQ(e.stats.tokens, 8);
}

TEST(Finetune, AConversationCountsExactlyTheAssistantsParts) {
  testing::TempDir dir;
  auto tok = Tokenizer::load(write_tokenizer(dir, kLlama3));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const Encoded e = encode(*tok, R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": "Bye"}, {"role": "assistant", "content": " See you. "}]})");
  EXPECT_EQ(e.counted, "Hello!<|eot_id|>See you.<|eot_id|>");
  // The whole is the template's text, encoded.
  std::string whole;
  for (uint32_t id : e.ids) whole += tok->decode({static_cast<int32_t>(id & ~data::kNoLoss)}).value();
  auto text = render_chat(kLlama3,
                          {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"},
                           {"assistant", " See you. "}},
                          false, ChatOptions{"<|begin_of_text|>", "<|eot_id|>"});
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(whole, text.value());
  EXPECT_EQ(e.ids[0], 256u | data::kNoLoss);  // one <|begin_of_text|>: the template's, not a second
}

TEST(Finetune, MalformedExamplesAreNamed) {
  testing::TempDir dir;
  auto tok = Tokenizer::load(write_tokenizer(dir, kLlama3));
  ASSERT_TRUE(tok.is_ok());
  const auto refused = [&](const std::string& line, const std::string& words) {
    std::vector<uint32_t> ids;
    data::FinetuneStats stats;
    Status s = data::tokenize_example(line, *tok, "x.jsonl line 3", &ids, &stats);
    ASSERT_FALSE(s.is_ok()) << line;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("x.jsonl line 3"), std::string::npos) << s.message();
  };
  refused("not json", "not a JSON object");
  refused(R"({"text": "x"})", "neither");
  refused(R"({"prompt": 3, "completion": "x"})", "\"prompt\" is 3, not a string");
  refused(R"({"messages": "hi"})", "not a list of messages");
  refused(R"({"messages": [{"role": "user"}]})", "\"content\" is missing");
  testing::TempDir bare;
  auto no_template = Tokenizer::load(write_tokenizer(bare, ""));
  ASSERT_TRUE(no_template.is_ok());
  std::vector<uint32_t> ids;
  data::FinetuneStats stats;
  Status s = data::tokenize_example(R"({"messages": [{"role": "user", "content": "x"}]})", *no_template, "here",
                                    &ids, &stats);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("needs the model's chat template"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tt
