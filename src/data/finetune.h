// data/finetune: fine-tuning examples (JSON Lines) to tokens with a loss mask (Note [loss mask] in data/dataset.h),
// packed one after another into the token stream that training windows are cut from.
//
// Each line is one example, one of two kinds (Note [fine-tuning examples]):
//   {"prompt": "...", "completion": "..."}
//       the tokens the tokenizer's template puts before a text (Llama 3's <|begin_of_text|>), the prompt's, then the
//       completion's and the end-of-text token (tokenizer_config.json's eos_token); the loss counts the completion
//       and the end token only;
//   {"messages": [{"role": "system" | "user" | "assistant" | ..., "content": "..."}, ...]}
//       the conversation as the model's chat template lays it out (tokenizer_config.json's chat_template, run by
//       data/chat_template.h); the loss counts what the template writes for each assistant message.
// Blank lines are skipped; anything else that is not such an object is an error naming its line.
//
//   Tokens tokens;
//   FinetuneStats stats;
//   TT_TRY(tokenize_examples("chats.jsonl", tok, &tokens, &stats));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

namespace tt::data {

struct FinetuneStats {
  int64_t examples = 0;
  int64_t tokens = 0;   // written
  int64_t counted = 0;  // of which the loss counts
};

// Whether a data file is fine-tuning examples: its name ends in .jsonl.
bool is_examples_file(const std::string& path);

// The tokens of one example (a line of JSON Lines, `where` naming it in errors), appended to *ids with kNoLoss on
// those the loss does not count.
Status tokenize_example(std::string_view line, const Tokenizer& tok, const std::string& where,
                        std::vector<uint32_t>* ids, FinetuneStats* stats);

// Every example of a JSON Lines file, appended to *out (wide tokens with their mask).
Status tokenize_examples(const std::string& path, const Tokenizer& tok, std::vector<uint32_t>* out,
                         FinetuneStats* stats);

}  // namespace tt::data
